"""A size limit for INDEX/cache (thumbnails, previews, masks, vision passes): least recently
used goes first. The web app and `search --mask` share it.

Recency is the file's mtime: a cache hit touches it (one utime call), so the order
survives restarts and needs no database. When a new entry takes the cache over its
limit, the oldest-used entries are deleted until it is back under 90% of the limit
(so not every new thumbnail triggers a scan). A mask entry (``<prompt>.json`` plus
its overlay and mask images) goes as one unit, its ``.json`` first: the mask service
treats an entry with any file missing as absent and computes it again.

Files being read for a response are pinned and never deleted; the web app reads a
cached file whole under the pin, so a response is never cut short by pruning.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

DEFAULT_CACHE_MB = 512
CACHE_MB_ENV = "WHEREIN_CACHE_MB"
PRUNE_TO = 0.9  # after pruning, the cache holds at most this fraction of the limit

log = logging.getLogger("wherein.cache")


def usable_cache(cache: Path) -> bool:
    """INDEX/cache may be written: it is a real folder inside the index (not a link elsewhere)."""
    try:
        if cache.is_symlink():
            log.warning("%s is a symbolic link: not caching thumbnails or masks there", cache)
            return False
        cache.mkdir(exist_ok=True)
        return os.access(cache, os.W_OK)
    except OSError:
        return False


def cache_limit_bytes(mb: float | None = None) -> int:
    """The limit in bytes: argument > WHEREIN_CACHE_MB > 512 MB."""
    if mb is None:
        raw = os.environ.get(CACHE_MB_ENV, "").strip()
        try:
            mb = float(raw) if raw else DEFAULT_CACHE_MB
        except ValueError:
            mb = DEFAULT_CACHE_MB
    return max(0, int(mb * 1024 * 1024))


@dataclass
class _Unit:
    """What is deleted together: one file, or a mask entry's three files (json first)."""

    files: list[Path]
    last_used: int  # ns
    size: int


class CacheJanitor:
    def __init__(self, root: Path, limit_bytes: int) -> None:
        self.root = root
        self.limit = limit_bytes
        self.pruned = 0  # files deleted so far (status, tests)
        self._pins: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._prune_lock = threading.Lock()
        self._approx: int | None = None  # bytes; None until the first scan

    # -- what the app tells it ------------------------------------------------------
    def used(self, path: Path) -> None:
        """A cache hit: make the file the most recently used."""
        with suppress(OSError):
            os.utime(path)

    def added(self, paths: list[Path]) -> None:
        """New cache files were written; prune if they take the cache over its limit."""
        size = 0
        for p in paths:
            with suppress(OSError):
                size += p.stat().st_size
        with self._lock:
            if self._approx is not None:
                self._approx += size
            due = self._approx is None or self._approx > self.limit
        if due:
            self.prune()

    @contextmanager
    def pinned(self, path: Path) -> Iterator[None]:
        """While inside, prune() leaves this file alone."""
        key = str(path)
        with self._lock:
            self._pins[key] += 1
        try:
            yield
        finally:
            with self._lock:
                self._pins[key] -= 1
                if self._pins[key] <= 0:
                    del self._pins[key]

    # -- pruning --------------------------------------------------------------------
    def prune(self) -> int:
        """Delete least recently used entries until the cache is under PRUNE_TO of its limit.

        Returns how many files were deleted. One prune at a time; others skip.
        """
        if not self._prune_lock.acquire(blocking=False):
            return 0
        try:
            units = list(self._units())
            total = sum(u.size for u in units)
            removed = 0
            if total > self.limit:
                target = self.limit * PRUNE_TO
                for unit in sorted(units, key=lambda u: u.last_used):
                    if total <= target:
                        break
                    if self._delete(unit):
                        total -= unit.size
                        removed += len(unit.files)
            with self._lock:
                self._approx = total
            self.pruned += removed
            return removed
        finally:
            self._prune_lock.release()

    def _delete(self, unit: _Unit) -> bool:
        with self._lock:
            if any(str(p) in self._pins for p in unit.files):
                return False
            for p in unit.files:  # json first: the entry reads as absent from the first unlink
                with suppress(FileNotFoundError):
                    p.unlink()
        folder = unit.files[0].parent
        if folder.parent != self.root:  # a mask folder left empty; never thumbs/, masks/, ...
            with suppress(OSError):
                folder.rmdir()
        return True

    def _units(self) -> Iterator[_Unit]:
        if not self.root.is_dir():
            return
        for folder, _dirs, names in os.walk(self.root):
            stats: dict[str, list[tuple[Path, os.stat_result]]] = {}
            for name in names:
                if name.startswith("."):  # a temporary file being written
                    continue
                path = Path(folder, name)
                try:
                    st = path.stat()
                except OSError:
                    continue
                stats.setdefault(name.split(".", 1)[0], []).append((path, st))
            for members in stats.values():
                members.sort(key=lambda m: not m[0].name.endswith(".json"))
                yield _Unit(
                    files=[p for p, _ in members],
                    last_used=max(st.st_mtime_ns for _, st in members),
                    size=sum(st.st_size for _, st in members),
                )
