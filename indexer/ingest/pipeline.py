"""The one ingest loop: bounded prefetch -> route -> batched image tower -> commit.

`wherein index` (ingest/run.py) and `wherein embed --engine local`
(scale/embed.py) both run it, so the same file gives the same vector on either
path by construction.

- Loading (read, hash, decode, preprocess) runs in a thread pool — Pillow and
  hashlib release the GIL — at most ``ahead`` items in front of the consumer, so
  the tower (the bottleneck) never waits for input and memory stays bounded.
- Routing runs in the caller's thread, in input order, so a route function may
  keep state (the moves claimed so far).
- The tower runs on each full batch of its largest signature as soon as it
  fills; a commit first embeds the partial batch left.
- A commit is due after ``every`` embedded items, or ``model_seconds`` of tower
  time, or ``quick_every`` items that need no model, or ``seconds`` of wall time
  with anything pending. The model-time rule bounds what a killed run loses with
  a slow tower: a run killed again and again still moves forward.
- A ``Side`` feeds steps that come from work a route started rather than from an input
  item (a video's frames, chunk by chunk, decoded on the same pool as the loads): they
  join the batches as they are ready, so photos keep flowing while a long video decodes.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable, Generator, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import numpy as np

I = TypeVar("I")  # noqa: E741 - an input item
L = TypeVar("L")  # what load() makes of it
T = TypeVar("T")  # what route() keeps for commit()


class Tower(Protocol):
    batch_size: int

    def embed(self, batch: np.ndarray) -> np.ndarray: ...


@dataclass
class Step(Generic[T]):
    """One routed file; pixels set: it goes through the tower, and vector is its result.

    pixels an array (a photo's one item) gives vector [d]; a list of n arrays (a file that
    yields n items) gives vector [n, d]. The tower batches items, not files: a file's items
    may span two tower runs.
    """

    item: T
    pixels: np.ndarray | list[np.ndarray] | None = None
    vector: np.ndarray | None = None


class Side(Protocol[T]):
    """Steps from work in flight on the decode pool, ready out of input order."""

    @property
    def busy(self) -> bool:
        """Work still in flight."""
        ...

    @property
    def saturated(self) -> bool:
        """As much in flight as memory allows: the loop waits before routing more."""
        ...

    def ready(self, block: bool) -> list[Step[T]]:
        """The steps done so far (block: wait for at least one while busy)."""
        ...


@dataclass(frozen=True)
class CommitPolicy:
    every: int = 32
    model_seconds: float = 2.0
    quick_every: int = 256
    seconds: float = 10.0

    def due(self, embedded: int, quick: int, model_seconds: float, wall_seconds: float) -> bool:
        if embedded >= self.every or quick >= self.quick_every:
            return True
        if embedded and model_seconds >= self.model_seconds:
            return True
        return bool(embedded or quick) and wall_seconds >= self.seconds


_END = object()


def default_workers() -> int:
    """Decode threads: enough to keep one tower busy; more only adds memory."""
    return max(2, min(8, os.cpu_count() or 2))


def prefetch(
    items: Iterable[I],
    load: Callable[[I], L],
    workers: int,
    ahead: int,
    pool: ThreadPoolExecutor | None = None,
) -> Generator[tuple[I, L], None, None]:
    """(item, load(item)) in input order, with at most `ahead` loads queued or running; on
    `pool` when given (the caller shuts it down), else on one of its own."""
    own = pool is None
    pool = pool or ThreadPoolExecutor(workers, thread_name_prefix="decode")
    window: deque[tuple[I, Future[L]]] = deque()
    it = iter(items)
    try:
        while True:
            while len(window) < ahead and (item := next(it, _END)) is not _END:
                window.append((item, pool.submit(load, item)))  # type: ignore[arg-type]
            if not window:
                return
            item, fut = window.popleft()
            yield item, fut.result()
    finally:
        if own:
            pool.shutdown(wait=True, cancel_futures=True)
        else:
            for _, fut in window:
                fut.cancel()


class _Pending(Generic[T]):
    """Steps since the last commit; the tower runs on each full batch as it fills."""

    def __init__(self, tower: Tower, clock: Callable[[], float]) -> None:
        self.tower, self.clock = tower, clock
        self.steps: list[Step[T]] = []
        # One entry per item, with its pixels and its row in the step's vector (None: the
        # step's one item, vector [d]).
        self.waiting: list[tuple[Step[T], int | None, np.ndarray]] = []
        self.left: dict[int, int] = {}  # id(step) -> its items still waiting for the tower
        self.embedded = 0  # items
        self.model_steps = 0  # steps with pixels
        self.model_seconds = 0.0

    def add(self, step: Step[T]) -> None:
        self.steps.append(step)
        if step.pixels is None:
            return
        self.model_steps += 1
        if isinstance(step.pixels, list):  # several items
            self.left[id(step)] = len(step.pixels)
            step.vector = None
            for j, pixels in enumerate(step.pixels):
                self._wait(step, j, pixels)
        else:
            self._wait(step, None, step.pixels)

    def _wait(self, step: Step[T], row: int | None, pixels: np.ndarray) -> None:
        self.embedded += 1
        self.waiting.append((step, row, pixels))
        if len(self.waiting) >= self.tower.batch_size:
            self.run_tower()

    def run_tower(self) -> None:
        if not self.waiting:
            return
        t = self.clock()
        vectors = self.tower.embed(np.stack([pixels for _, _, pixels in self.waiting]))
        self.model_seconds += self.clock() - t
        for (s, row, _), v in zip(self.waiting, vectors, strict=True):
            if row is None:
                s.vector, s.pixels = v, None
                continue
            assert s.pixels is not None
            if s.vector is None:
                s.vector = np.zeros((len(s.pixels), len(v)), v.dtype)
            s.vector[row] = v
            self.left[id(s)] -= 1
            if not self.left[id(s)]:
                del self.left[id(s)]
                s.pixels = None
        self.waiting.clear()

    def take(self) -> list[Step[T]]:
        self.run_tower()
        steps = self.steps
        self.steps, self.embedded, self.model_steps, self.model_seconds = [], 0, 0, 0.0
        return steps


def run_pipeline(
    items: Iterable[I],
    load: Callable[[I], L],
    route: Callable[[I, L], Step[T]],
    commit: Callable[[list[Step[T]]], None],
    tower: Tower,
    workers: int,
    policy: CommitPolicy = CommitPolicy(),  # noqa: B008 - frozen, shared safely
    clock: Callable[[], float] = time.perf_counter,
    pool: ThreadPoolExecutor | None = None,
    side: Side[T] | None = None,
) -> None:
    """Load every item, route it, embed what needs the model, and commit in batches (in
    order; a side's steps in the order they are ready). pool: the decode threads, shared
    with the side's work (the caller shuts it down)."""
    pending: _Pending[T] = _Pending(tower, clock)
    last = clock()

    def add(steps: Iterable[Step[T]]) -> None:
        nonlocal last
        for step in steps:
            pending.add(step)
            quick = len(pending.steps) - pending.model_steps
            if policy.due(pending.embedded, quick, pending.model_seconds, clock() - last):
                commit(pending.take())
                last = clock()

    ahead = workers * 4 + tower.batch_size
    with closing(prefetch(items, load, workers, ahead, pool)) as stream:
        for item, loaded in stream:
            add([route(item, loaded)])
            if side is not None:
                add(side.ready(block=False))
                while side.saturated:
                    add(side.ready(block=True))
    while side is not None and side.busy:
        add(side.ready(block=True))
    if pending.steps:
        commit(pending.take())
