"""tokenizer.json's BPE, looked up per query from an indexed copy: no 2 s vocabulary load.

`tokenizers` builds a BPE model from the whole vocabulary and merge list when it
loads tokenizer.json (Gemma's 256k tokens and ~250k merges: ~2 s of CPU). Encoding a
piece of text only ever consults entries that are substrings of it: BPE starts from
the piece's characters, and each merge joins two adjacent symbols into a longer
substring that must itself be in the vocabulary. So one query needs only the
vocabulary entries and merges whose token is a substring of one of its
pre-tokenized pieces.

This module keeps tokenizer.json's vocabulary and merges as sorted fixed-width key
arrays in one file (an index written once, beside the asset or in the user cache,
memory-mapped on open), and for each text builds a `tokenizers.Tokenizer` from the
original JSON with the model's vocabulary and merges cut to that subset: ids kept,
merge order kept (a merge's rank is only ever compared with another's). The same
library then runs the same algorithm on every entry it could have consulted, so the
ids equal the full tokenizer's.

Only plain BPE models take this path (no dropout, no continuing-subword prefix or
end-of-word suffix, whose symbols are not substrings of the text); anything else,
or an index that cannot be written, loads tokenizer.json in full as before.

The index records the asset's size, mtime_ns and sha256. A differing size or mtime
makes it hash the asset again: same hash, the stamp is refreshed; another hash, or
an unreadable index, and it is rebuilt.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import mmap
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from wherein.indexer.store.atomic import atomic_path

FORMAT = "wherein-bpe-index/1"
INDEX_SUFFIX = ".bpe-index"
_MAGIC = b"WHEREIN-BPE-INDEX\n"
_ALIGN = 64
_END = b"\xff"  # never in UTF-8: ends every key, so numpy's 'S' type strips no NUL of it


def _key(token: str) -> bytes:
    return token.encode("utf-8", "surrogatepass") + _END


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _stamp(path: Path) -> dict[str, int]:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def indexable(tokenizer: dict[str, Any]) -> bool:
    """True when every symbol the model can form is a substring of its input piece."""
    model = tokenizer.get("model") or {}
    return (
        model.get("type") == "BPE"
        and model.get("dropout") in (None, 0, 0.0)
        and not model.get("continuing_subword_prefix")
        and not model.get("end_of_word_suffix")
        and isinstance(model.get("vocab"), dict)
        and isinstance(model.get("merges"), list)
    )


def _pair(merge: Any) -> tuple[str, str]:
    if isinstance(merge, str):  # legacy "a b" form: exactly one space
        a, b = merge.split(" ")
        return a, b
    a, b = merge
    return str(a), str(b)


def _always(tokenizer: dict[str, Any]) -> dict[str, int]:
    """Entries every subset keeps: unk, the byte-fallback tokens, the added tokens."""
    vocab = tokenizer["model"]["vocab"]
    names = [tokenizer["model"].get("unk_token")]
    if tokenizer["model"].get("byte_fallback"):
        names += [f"<0x{b:02X}>" for b in range(256)]
    names += [t.get("content") for t in tokenizer.get("added_tokens") or []]
    return {n: vocab[n] for n in names if isinstance(n, str) and n in vocab}


def _fixed(keys: list[bytes]) -> np.ndarray:
    return np.array(keys, dtype=f"S{max((len(k) for k in keys), default=1)}")


def _write(target: Path, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """magic, header length, JSON header (meta + where each array lies), aligned arrays."""
    layout: dict[str, dict[str, Any]] = {}
    offsets: dict[str, int] = {}
    offset = 0
    for name, a in arrays.items():
        offsets[name] = offset
        layout[name] = {"dtype": a.dtype.str, "shape": list(a.shape), "offset": offset}
        offset += -(-a.nbytes // _ALIGN) * _ALIGN
    header = json.dumps({**meta, "arrays": layout}, ensure_ascii=False).encode()
    start = -(-(len(_MAGIC) + 16 + len(header)) // _ALIGN) * _ALIGN
    with atomic_path(target, durable=False) as tmp, tmp.open("wb") as f:
        f.write(_MAGIC + b"%15d\n" % len(header) + header)
        for name, a in arrays.items():
            f.seek(start + offsets[name])
            f.write(np.ascontiguousarray(a).tobytes())
        f.truncate(start + offset)


def _read_header(f, fmt: str) -> tuple[dict[str, Any], int]:
    if f.read(len(_MAGIC)) != _MAGIC:
        raise ValueError("not a BPE index")
    n = int(f.read(16))
    header = json.loads(f.read(n))
    if header.get("format") != fmt:
        raise ValueError(f"BPE index format {header.get('format')!r}")
    return header, -(-(len(_MAGIC) + 16 + n) // _ALIGN) * _ALIGN


def read_asset(asset: Path) -> tuple[bytes, dict[str, Any]]:
    """asset's bytes and what an index of them records of it (stamp taken first: an asset
    rewritten while read gets an older stamp, so its hash is checked on the next open)."""
    stamp = _stamp(asset)
    raw = asset.read_bytes()
    return raw, {**stamp, "sha256": hashlib.sha256(raw).hexdigest()}


def write_index(
    target: Path, fmt: str, about: dict[str, Any], arrays: dict[str, np.ndarray]
) -> None:
    """An index of one format: what read_asset recorded, more meta, and the arrays."""
    _write(target, {"format": fmt, **about}, arrays)


def build_index(asset: Path, target: Path) -> None:
    """Write target (atomically) from asset; ValueError when the model is not plain BPE."""
    raw, about = read_asset(asset)
    tokenizer = json.loads(raw)
    if not indexable(tokenizer):
        raise ValueError(f"{asset}: not a plain BPE tokenizer")
    model = tokenizer["model"]
    vocab = sorted((_key(t), i) for t, i in model["vocab"].items())
    merges = sorted(
        (_key(a + b), rank, len(a)) for rank, (a, b) in enumerate(map(_pair, model["merges"]))
    )
    shell = dict(tokenizer, model=dict(model, vocab=_always(tokenizer), merges=[]))
    meta = {
        **about,
        "shell": shell,
        "max_len": max((len(t) for t in model["vocab"]), default=1),
    }
    arrays = {
        "vocab_keys": _fixed([k for k, _ in vocab]),
        "vocab_ids": np.array([i for _, i in vocab], np.int64),
        "merge_keys": _fixed([k for k, _, _ in merges]),
        "merge_ranks": np.array([r for _, r, _ in merges], np.int64),
        "merge_splits": np.array([s for _, _, s in merges], np.int32),  # len(a) in characters
    }
    write_index(target, FORMAT, meta, arrays)


def _refresh_stamp(index: Path, stamp: dict[str, int], fmt: str) -> None:
    """Same bytes under a new mtime (a copy, a touch): rewrite the header, keep the arrays."""
    with index.open("rb") as f:
        header, start = _read_header(f, fmt)
        f.seek(start)
        body = f.read()
    layout = header.pop("arrays")
    arrays = {
        name: np.frombuffer(
            body, np.dtype(spec["dtype"]), int(np.prod(spec["shape"])), spec["offset"]
        ).reshape(spec["shape"])
        for name, spec in layout.items()
    }
    _write(index, {**header, **stamp}, arrays)


def _current(asset: Path, index: Path, fmt: str) -> bool:
    """Whether index describes asset's present bytes (refreshing a stale stamp if so)."""
    try:
        with index.open("rb") as f:
            header, _ = _read_header(f, fmt)
    except (OSError, ValueError):
        return False
    stamp = _stamp(asset)
    if all(header.get(k) == v for k, v in stamp.items()):
        return True
    if header.get("size") != stamp["size"] or header.get("sha256") != _sha256(asset):
        return False
    with contextlib.suppress(OSError, ValueError):  # if not, the hash is checked next time
        _refresh_stamp(index, stamp, fmt)
    return True


