"""--out writes only what it owns (issue 28): a mask or overlay never goes through a link planted
under its name, never replaces a file wherein did not write, and never goes into the index.
Its own files from an earlier run are replaced."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import run
from test_export_destinations import digest, indexed, one_error_line

from wherein.indexer.store.checked import CHECKED_FILE

__all__ = ["indexed"]  # the fixture, shared with the export tests

SEARCH = ["search", "red", "-k", "3", "--mask", "--json"]


def mask_names(tmp_path: Path) -> list[str]:
    """The names a search writes (learnt from a run into a scratch folder)."""
    hits = json.loads(run(*SEARCH, "--out", tmp_path / "scratch").stdout)
    return sorted(Path(h[k]).name for h in hits for k in ("mask_path", "overlay_path"))


@pytest.mark.parametrize("planted", ["symlink", "regular file"])
def test_a_file_planted_under_a_mask_name_is_never_written(indexed, tmp_path, planted):
    names = mask_names(tmp_path)
    out = tmp_path / "shared"
    out.mkdir()
    library = indexed["photos"]
    victim = library / "green.bmp"  # an indexed photo, not a hit of red
    before = digest(library)
    for name in names:
        if planted == "symlink":
            (out / name).symlink_to(victim)
        else:
            (out / name).write_bytes(b"somebody's file")
    res = run(*SEARCH, "--out", out, ok=False)
    assert "wherein did not write it" in one_error_line(res)
    assert digest(library) == before
    for name in names:
        p = out / name
        assert p.is_symlink() if planted == "symlink" else p.read_bytes() == b"somebody's file"
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary left


def test_an_earlier_runs_masks_are_replaced(indexed, tmp_path):
    out = tmp_path / "masks"
    first = json.loads(run(*SEARCH, "--out", out).stdout)
    again = json.loads(run(*SEARCH, "--out", out).stdout)
    assert [h["mask_path"] for h in again] == [h["mask_path"] for h in first]
    assert all(Path(h["mask_path"]).is_file() for h in again)
    # `wherein mask` into the same folder twice, too.
    photo = indexed["photos"] / "red_square.jpg"
    run("mask", photo, "red", "--out", out)
    run("mask", photo, "red", "--out", out)


@pytest.mark.parametrize("where", [".", "cache", "new"])
def test_no_mask_goes_into_the_index_folder(indexed, tmp_path, where):
    index = indexed["index"]
    (index / "cache").mkdir(exist_ok=True)
    alias = tmp_path / "alias"
    alias.symlink_to(index, target_is_directory=True)
    before = digest(index)
    for out in (index / where, alias / where):
        assert "index folder" in one_error_line(run(*SEARCH, "--out", out, ok=False))
        photo = indexed["photos"] / "red_square.jpg"
        res = run("mask", photo, "red", "--out", out, ok=False)
        assert "index folder" in one_error_line(res)
    # A reader's record of the catalog check it passed is the catalog's bookkeeping (as its
    # -shm is), not a mask: any search may write it.
    after = digest(index)
    after.pop(CHECKED_FILE, None)
    before.pop(CHECKED_FILE, None)
    assert after == before
    assert not (index / "new").exists()
