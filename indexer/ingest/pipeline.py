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
  fills; a commit first embeds the partial batch left. A tower with a lane pool
  (ImageTower: one single-threaded interpreter per core) takes each batch on one
  of its lanes while this thread goes on routing, so the cores never wait on a
  hand-off. A commit is sealed when due and written once all its vectors are in,
  while the next batch is routed (one sealed commit waits at most): commits stay
  whole, in order, and the lanes never drain for one.
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
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import numpy as np

I = TypeVar("I")  # noqa: E741 - an input item
L = TypeVar("L")  # what load() makes of it
T = TypeVar("T")  # what route() keeps for commit()


class Tower(Protocol):
    """embed() runs in this thread, unless the tower also has ``lane_pool() -> Executor``:
    then embed() is called on that pool's threads, several batches at a time."""

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


def _timed(
    embed: Callable[[np.ndarray], np.ndarray], batch: np.ndarray, clock: Callable[[], float]
) -> tuple[np.ndarray, float]:
    t = clock()
    vectors = embed(batch)
    return vectors, clock() - t


# One tower run in flight: its items (step, row, pixels) and its (vectors, model seconds).
_Flight = tuple[list[tuple[Step, int | None, np.ndarray]], Future[tuple[np.ndarray, float]]]


@dataclass
class _Sealed(Generic[T]):
    """One commit's steps, due to be written once their tower runs have landed."""

    steps: list[Step[T]]
    flying: deque[_Flight]


class _Pending(Generic[T]):
    """Steps since the last commit; the tower runs on each full batch as it fills."""

    def __init__(self, tower: Tower, clock: Callable[[], float]) -> None:
        self.tower, self.clock = tower, clock
        lane_pool = getattr(tower, "lane_pool", None)
        self.lanes: Executor | None = lane_pool() if callable(lane_pool) else None
        self.steps: list[Step[T]] = []
        # One entry per item, with its pixels and its row in the step's vector (None: the
        # step's one item, vector [d]).
        self.waiting: list[tuple[Step[T], int | None, np.ndarray]] = []
        self.flying: deque[_Flight] = deque()  # tower runs not yet collected, in order
        self.sealed: deque[_Sealed[T]] = deque()  # commits waiting for their vectors
        self.left: dict[int, int] = {}  # id(step) -> its items still waiting for the tower
        self.embedded = 0  # items
        self.model_steps = 0  # steps with pixels
        self.model_seconds = 0.0  # of the tower runs collected

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
        self.collect(block=False)  # the model time so far, for the commit policy

    def _wait(self, step: Step[T], row: int | None, pixels: np.ndarray) -> None:
        self.embedded += 1
        self.waiting.append((step, row, pixels))
        if len(self.waiting) >= self.tower.batch_size:
            self.run_tower()

    def run_tower(self) -> None:
        """Send the waiting items to the tower: to a lane, or run it here."""
        if not self.waiting:
            return
        batch = np.stack([pixels for _, _, pixels in self.waiting])
        if self.lanes is not None:
            fut = self.lanes.submit(_timed, self.tower.embed, batch, self.clock)
        else:
            fut = Future()
            fut.set_result(_timed(self.tower.embed, batch, self.clock))
        self.flying.append((self.waiting, fut))
        self.waiting = []

    def collect(self, block: bool) -> None:
        """Put the vectors of finished tower runs on their steps (all of them: block)."""
        self.model_seconds += self._land(self.flying, block)

    def _land(self, flying: deque[_Flight], block: bool) -> float:
        seconds = 0.0
        while flying and (block or flying[0][1].done()):
            entries, fut = flying.popleft()
            vectors, took = fut.result()  # a tower error is raised here, in this thread
            seconds += took
            for (s, row, _), v in zip(entries, vectors, strict=True):
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
        return seconds

    def seal(self) -> None:
        """Close the steps so far into one commit (their last batch sent to the tower)."""
        self.run_tower()
        self.sealed.append(_Sealed(self.steps, self.flying))
        self.steps, self.flying = [], deque()
        self.embedded, self.model_steps, self.model_seconds = 0, 0, 0.0

    def ready(self, block: bool) -> list[Step[T]] | None:
        """The oldest sealed commit's steps once all their vectors are in, else None
        (block: wait for them)."""
        head = self.sealed[0]
        self._land(head.flying, block)
        if head.flying:
            return None
        self.sealed.popleft()
        return head.steps

    def cancel(self) -> None:
        """The run stops (error, Ctrl-C): drop the tower runs not started; their steps
        are never committed."""
        for flying in [self.flying, *(s.flying for s in self.sealed)]:
            for _, fut in flying:
                fut.cancel()
        self.flying.clear()
        self.sealed.clear()


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

    def commit_sealed(block: bool) -> None:
        """Write the sealed commits whose vectors are in (block: all of them, waiting);
        with more than one sealed, wait for the oldest (memory holds two at most)."""
        while pending.sealed:
            steps = pending.ready(block=block or len(pending.sealed) > 1)
            if steps is None:
                return
            commit(steps)

    def add(steps: Iterable[Step[T]]) -> None:
        nonlocal last
        for step in steps:
            pending.add(step)
            quick = len(pending.steps) - pending.model_steps
            if policy.due(pending.embedded, quick, pending.model_seconds, clock() - last):
                pending.seal()
                last = clock()
            commit_sealed(block=False)  # the next steps are routed while a commit waits

    def side_wait() -> list[Step[T]]:
        commit_sealed(block=True)  # this thread waits anyway: a finished batch goes in first
        assert side is not None
        return side.ready(block=True)

    ahead = workers * 4 + tower.batch_size
    try:
        with closing(prefetch(items, load, workers, ahead, pool)) as stream:
            for item, loaded in stream:
                add([route(item, loaded)])
                if side is not None:
                    add(side.ready(block=False))
                    while side.saturated:
                        add(side_wait())
        while side is not None and side.busy:
            add(side_wait())
        if pending.steps:
            pending.seal()
        commit_sealed(block=True)
    finally:
        pending.cancel()