def cached_location(asset: Path, suffix: str = INDEX_SUFFIX) -> Path:
    """An index's place in the user's cache, named after the asset's resolved path."""
    import platformdirs

    key = hashlib.sha256(os.fsencode(asset.resolve())).hexdigest()[:24]
    return Path(platformdirs.user_cache_dir("wherein")) / "tokenizers" / f"{key}{suffix}"


def index_locations(asset: Path) -> list[Path]:
    """Beside the asset, else (a read-only models folder) in the user's cache."""
    return [asset.with_name(asset.name + INDEX_SUFFIX), cached_location(asset)]


def ensure_index(
    asset: Path,
    build: Callable[[Path, Path], None] | None = None,
    fmt: str = FORMAT,
    locations: list[Path] | None = None,
) -> Path | None:
    """A current index for asset (built if needed), or None when none can be had.

    By default tokenizer.json's index (build_index, FORMAT, index_locations); another
    table kept this way passes its own builder, format and places."""
    build = build or build_index
    locations = locations if locations is not None else index_locations(asset)
    for index in locations:
        if _current(asset, index, fmt):
            return index
    for index in locations:
        try:
            build(asset, index)
            return index
        except ValueError:
            return None  # not plain BPE (or not JSON): no location will help
        except OSError:
            continue
    return None


