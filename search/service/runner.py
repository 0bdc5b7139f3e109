"""One worker thread that runs what a person waits for before what was guessed.

The mask work must stay on one thread (a LiteRT graph keeps an interpreter per
thread), so a click and a background guess share it. A task asked for now
(priority NOW) always starts before any queued guess (LATER); a running task
is never stopped, so a click waits at most for the one guess already running.
A new round of guesses replaces the queued ones of the last round (the user
ran another search: its hits matter, the old ones do not). ``close`` cancels the
queued guesses and waits for the worker, so nothing it reads (the catalog, a model)
is closed under it.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

NOW, LATER = 0, 1
JOIN_S = 120.0  # the longest a close waits for the running task (one vision pass is ~1 s)

log = logging.getLogger("wherein.serve")


class PriorityRunner:
    def __init__(self, name: str, on_start: Callable[[], object] | None = None) -> None:
        """on_start: run first on the worker thread (e.g. lanes.background)."""
        self._on_start = on_start
        self._heap: list[tuple[int, int, Callable[[], Any], Future]] = []
        self._order = itertools.count()
        self._cv = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], Any], priority: int = NOW) -> Future:
        fut: Future = Future()
        with self._cv:
            if self._closed:
                raise RuntimeError("runner is closed")
            heapq.heappush(self._heap, (priority, next(self._order), fn, fut))
            self._cv.notify()
        return fut

    def drop(self, priority: int) -> int:
        """Cancel the queued (not yet running) tasks of one priority; returns how many."""
        with self._cv:
            keep = [t for t in self._heap if t[0] != priority]
            gone = [t for t in self._heap if t[0] == priority]
            self._heap = keep
            heapq.heapify(self._heap)
        for t in gone:
            t[3].cancel()
        return len(gone)

    def pending(self, priority: int) -> int:
        with self._cv:
            return sum(1 for t in self._heap if t[0] == priority)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Refuse new tasks, cancel the queued guesses, run what was asked for now, and wait
        for the worker to finish (the running task is never interrupted)."""
        with self._cv:
            self._closed = True
            self._cv.notify()
        self.drop(LATER)
        if self._thread is not threading.current_thread():
            self._thread.join(JOIN_S)
            if self._thread.is_alive():
                log.warning("the mask worker did not finish within %.0f s", JOIN_S)

    def _work(self) -> None:
        if self._on_start is not None:
            self._on_start()
        while True:
            with self._cv:
                while not self._heap and not self._closed:
                    self._cv.wait()
                if not self._heap:
                    return  # closed and drained
                _, _, fn, fut = heapq.heappop(self._heap)
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn())
            except BaseException as exc:  # handed to whoever waits on the future
                fut.set_exception(exc)
