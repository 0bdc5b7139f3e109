"""One indexing run: walk, diff against the catalog, decode in parallel, embed, commit.

Decoding and hashing run in a thread pool (Pillow and hashlib release the GIL)
a bounded distance ahead of the model, so the model — the bottleneck — never
waits for input. Results are committed in batches, each one SQLite transaction
holding the images' rows and vectors together; FAISS is brought in line at the
end (and on the next open, if the run never reached its end).
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from wherein.indexer.imaging import Prepared, prepare_for_siglip, read_error
from wherein.indexer.ingest.walk import FoundFile, WalkProblem, under_any, walk
from wherein.indexer.models.image_tower import ImageTower
from wherein.indexer.store.index_store import IndexStore

JPEG_DRAFT = True  # decode JPEGs at reduced scale when >= 2x the model input (bench/bench_index.py)


@dataclass
class RunStats:
    seen: int = 0
    unchanged: int = 0
    embedded: int = 0
    moved: int = 0
    copied: int = 0
    touched: int = 0
    deleted: int = 0
    skipped: int = 0
    skipped_known: int = 0
    invalidated: int = 0
    seconds: float = 0.0
    interrupted: bool = False
    vectors_note: str = ""
    problems: list[WalkProblem] = field(default_factory=list)

    @property
    def images_per_second(self) -> float:
        return self.embedded / self.seconds if self.seconds else 0.0


@dataclass
class _Work:
    found: FoundFile
    old_id: int | None  # catalog row this file replaces (changed content)


@dataclass
class _Result:
    work: _Work
    prepared: Prepared

    @property
    def sha256(self) -> str:
        return self.prepared.sha256

    @property
    def error(self) -> str:
        return self.prepared.error


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _load(work: _Work, draft: bool) -> _Result:
    try:
        with open(work.found.path, "rb") as f:
            data = f.read()
    except OSError as exc:
        return _Result(work, Prepared(error=read_error(exc)))
    return _Result(work, prepare_for_siglip(data, draft))


class Indexer:
    def __init__(
        self,
        store: IndexStore,
        tower: ImageTower,
        workers: int | None = None,
        commit_every: int = 32,
        commit_seconds: float = 10.0,
        draft: bool = JPEG_DRAFT,
    ) -> None:
        self.store = store
        self.tower = tower
        self.workers = workers or max(2, min(8, (os.cpu_count() or 2)))
        self.commit_every = commit_every
        self.commit_seconds = commit_seconds
        self.draft = draft

    def _prepare_model(self, stats: RunStats) -> None:
        cat = self.store.catalog
        old = cat.get_meta("model_id")
        if old == self.tower.model_id:
            return
        with cat.transaction():
            if old is not None:
                stats.invalidated = cat.clear_embeddings()
            cat.set_meta("model_id", self.tower.model_id)
            cat.set_meta("space", self.tower.space)
            cat.set_meta("dim", self.tower.dim)
            cat.set_meta("model_file", self.tower.path.name)
            cat.bump_generation()

    def run(
        self,
        roots: list[str | Path],
        include_hidden: bool = False,
        progress: Callable[[int], object] | None = None,
        on_total: Callable[[int], None] | None = None,
        retry_skipped: bool = False,
    ) -> RunStats:
        stats = RunStats()
        t0 = time.perf_counter()
        cat = self.store.catalog
        self._prepare_model(stats)
        abs_roots = [os.path.abspath(os.path.expanduser(str(r))) for r in roots]

        known = cat.known_files()
        skipped_known = {s["path"]: s for s in cat.skipped()}
        found = list(walk(abs_roots, include_hidden, stats.problems))
        stats.seen = len(found)
        present = {f.path for f in found}

        todo: list[_Work] = []
        for f in found:
            row = known.get(f.path)
            if row is not None:
                image_id, size, mtime_ns, _sha, has_vec = row
                if size == f.size and mtime_ns == f.mtime_ns and has_vec:
                    stats.unchanged += 1
                    continue
                todo.append(_Work(f, image_id))
                continue
            skip = skipped_known.get(f.path)
            if (
                skip
                and not retry_skipped
                and skip["size"] == f.size
                and skip["mtime_ns"] == f.mtime_ns
            ):
                stats.skipped_known += 1
                continue
            todo.append(_Work(f, None))

        # Rows under the walked roots whose file is gone: candidates for a move (same
        # content found at a new path) or, at the end, deletion.
        gone = {p: row for p, row in known.items() if p not in present and under_any(p, abs_roots)}
        gone_by_hash: dict[str, list[int]] = {}
        for _p, (image_id, _s, _m, sha, _v) in gone.items():
            gone_by_hash.setdefault(sha, []).append(image_id)
        embedded_by_hash: dict[str, int] = {}
        for _p, (image_id, _s, _m, sha, has_vec) in known.items():
            if has_vec:
                embedded_by_hash.setdefault(sha, image_id)
        relinked: set[int] = set()

        if on_total:
            on_total(len(todo))

        pending: list[tuple[_Result, np.ndarray]] = []
        quick: list[tuple[str, _Result, int]] = []  # (kind, result, image_id) needing no model
        last_commit = time.perf_counter()

        def commit() -> None:
            nonlocal last_commit
            vecs = self.tower.embed(np.stack([p for _, p in pending])) if pending else None
            now = _now()
            with cat.transaction():
                changed = False
                for i, (res, _) in enumerate(pending):
                    if res.work.old_id is not None:
                        cat.delete_images([res.work.old_id])
                    cat.insert_image(self._record(res, now), vecs[i])
                    changed = True
                for kind, res, image_id in quick:
                    f = res.work.found
                    if kind == "move":
                        cat.relink(image_id, f.path, f.size, f.mtime_ns)
                    elif kind == "touch":
                        cat.touch(image_id, f.size, f.mtime_ns)
                    elif kind == "copy":
                        _, v = cat.vectors_for([image_id])
                        if res.work.old_id is not None:
                            cat.delete_images([res.work.old_id])
                        cat.insert_image(self._record(res, now), v[0])
                        changed = True
                    elif kind == "skip":
                        cat.record_skip(f.path, res.error, f.size, f.mtime_ns, now)
                        changed = changed or res.work.old_id is not None
                if changed:
                    cat.bump_generation()
            stats.embedded += len(pending)
            if progress:
                progress(len(pending) + len(quick))
            pending.clear()
            quick.clear()
            last_commit = time.perf_counter()

        try:
            with ThreadPoolExecutor(self.workers, thread_name_prefix="decode") as pool:
                window: deque[Future[_Result]] = deque()
                it = iter(todo)
                ahead = self.workers * 4 + self.tower.batch_size
                while True:
                    while len(window) < ahead:
                        w = next(it, None)
                        if w is None:
                            break
                        window.append(pool.submit(_load, w, self.draft))
                    if not window:
                        break
                    res = window.popleft().result()
                    self._route(
                        res, stats, gone_by_hash, embedded_by_hash, relinked, known, pending, quick
                    )
                    due = time.perf_counter() - last_commit > self.commit_seconds
                    if (
                        len(pending) >= self.commit_every
                        or len(quick) >= 256
                        or (due and (pending or quick))
                    ):
                        commit()
                commit()
            # Deletions last: only rows not re-linked by a move.
            dead = [row[0] for row in gone.values() if row[0] not in relinked]
            if dead:
                with cat.transaction():
                    stats.deleted = cat.delete_images(dead)
                    cat.bump_generation()
        except KeyboardInterrupt:
            stats.interrupted = True
        finally:
            stats.seconds = time.perf_counter() - t0
            stats.vectors_note = self.store.ensure_vectors(persist=True)
        return stats

    def _route(
        self, res, stats, gone_by_hash, embedded_by_hash, relinked, known, pending, quick
    ) -> None:
        f = res.work.found
        if res.sha256 and res.work.old_id is not None:
            old = known.get(f.path)
            if old and old[3] == res.sha256 and old[4]:
                stats.touched += 1  # same bytes, new mtime: nothing to embed
                quick.append(("touch", res, res.work.old_id))
                return
        if res.sha256 and res.work.old_id is None:
            movers = [i for i in gone_by_hash.get(res.sha256, []) if i not in relinked]
            if movers:
                relinked.add(movers[0])
                stats.moved += 1
                quick.append(("move", res, movers[0]))
                return
        if res.error:
            stats.skipped += 1
            quick.append(("skip", res, -1))
            return
        donor = embedded_by_hash.get(res.sha256)
        if donor is not None and donor != res.work.old_id:
            stats.copied += 1  # identical bytes elsewhere in the index: reuse its vector
            quick.append(("copy", res, donor))
            return
        pending.append((res, res.prepared.pixels))

    def _record(self, res: _Result, now: str) -> dict:
        f = res.work.found
        return {
            "path": f.path,
            "size": f.size,
            "mtime_ns": f.mtime_ns,
            "sha256": res.sha256,
            "width": res.prepared.width,
            "height": res.prepared.height,
            "format": Path(f.path).suffix.lower().lstrip("."),
            "indexed_at": now,
            "model_id": self.tower.model_id,
        }
