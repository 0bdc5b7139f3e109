"""open_clip's CLIP BPE without torch, its tables memory-mapped from an index file.

open_clip's SimpleTokenizer imports torch, so its ~40 lines of byte-level BPE are repeated
here over the same bundled merges file (the LiteRT text tower's "clip-bpe" recipe and
CLIPSeg's prompts). Its vocabulary and merge ranks are two sorted key tables. Parsing the
gzipped merges into them costs ~0.15 s and leaves ~15 MB of freed Python strings in the
heap of a long-lived process (the web app's masks): they are written once into an index in
the user's cache (bpe_index's file format, its own format name) and memory-mapped after
that, so a process holds only the few pages its prompts' binary searches read. The index
follows the merges file's size, mtime and SHA-256, as the tokenizer.json index does; where
none can be written the tables are built in memory as before.
"""

from __future__ import annotations

import gzip
import math
from functools import lru_cache
from pathlib import Path

import numpy as np

from wherein.indexer.models.bpe_index import (
    cached_location,
    ensure_index,
    map_index,
    read_asset,
    write_index,
)
from wherein.schemas.errors import ModelError

CLIP_BPE_FILE = "bpe_simple_vocab_16e6.txt.gz"
INDEX_FORMAT = "wherein-clip-bpe-index/1"
INDEX_SUFFIX = ".clip-bpe-index"
_MERGES = 49152 - 256 - 2  # the merges open_clip uses, after the file's header line
_SPECIALS = ("<start_of_text>", "<end_of_text>")


def open_clip_bpe_file() -> Path:
    """open_clip's bundled CLIP BPE merges, found without importing open_clip (it imports torch)."""
    import importlib.util

    spec = importlib.util.find_spec("open_clip")
    path = Path(spec.origin).parent / CLIP_BPE_FILE if spec and spec.origin else None
    if path is None or not path.is_file():
        raise ModelError(
            "open_clip's bundled CLIP BPE vocabulary not found (is open-clip-torch installed?)"
        )
    return path


@lru_cache
def _bytes_to_unicode() -> dict[int, str]:
    bs = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs], strict=True))


class _Table:
    """A read-only str -> int map: its UTF-8 keys sorted and laid end to end (offsets say
    where each ends), and their values; a look-up is a binary search.

    49k keys take ~0.85 MB this way. As a dict of str keys (and, for the merges, a tuple of
    two more strs each) they took ~25 MB of a server's heap; as fixed-width arrays, 3.2 MB
    each, most of which a prompt's scattered look-ups faulted in from a mapped index. Of
    keys given twice the last one's value holds, as in a dict built in the same order."""

    def __init__(self, blob: np.ndarray, ends: np.ndarray, values: np.ndarray) -> None:
        self.arrays = {"blob": blob, "ends": ends, "values": values}
        # memoryviews: indexing one gives a Python int or bytes without numpy's scalar boxing
        self._blob = np.ascontiguousarray(blob, dtype=np.uint8).data
        self._ends = np.ascontiguousarray(ends, dtype=np.int32).data
        self._values = np.ascontiguousarray(values, dtype=np.int32).data

    @classmethod
    def build(cls, keys: list[str]) -> _Table:
        latest = {k.encode("utf-8"): i for i, k in enumerate(keys)}  # the last one wins
        ordered = sorted(latest)
        ends = np.cumsum([len(k) for k in ordered], dtype=np.int64)
        blob = np.frombuffer(b"".join(ordered), dtype=np.uint8)
        values = np.array([latest[k] for k in ordered], dtype=np.int32)
        return cls(blob, ends.astype(np.int32), values)

    def __len__(self) -> int:
        return len(self._values)

    def _key(self, i: int) -> bytes:
        return self._blob[self._ends[i - 1] if i else 0 : self._ends[i]].tobytes()

    def get(self, key: str) -> int | None:
        k = key.encode("utf-8")
        lo, hi = 0, len(self._values)
        while lo < hi:
            mid = (lo + hi) // 2
            if self._key(mid) < k:
                lo = mid + 1
            else:
                hi = mid
        if lo < len(self._values) and self._key(lo) == k:
            return self._values[lo]
        return None

    def __getitem__(self, key: str) -> int:
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return value


