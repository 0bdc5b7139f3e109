"""Live folders: follow file-system events after an index run and apply them as small runs.

Events (watchfiles: inotify, FSEvents, ReadDirectoryChangesW, or polling) are
only hints of *where* to look. Each batch of settled paths becomes a normal
incremental run (``Indexer.run``) over the smallest set of folders holding
them, so adds, changes, moves and deletes take the same crash-safe path as
``wherein index`` (plan against the catalog, route by hash, commit in
transactions, deletions last). A move inside one batch keeps its row and vector; deletions
wait for additions still settling, so that a rename lands in one batch.

A file is *settled* when its size and mtime stayed the same for ``quiet``
seconds: a photo still being copied or exported is not embedded half-written
(the run's own fstat check catches a write that starts during the read).
A path that disappeared is settled at once, unless another path is still settling: then
it waits for that one (up to ``Settler.hold``), so a rename into another folder (a
deletion there, an addition here) is applied in one batch, as a move.

Folders: a path that is a folder now (a folder moved or copied in) is walked
whole. A deleted path that is not a media name costs a walk of its parent
only when it was a folder (``Folders`` keeps the set of folders under the
roots current from the same events), so a deleted temporary file costs nothing.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from wherein.indexer.ingest.walk import under_any
from wherein.indexer.kinds.registry import is_media_path

if TYPE_CHECKING:
    from wherein.indexer.ingest.run import Indexer, RunStats

DEFAULT_QUIET_S = 1.0
SAVE_EVERY_S = 60.0  # longest the FAISS file lags the catalog while watching
HOLD_MIN_S = 5.0  # a deletion waits this long at least for additions to settle (see Settler)


@dataclass
class Settler:
    """Paths waiting until their file stops changing."""

    quiet: float = DEFAULT_QUIET_S
    clock: Callable[[], float] = time.monotonic
    # path -> ((size, mtime_ns) or None when missing, when that state was first seen)
    _pending: dict[str, tuple[tuple[int, int] | None, float]] = field(default_factory=dict)

    def note(self, path: str) -> None:
        """An event touched path: (re)start watching it."""
        self._pending[path] = (_state(path), self.clock())

    def ready(self) -> list[str]:
        """Paths unchanged for `quiet` seconds, and paths that are gone; they leave the queue.

        A gone path waits while a present one is still settling (for at most `hold`
        seconds): a rename into another folder is a deletion here and an addition there,
        and only a run that sees both plans it as a move, keeping the row and its vector.
        """
        now = self.clock()
        gone, settled, settling = [], [], False
        for path, (seen, since) in list(self._pending.items()):
            state = _state(path)
            if state is None:
                gone.append(path)
            elif state != seen:
                self._pending[path] = (state, now)
                settling = True
            elif now - since >= self.quiet:
                settled.append(path)
            else:
                settling = True
        if settling:
            gone = [p for p in gone if now - self._pending[p][1] >= self.hold]
        out = gone + settled
        for path in out:
            del self._pending[path]
        return sorted(out)

    @property
    def hold(self) -> float:
        """Longest a deletion waits for additions to settle (a file copied in for minutes
        must not keep a deleted photo searchable that long)."""
        return max(10.0 * self.quiet, HOLD_MIN_S)

    def __len__(self) -> int:
        return len(self._pending)


def _state(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def folders_to_walk(
    paths: Iterable[str],
    roots: Sequence[str],
    is_known_folder: Callable[[str], bool] = lambda _p: True,
) -> list[str]:
    """The fewest folders (under roots) whose walk covers every changed path.

    A path's folder is its nearest existing ancestor (a folder deleted with its
    photos is noticed from its parent); nested choices collapse into the outer one.
    """
    chosen: set[str] = set()
    for path in paths:
        if os.path.isdir(path):
            target = path
        elif is_media_path(path):
            target = os.path.dirname(path)
        elif os.path.lexists(path):
            continue  # a file that is not a photo or a video: nothing to index
        elif is_known_folder(path):
            target = os.path.dirname(path)  # a deleted folder that held indexed images
        else:
            continue  # a non-image file came and went (a temporary, a sidecar)
        while not os.path.isdir(target) and under_any(os.path.dirname(target), roots):
            target = os.path.dirname(target)
        if under_any(target, roots):
            chosen.add(target)
    out: list[str] = []
    for folder in sorted(chosen, key=lambda p: (p.count(os.sep), p)):
        if not under_any(folder, out):
            out.append(folder)
    return sorted(out)


class Folders:
    """The folders under the roots, kept current from events.

    Only to tell a deleted folder from a deleted file: once a path is gone,
    the file system cannot say what it was.
    """

    def __init__(self, roots: Sequence[str], include_hidden: bool = False) -> None:
        self.include_hidden = include_hidden
        self._dirs: set[str] = set()
        self._gone: set[str] = set()  # deleted since the last batch
        for root in roots:
            self._add_tree(root)

    def _add_tree(self, top: str) -> None:
        for d, subdirs, _files in os.walk(top):
            if not self.include_hidden:
                subdirs[:] = [s for s in subdirs if not s.startswith(".")]
            self._dirs.add(d)

    def note(self, deleted: bool, path: str) -> None:
        if not deleted:
            if os.path.isdir(path):
                self._add_tree(path)
        elif path in self._dirs:
            prefix = path.rstrip(os.sep) + os.sep
            gone = {d for d in self._dirs if d == path or d.startswith(prefix)}
            self._dirs -= gone
            self._gone |= gone

    def was_folder(self, path: str) -> bool:
        return path in self._dirs or path in self._gone

    def batch_done(self) -> None:
        self._gone.clear()


@dataclass
class WatchOptions:
    quiet: float = DEFAULT_QUIET_S  # seconds a file must stay unchanged
    debounce_ms: int = 400  # longest a burst of events is gathered before it is looked at
    include_hidden: bool = False
    ignore: Sequence[str] = ()  # folders never to react to (the index itself)
    force_polling: bool | None = None  # None: native events, polling where they do not work


def watch(
    roots: Sequence[str],
    apply: Callable[[list[str]], bool | None],
    options: WatchOptions | None = None,
    stop: threading.Event | None = None,
    on_ready: Callable[[], bool | None] | None = None,
) -> None:
    """Call apply(folders) for each batch of settled changes under roots.

    Runs until stop is set, or apply or on_ready returns False; Ctrl-C raises
    KeyboardInterrupt, as anywhere else. on_ready: called once the watch is in place
    (every change from then on is seen).
    """
    import watchfiles

    opts = options or WatchOptions()
    roots = [os.path.abspath(r) for r in roots]
    ignored = [os.path.abspath(p) for p in opts.ignore]
    settler = Settler(opts.quiet)
    folders = Folders(roots, opts.include_hidden)

    def wanted(_change, path: str) -> bool:
        if under_any(path, ignored):
            return False
        return opts.include_hidden or not _hidden(path, roots)

    tick_ms = max(50, int(opts.quiet * 250))  # re-check waiting files 4x per quiet period
    events = watchfiles.watch(
        *roots,
        watch_filter=wanted,
        debounce=opts.debounce_ms,
        step=50,
        stop_event=stop,
        rust_timeout=tick_ms,
        yield_on_timeout=True,
        force_polling=opts.force_polling,
        ignore_permission_denied=True,
        # Ctrl-C while waiting for events must not look like a watch that was told to stop.
        raise_interrupt=True,
    )
    started = False
    for changes in events:
        if not started:  # the first yield comes after the watcher is registered
            started = True
            if on_ready and on_ready() is False:
                return
        for change, path in changes:
            folders.note(change == watchfiles.Change.deleted, path)
            settler.note(path)
        ready = settler.ready()
        if ready:
            todo = folders_to_walk(ready, roots, folders.was_folder)
            folders.batch_done()
            if todo and apply(todo) is False:
                return


def follow(
    indexer: Indexer,
    roots: Sequence[str],
    options: WatchOptions | None = None,
    stop: threading.Event | None = None,
    on_batch: Callable[[list[str], RunStats], object] | None = None,
    on_ready: Callable[[], object] | None = None,
) -> bool:
    """Keep the index in line with roots: one incremental run per batch of settled changes.

    The first run, over all of roots, starts once the watch is in place; on_ready
    follows it. Returns True when Ctrl-C ended it (during a run or while waiting for
    changes), False when stop was set. Either way the FAISS file is saved on the way out.
    """
    opts = options or WatchOptions()
    # The index's own files (thumbnails are JPEGs) are not photos.
    opts = dataclasses.replace(opts, ignore=[*opts.ignore, str(indexer.store.dir)])
    interrupted: list[RunStats] = []  # a run that Ctrl-C stopped
    saved = [time.monotonic()]

    def apply(folders: list[str]) -> bool:
        # FAISS is rewritten whole on save: at most every SAVE_EVERY_S, not on each batch.
        persist = time.monotonic() - saved[0] >= SAVE_EVERY_S
        stats = indexer.run(folders, include_hidden=opts.include_hidden, persist_vectors=persist)
        if persist:
            saved[0] = time.monotonic()
        if on_batch:
            on_batch(folders, stats)
        if stats.interrupted:
            interrupted.append(stats)
            return False
        return True

    def ready() -> bool:
        # Changes between the caller's last run and the watch being in place have no
        # events: one run over the roots catches them (a walk and a plan when none).
        if not apply([os.path.abspath(r) for r in roots]):
            return False
        if on_ready:
            on_ready()
        return True

    try:
        watch(roots, apply, opts, stop, ready)
    except KeyboardInterrupt:
        return True
    finally:
        indexer.store.ensure_vectors(persist=True)
    return bool(interrupted)


def _hidden(path: str, roots: Sequence[str]) -> bool:
    for root in roots:
        if path == root or path.startswith(root.rstrip(os.sep) + os.sep):
            rel = os.path.relpath(path, root)
            return any(part.startswith(".") for part in rel.split(os.sep))
    return False