def map_index(index: Path, fmt: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """An index's header and its arrays, read-only views of one mapping of the file (which
    they keep open); ValueError when it is not an index of that format."""
    with index.open("rb") as f:
        header, start = _read_header(f, fmt)
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    # A query's look-ups are binary searches: a few scattered pages each. Without this
    # hint every page fault also maps its neighbours (read-ahead, fault-around), which
    # no search reads: a server held ~10 MB of the 14 MB file after a few dozen
    # queries, ~5 MB with it. The pages a search does read are read as before.
    with contextlib.suppress(AttributeError, OSError):  # no madvise off Linux/BSD
        mapped.madvise(mmap.MADV_RANDOM)
    arrays = {
        name: np.frombuffer(
            mapped, np.dtype(spec["dtype"]), int(np.prod(spec["shape"])), start + spec["offset"]
        ).reshape(spec["shape"])
        for name, spec in header.pop("arrays").items()
    }
    return header, arrays


class IndexedBPE:
    """encode(text) -> content ids, equal to Tokenizer.from_file(asset).encode(text, False).ids."""

    def __init__(self, index: Path, asset: Path | None = None) -> None:
        from tokenizers import Tokenizer

        self._asset = asset  # loaded in full only if a subset ever fails to build
        self._full: Any = None

        header, self._arrays = map_index(index, FORMAT)
        self._shell: dict[str, Any] = header["shell"]
        self._max_len = int(header["max_len"])
        self._added = [
            t["content"] for t in self._shell.get("added_tokens") or [] if t.get("content")
        ]
        # The shell (no merges, only the always-kept entries) has the real normalizer and
        # pre-tokenizer: they say which pieces of a text the model will be handed.
        shell = Tokenizer.from_str(json.dumps(self._shell, ensure_ascii=False))
        self._normalizer = shell.normalizer
        self._pre_tokenizer = shell.pre_tokenizer
        self._tokenizer_cls = Tokenizer

    def _pieces(self, text: str) -> set[str]:
        """Every string the model could be handed for text (a superset is harmless)."""
        segments = {text}
        for content in self._added:  # added tokens are cut out before normalisation
            segments |= {part for s in segments for part in s.split(content)}
        segments |= {f(s) for s in segments for f in (str.strip, str.lstrip, str.rstrip)}
        pieces: set[str] = set()
        for seg in segments:
            norm = self._normalizer.normalize_str(seg) if self._normalizer else seg
            pieces.add(norm)
            if self._pre_tokenizer is not None:
                pieces.update(p for p, _ in self._pre_tokenizer.pre_tokenize_str(norm))
        return pieces

    def _substrings(self, text: str) -> list[str]:
        out: set[str] = set()
        n = self._max_len
        for piece in self._pieces(text):
            for i in range(len(piece)):
                out.update(piece[i : j + 1] for j in range(i, min(len(piece), i + n)))
        return sorted(out)

    def _find(
        self, keys: np.ndarray, tokens: list[str]
    ) -> tuple[list[str], np.ndarray, np.ndarray]:
        """tokens that occur in keys, with the [lo, hi) range of their rows."""
        width = keys.dtype.itemsize
        enc = [_key(t) for t in tokens]
        tokens = [t for t, k in zip(tokens, enc, strict=True) if len(k) <= width]
        want = np.array([k for k in enc if len(k) <= width], dtype=keys.dtype)
        lo = np.searchsorted(keys, want, "left")
        hi = np.searchsorted(keys, want, "right")
        hit = hi > lo
        return [t for t, h in zip(tokens, hit, strict=True) if h], lo[hit], hi[hit]

    def tokenizer_for(self, text: str):
        """A Tokenizer holding every vocabulary entry and merge that text can reach."""
        a = self._arrays
        vocab = dict(self._shell["model"]["vocab"])
        found, lo, _ = self._find(a["vocab_keys"], self._substrings(text))
        vocab.update(zip(found, a["vocab_ids"][lo].tolist(), strict=True))
        merges: list[tuple[int, str, str]] = []
        made, lo, hi = self._find(a["merge_keys"], list(vocab))
        for token, start, stop in zip(made, lo.tolist(), hi.tolist(), strict=True):
            for rank, split in zip(
                a["merge_ranks"][start:stop].tolist(),
                a["merge_splits"][start:stop].tolist(),
                strict=True,
            ):
                left, right = token[:split], token[split:]
                if left in vocab and right in vocab:  # else a part is never a symbol here
                    merges.append((rank, left, right))
        merges.sort()
        model = dict(self._shell["model"], vocab=vocab, merges=[[x, y] for _, x, y in merges])
        spec = dict(self._shell, model=model)
        return self._tokenizer_cls.from_str(json.dumps(spec, ensure_ascii=False))

    def encode(self, text: str) -> list[int]:
        try:
            tokenizer = self.tokenizer_for(text)
        except Exception:  # noqa: BLE001 - a subset tokenizers refuses: the full one is exact
            if self._asset is None:
                raise
            if self._full is None:
                self._full = self._tokenizer_cls.from_file(str(self._asset))
            tokenizer = self._full
        return tokenizer.encode(text, add_special_tokens=False).ids