def build_tables(raw: bytes) -> tuple[_Table, _Table]:
    """The vocabulary and the merge ranks from the gzipped merges file's bytes."""
    # maxsplit: the file holds 262k lines; splitting all of them left ~7 MB of freed
    # small strings in the heap of a long-lived process
    lines = gzip.decompress(raw).decode("utf-8").split("\n", _MERGES + 1)[1 : _MERGES + 1]
    # A merge (a, b) is keyed "a b": no BPE symbol holds a space (bytes_to_unicode). The
    # lines are already "a b", so they are kept as they are, not split into pairs and
    # joined again: ~100k short-lived objects fewer.
    merges = [m if m.count(" ") == 1 and m.strip() == m else " ".join(m.split()) for m in lines]
    del lines
    vocab = list(_bytes_to_unicode().values())
    vocab = vocab + [v + "</w>" for v in vocab] + [m.replace(" ", "") for m in merges]
    vocab.extend(_SPECIALS)
    encoder = _Table.build(vocab)
    del vocab
    return encoder, _Table.build(merges)


def build_index(asset: Path, target: Path) -> None:
    """Write target (atomically): the two tables of the merges file asset."""
    raw, about = read_asset(asset)
    try:
        encoder, ranks = build_tables(raw)
    except (OSError, EOFError, UnicodeDecodeError) as exc:  # not gzip, or not text
        raise ValueError(f"{asset}: not a CLIP BPE merges file ({exc})") from exc
    arrays = {f"vocab_{k}": a for k, a in encoder.arrays.items()}
    arrays.update({f"merges_{k}": a for k, a in ranks.arrays.items()})
    write_index(target, INDEX_FORMAT, about, arrays)


def load_tables(bpe_path: Path) -> tuple[_Table, _Table]:
    """The tables mapped from a current index (written first if need be), else built here.

    The index goes to the user's cache only: the merges file usually sits in open_clip's
    installed package, which is not ours to write into."""
    index = ensure_index(
        bpe_path,
        build=build_index,
        fmt=INDEX_FORMAT,
        locations=[cached_location(bpe_path, INDEX_SUFFIX)],
    )
    if index is not None:
        try:
            _, a = map_index(index, INDEX_FORMAT)
            return (
                _Table(a["vocab_blob"], a["vocab_ends"], a["vocab_values"]),
                _Table(a["merges_blob"], a["merges_ends"], a["merges_values"]),
            )
        except (OSError, ValueError, KeyError):
            pass  # replaced or unreadable since it was checked: the file itself is exact
    return build_tables(bpe_path.read_bytes())


class ClipBPE:
    """open_clip's SimpleTokenizer.encode (content ids only), without torch."""

    def __init__(self, bpe_path: Path) -> None:
        import regex

        self.encoder, self.ranks = load_tables(bpe_path)
        self.cache: dict[str, str] = {t: t for t in _SPECIALS}
        self.byte_encoder = _bytes_to_unicode()
        self.pat = regex.compile(
            "|".join(_SPECIALS) + r"""|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+""",
            regex.IGNORECASE,
        )

    def _rank(self, pair: tuple[str, str]) -> float:
        rank = self.ranks.get(f"{pair[0]} {pair[1]}")
        return math.inf if rank is None else rank

    def _bpe(self, token: str) -> str:
        if token in self.cache:
            return self.cache[token]
        word = (*token[:-1], token[-1] + "</w>")
        while len(word) > 1:
            pairs = {(a, b) for a, b in zip(word[:-1], word[1:], strict=True)}
            ranked = {p: self._rank(p) for p in pairs}
            best = min(pairs, key=ranked.__getitem__)
            if ranked[best] == math.inf:
                break
            merged, i = [], 0
            while i < len(word):
                if i < len(word) - 1 and (word[i], word[i + 1]) == best:
                    merged.append(word[i] + word[i + 1])
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            word = tuple(merged)
        out = " ".join(word)
        self.cache[token] = out
        return out

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for token in self.pat.findall(text):
            token = "".join(self.byte_encoder[b] for b in token.encode("utf-8"))
            ids.extend(self.encoder[t] for t in self._bpe(token).split(" "))
        return ids
