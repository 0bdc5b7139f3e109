"""Masks kept for the web app: a summary, an overlay JPEG and (once asked for) the mask PNG.

INDEX/cache/masks/<id>-<sha256[:16]>/<prompt-slug>-<sha256(prompt)[:12]>.{json,overlay.jpg,mask.png}

Keyed by the indexed content (IndexedFile.key), so a changed and re-indexed file gets new
entries; the prompt only reaches file names as a slug plus a hash. Files are written
atomically, the ``.json`` last (it marks an entry complete): an entry with its overlay
or summary missing (a prune took it) is absent. When the folder cannot be written (a
read-only index), the most recent entries are kept in memory instead.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wherein.indexer.indexed import IndexedFile
from wherein.search.cache.thumbs import _write_atomic

MEMORY_CACHE = 32  # entries kept in memory when the index folder is read-only
KINDS = {"overlay": ("overlay.jpg", "image/jpeg"), "mask": ("mask.png", "image/png")}


@dataclass
class MaskEntry:
    summary: dict[str, Any]  # MaskResult.summary() plus id and cached
    # kind -> file on disk, or bytes kept in memory; "mask" only once it was asked for
    files: dict[str, Path | bytes]


def prompt_key(prompt: str) -> str:
    from wherein.search.localize.masking import slug

    return f"{slug(prompt)}-{hashlib.sha256(prompt.encode()).hexdigest()[:12]}"


class KeptMasks:
    """The kept mask entries of one index (or of memory alone: directory None)."""

    def __init__(
        self, directory: Path | None, on_added: Callable[[list[Path]], object] | None = None
    ) -> None:
        """on_added: told of each new file written (the cache's size limit)."""
        self.dir = directory
        self.on_added = on_added
        self._memory: OrderedDict[str, MaskEntry] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, f: IndexedFile, pkey: str) -> MaskEntry | None:
        """The kept entry (summary with cached=True), or None."""
        with self._lock:
            mem = self._memory.get(f"{f.key}/{pkey}")
        if mem is not None:
            return MaskEntry({**mem.summary, "cached": True}, mem.files)
        folder = self._folder(f)
        if folder is None:
            return None
        meta = folder / f"{pkey}.json"
        files = {kind: folder / f"{pkey}.{suffix}" for kind, (suffix, _) in KINDS.items()}
        if not meta.is_file() or not files["overlay"].is_file():
            return None
        try:
            summary = json.loads(meta.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        made: dict[str, Path | bytes] = {k: p for k, p in files.items() if p.is_file()}
        if "overlay" not in made:  # a concurrent prune took it after the check above: a miss
            return None
        return MaskEntry({**summary, "cached": True}, made)

    def put(self, f: IndexedFile, pkey: str, summary: dict[str, Any], overlay: bytes) -> MaskEntry:
        """Keep a new mask's summary and overlay; the entry (cached=False)."""
        folder = self._folder(f)
        if folder is not None:
            path = folder / f"{pkey}.{KINDS['overlay'][0]}"
            meta = folder / f"{pkey}.json"  # last: marks the entry complete
            if self._write([(path, overlay), (meta, json.dumps(summary).encode())]):
                return MaskEntry({**summary, "cached": False}, {"overlay": path})
        entry = MaskEntry(summary, {"overlay": overlay})
        with self._lock:
            self._memory[f"{f.key}/{pkey}"] = entry
            while len(self._memory) > MEMORY_CACHE:
                self._memory.popitem(last=False)
        return MaskEntry({**summary, "cached": False}, dict(entry.files))

    def png_path(self, f: IndexedFile, pkey: str) -> Path | None:
        """Where the mask PNG is (or would be) kept on disk; None without a folder."""
        folder = self._folder(f)
        return folder / f"{pkey}.{KINDS['mask'][0]}" if folder is not None else None

    def put_png(self, f: IndexedFile, pkey: str, png: bytes) -> Path | bytes:
        """Keep the mask PNG beside its entry: its path, or the bytes (kept in memory)."""
        path = self.png_path(f, pkey)
        if path is not None and self._write([(path, png)]):
            return path
        with self._lock:
            mem = self._memory.get(f"{f.key}/{pkey}")
            if mem is not None:
                mem.files["mask"] = png
        return png

    def forget(self, f: IndexedFile) -> None:
        """Drop every entry of one catalog id, in memory and on disk."""
        prefix = f"{f.id}-"
        with self._lock:
            for key in [k for k in self._memory if k.startswith(prefix)]:
                del self._memory[key]
        if self.dir is not None:
            try:
                folders = list(self.dir.glob(f"{prefix}*"))
            except OSError:
                folders = []
            for folder in folders:
                shutil.rmtree(folder, ignore_errors=True)

    def _folder(self, f: IndexedFile) -> Path | None:
        return self.dir / f.key if self.dir is not None else None

    def _write(self, files: list[tuple[Path, bytes]]) -> bool:
        """Write the files in order and tell on_added; False (and memory only from now on)
        when the folder cannot be written."""
        try:
            for path, data in files:
                _write_atomic(path, data)
        except OSError:
            self.dir = None  # read-only index: keep results in memory from now on
            return False
        if self.on_added is not None:
            self.on_added([path for path, _ in files])
        return True
