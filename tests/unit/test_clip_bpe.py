"""CLIP BPE's tables come from an index that follows the merges file, with the file's own ids."""

from __future__ import annotations

import gzip
import shutil

import pytest

from wherein.indexer.models import clip_bpe
from wherein.indexer.models.clip_bpe import ClipBPE, build_tables, open_clip_bpe_file

TEXTS = ["a photo of a red car", "zebra crossing at dusk", "électricité", "it's 42 km/h"]


@pytest.fixture
def merges(tmp_path, monkeypatch):
    """A copy of open_clip's merges file, its index kept in tmp_path/cache."""
    asset = tmp_path / "bpe.txt.gz"
    shutil.copy(open_clip_bpe_file(), asset)
    monkeypatch.setattr(clip_bpe, "cached_location", lambda a, s: tmp_path / "cache" / f"x{s}")
    return asset


def _in_memory(asset, texts: list[str]) -> list[list[int]]:
    """The ids with tables built from the file here and now (no index involved)."""
    bpe = ClipBPE(asset)
    bpe.encoder, bpe.ranks = build_tables(asset.read_bytes())
    return [bpe.encode(t) for t in texts]


def test_a_second_load_maps_the_index_without_parsing_the_merges(merges, monkeypatch):
    first = [ClipBPE(merges).encode(t) for t in TEXTS]
    assert (merges.parent / "cache" / "x.clip-bpe-index").is_file()

    def no_parse(raw):
        raise AssertionError("the merges file was parsed again")

    monkeypatch.setattr(clip_bpe, "build_tables", no_parse)
    assert [ClipBPE(merges).encode(t) for t in TEXTS] == first
    monkeypatch.undo()
    assert first == _in_memory(merges, TEXTS)
    assert first[0] == [320, 1125, 539, 320, 736, 1615]  # open_clip's ids for it


def test_a_changed_merges_file_is_indexed_again(merges):
    before = ClipBPE(merges).encode("zebra")
    lines = gzip.decompress(merges.read_bytes()).decode().split("\n")
    # The merges that make "zebra" removed: it must now come out in smaller pieces.
    kept = [m for m in lines[1:] if m.replace(" ", "") != "zebra</w>"]
    merges.write_bytes(gzip.compress("\n".join(lines[:1] + kept).encode()))
    after = ClipBPE(merges).encode("zebra")
    assert len(before) == 1 and len(after) > 1  # no longer one token
    assert [after] == _in_memory(merges, ["zebra"])


def test_a_damaged_index_is_rebuilt(merges):
    want = [ClipBPE(merges).encode(t) for t in TEXTS]
    index = merges.parent / "cache" / "x.clip-bpe-index"
    index.write_bytes(b"garbage")
    assert [ClipBPE(merges).encode(t) for t in TEXTS] == want
    assert index.stat().st_size > 1000


def test_without_a_writable_cache_the_tables_are_built_in_memory(merges, monkeypatch):
    want = [ClipBPE(merges).encode(t) for t in TEXTS]
    below_a_file = merges / "index"
    monkeypatch.setattr(clip_bpe, "cached_location", lambda a, s: below_a_file)
    assert [ClipBPE(merges).encode(t) for t in TEXTS] == want
