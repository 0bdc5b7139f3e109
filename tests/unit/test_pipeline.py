"""The ingest pipeline: ordering and bounded prefetch, commits by model time, and files that
change between the walk and the read (or during it) never stored with a wrong stat or hash."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from wherein.indexer.ingest import read as read_mod
from wherein.indexer.ingest import run as run_mod
from wherein.indexer.ingest.pipeline import CommitPolicy, Step, run_pipeline
from wherein.indexer.ingest.run import Indexer, RunStats
from wherein.indexer.models.image_tower import ImageTower, lane_split
from wherein.indexer.models.modeldir import ModelDir
from wherein.indexer.store.index_store import IndexStore

from conftest import draw_shape


# -- the loop itself, with a fake tower ---------------------------------------------------
class FakeTower:
    def __init__(self, batch_size: int = 4, sleep: float = 0.0) -> None:
        self.batch_size, self.sleep = batch_size, sleep
        self.calls: list[int] = []

    def embed(self, batch: np.ndarray) -> np.ndarray:
        time.sleep(self.sleep)
        self.calls.append(len(batch))
        return batch[:, :2] * 10.0


def test_pipeline_keeps_order_embeds_in_tower_batches_and_prefetches_boundedly():
    pulled = 0
    lock = threading.Lock()

    def items():
        nonlocal pulled
        for i in range(50):
            with lock:
                pulled += 1
            yield i

    seen_pulled: list[int] = []
    committed: list[tuple[int, float | None]] = []

    def route(i: int, loaded: np.ndarray) -> Step[int]:
        seen_pulled.append(pulled)
        return Step(i, loaded if i % 5 else None)  # every 5th item needs no model

    def commit(steps: list[Step[int]]) -> None:
        committed.extend((s.item, None if s.vector is None else float(s.vector[0])) for s in steps)

    tower = FakeTower(batch_size=4)
    run_pipeline(
        items(),
        lambda i: np.array([i, i], np.float32),
        route,
        commit,
        tower,
        workers=2,
        policy=CommitPolicy(every=8),
    )
    assert [i for i, _ in committed] == list(range(50))
    assert all(v == (None if i % 5 == 0 else i * 10.0) for i, v in committed)
    assert seen_pulled[0] <= 2 * 4 + 4  # loads run at most workers*4 + batch ahead
    assert all(n == 4 for n in tower.calls[:-1])  # full tower batches; a tail only at the end


def test_the_tower_batches_items_not_files():
    # A file that yields several items sends each through the tower; full batches of items,
    # a file's items split across two runs where a batch boundary falls.
    sizes = {0: 1, 1: 3, 2: 0, 3: 2, 4: 1, 5: 5}  # items per file; 0: needs no model
    px = {
        f: np.stack([np.full(3, 10 * f + j, np.float32) for j in range(max(n, 1))])
        for f, n in sizes.items()
    }

    def route(f: int, loaded: np.ndarray) -> Step[int]:
        if not sizes[f]:
            return Step(f)
        return Step(f, loaded[0] if sizes[f] == 1 else list(loaded))  # a photo: one array

    committed: dict[int, np.ndarray | None] = {}

    def commit(steps: list[Step[int]]) -> None:
        for s in steps:
            assert s.pixels is None  # every item went through the tower before the commit
            committed[s.item] = s.vector

    tower = FakeTower(batch_size=4)
    run_pipeline(list(sizes), px.__getitem__, route, commit, tower, workers=2)
    assert tower.calls == [4, 4, 4]  # 12 items, whatever the files
    assert committed[2] is None
    for f in (0, 4):
        np.testing.assert_array_equal(committed[f], px[f][0, :2] * 10.0)
    for f in (1, 3, 5):
        np.testing.assert_array_equal(committed[f], px[f][:, :2] * 10.0)


class LanedTower(FakeTower):
    """A fake tower with a lane pool: its first `together` calls must all be running at
    once (a barrier), and later calls finish out of order."""

    def __init__(self, lanes: int = 2, together: int = 2, batch_size: int = 1) -> None:
        super().__init__(batch_size)
        self.pool = ThreadPoolExecutor(lanes)
        self.together = threading.Barrier(together, timeout=30)
        self.started = 0
        self.lock = threading.Lock()
        self.release = threading.Event()
        self.release.set()

    def lane_pool(self) -> ThreadPoolExecutor:
        return self.pool

    def embed(self, batch: np.ndarray) -> np.ndarray:
        with self.lock:
            self.started += 1
            n = self.started
        if n <= self.together.parties:
            self.together.wait()  # broken (an error) unless the calls overlap
        self.release.wait(30)
        time.sleep(0.002 * (int(batch[0, 0]) % 3))  # later batches may overtake earlier ones
        return super().embed(batch)


def test_a_laned_tower_runs_batches_side_by_side_and_commits_them_in_order():
    committed: list[tuple[int, float | None]] = []
    tower = LanedTower(lanes=3, together=3)
    run_pipeline(
        range(40),
        lambda i: np.array([i, i], np.float32),
        lambda i, px: Step(i, px if i % 7 else None),
        lambda steps: committed.extend(
            (s.item, None if s.vector is None else float(s.vector[0])) for s in steps
        ),
        tower,
        workers=2,
        policy=CommitPolicy(every=5),
    )
    tower.pool.shutdown()
    assert [i for i, _ in committed] == list(range(40))
    assert all(v == (None if i % 7 == 0 else i * 10.0) for i, v in committed)


def test_a_commit_waiting_for_its_vectors_does_not_hold_up_the_next_batch():
    # Item 0's tower run finishes only once item 3 was routed: the commit of [0, 1] must
    # wait for it without stopping the routing of [2, 3]; commits stay whole and in order.
    routed_3 = threading.Event()
    tower = LanedTower(lanes=2, together=1)

    def embed(batch: np.ndarray) -> np.ndarray:
        if batch[0, 0] == 0 and not routed_3.wait(30):
            raise TimeoutError("item 0's vectors were waited for before item 3 was routed")
        return batch[:, :2] * 10.0

    tower.embed = embed  # type: ignore[method-assign]

    def route(i: int, px: np.ndarray) -> Step[int]:
        if i == 3:
            routed_3.set()
        return Step(i, px)

    commits: list[list[int]] = []
    run_pipeline(
        range(8),
        lambda i: np.array([i, i], np.float32),
        route,
        lambda steps: commits.append([s.item for s in steps]),
        tower,
        workers=2,
        policy=CommitPolicy(every=2),
    )
    tower.pool.shutdown()
    assert commits == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_a_stopped_run_commits_nothing_more_and_leaves_no_tower_work_queued():
    # Ctrl-C while the lanes are busy: the batch in progress is never committed, and the
    # tower runs queued behind the busy lanes are dropped, not run after the stop.
    tower = LanedTower(lanes=2, together=1)
    tower.release.clear()  # the lanes hold their first batches until the run has stopped
    committed: list[int] = []

    def route(i: int, px: np.ndarray) -> Step[int]:
        if i == 12:
            raise KeyboardInterrupt
        return Step(i, px)

    with pytest.raises(KeyboardInterrupt):
        run_pipeline(
            range(40),
            lambda i: np.array([i, i], np.float32),
            route,
            lambda steps: committed.extend(s.item for s in steps),
            tower,
            workers=2,
            policy=CommitPolicy(every=32),
        )
    tower.release.set()
    tower.pool.shutdown(wait=True)
    assert committed == []
    assert tower.started <= 2  # the two lanes' first batches; the other ten were dropped


def test_image_tower_lanes_give_its_vectors_within_its_thread_budget(standin_models):
    x = np.random.default_rng(0).standard_normal((3, 3, 224, 224)).astype(np.float32)
    t = ImageTower.from_models(ModelDir(standin_models), num_threads=2)
    here = t.embed(x)
    on_lanes = [t.lane_pool().submit(t.embed, x[i : i + 1]) for i in range(3)]
    np.testing.assert_allclose(np.concatenate([f.result() for f in on_lanes]), here, atol=1e-5)
    for threads in range(1, 10):  # --threads N: the model never runs on more than N threads
        lanes, per_lane = lane_split(threads)
        assert 1 <= lanes * per_lane <= threads


def test_a_dropped_image_tower_ends_its_lane_threads(standin_models):
    # optimize and its self-tests load towers and drop them: their lanes (threads holding an
    # interpreter and its packed weights each) must not outlive them.
    import gc

    def lane_threads() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name.startswith("tower")]

    before = set(lane_threads())
    t = ImageTower.from_models(ModelDir(standin_models), num_threads=2)
    x = np.zeros((1, 3, 224, 224), np.float32)
    for f in [t.lane_pool().submit(t.embed, x) for _ in range(4)]:
        f.result()
    mine = [th for th in lane_threads() if th not in before]
    assert mine
    del t, f
    gc.collect()
    for th in mine:
        th.join(30)
    assert not any(th.is_alive() for th in mine)


def test_commit_policy():
    p = CommitPolicy(every=32, model_seconds=2.0, quick_every=256, seconds=10.0)
    assert not p.due(5, 0, 1.0, 1.0)
    assert p.due(32, 0, 0.1, 0.1)
    assert p.due(5, 0, 2.5, 2.5)  # a slow tower: commit by model time before the count
    assert not p.due(0, 5, 2.5, 2.5)  # model time with nothing embedded pending: nothing to do
    assert p.due(0, 256, 0.0, 0.0)
    assert p.due(0, 1, 0.0, 11.0)


# -- the indexer on real files --------------------------------------------------------------
def tower(models: Path) -> ImageTower:
    return ImageTower.from_models(ModelDir(models))


def index(idx: Path, models: Path, roots: list[Path], t=None, **kw) -> RunStats:
    with IndexStore.open(idx, write=True, create=True) as store:
        return Indexer(store, t or tower(models), workers=2, **kw).run(roots)


def catalog_state(idx: Path) -> tuple[dict, dict]:
    with IndexStore.open(idx) as store:
        cat = store.catalog
        rows = {
            r["path"]: r
            for r in cat.rows_by_ids(i for i, *_ in cat.known_files().values()).values()
        }
        skips = {s["path"]: s for s in cat.skipped()}
    return rows, skips


def assert_truthful(idx: Path) -> None:
    """Every stored row and skip entry carries the stat (and rows the hash) the file has now."""
    rows, skips = catalog_state(idx)
    for path, r in rows.items():
        st = os.stat(path)
        assert (r["size"], r["mtime_ns"]) == (st.st_size, st.st_mtime_ns), path
        assert r["sha256"] == hashlib.sha256(Path(path).read_bytes()).hexdigest(), path
    for path, s in skips.items():
        st = os.stat(path)
        assert (s["size"], s["mtime_ns"]) == (st.st_size, st.st_mtime_ns), path


class SlowTower:
    """The stand-in tower made slow, as a full-size one is on a laptop CPU."""

    def __init__(self, inner: ImageTower, sleep: float) -> None:
        self.inner, self.sleep = inner, sleep
        self.batch_size, self.model_id, self.space = inner.batch_size, inner.model_id, inner.space
        self.dim, self.path, self.spec = inner.dim, inner.path, inner.spec

    def embed(self, batch: np.ndarray) -> np.ndarray:
        time.sleep(self.sleep)
        return self.inner.embed(batch)


def test_slow_tower_commits_by_model_time_before_the_count(standin_models, tmp_path):
    photos = tmp_path / "photos"
    for i, c in enumerate(["red", "green", "blue", "yellow", "orange", "purple", "white", "red"]):
        draw_shape(photos / f"{i}.png", c, box=(0.05 * i, 0.1, 0.9, 0.9))
    idx = tmp_path / "index"
    first_commit: list[int] = []

    def progress(n: int) -> None:
        if not first_commit:
            with IndexStore.open(idx) as reader:  # what a kill -9 now would leave
                first_commit.append(reader.catalog.count_embedded())

    slow = SlowTower(tower(standin_models), sleep=0.2)
    with IndexStore.open(idx, write=True, create=True) as store:
        ix = Indexer(store, slow, workers=2, commit_every=32, commit_model_seconds=0.5)
        stats = ix.run([photos], progress=progress)
    assert stats.embedded == 8
    assert 0 < first_commit[0] < 8  # landed after ~0.5 s of model time, long before 32 images


def _photos(root: Path, names: list[str]) -> list[Path]:
    colours = ["red", "green", "blue", "yellow", "orange", "purple"]
    out = []
    for i, n in enumerate(names):
        draw_shape(root / n, colours[i % len(colours)])
        out.append(root / n)
    return out


def test_files_changed_between_walk_and_read(standin_models, tmp_path, monkeypatch):
    photos = tmp_path / "photos"
    grown, truncated, replaced, deleted, steady = _photos(
        photos, ["grown.png", "truncated.png", "replaced.png", "deleted.png", "steady.png"]
    )
    real_walk = run_mod.walk

    def walk_then_change(*args, **kwargs):
        found = list(real_walk(*args, **kwargs))  # the stat the plan sees
        with open(grown, "ab") as f:
            f.write(b"\0" * 999)  # trailing bytes: still a good PNG, new size and hash
        truncated.write_bytes(truncated.read_bytes()[:50])
        draw_shape(tmp_path / "new.png", "purple", size=(200, 200))
        os.replace(tmp_path / "new.png", replaced)
        deleted.unlink()
        return iter(found)

    monkeypatch.setattr(run_mod, "walk", walk_then_change)
    idx = tmp_path / "index"
    stats = index(idx, standin_models, [photos])
    assert stats.embedded == 3 and stats.skipped == 1 and stats.unsettled == 1
    rows, skips = catalog_state(idx)
    assert set(rows) == {str(grown), str(replaced), str(steady)}
    assert set(skips) == {str(truncated)}
    assert_truthful(idx)

    monkeypatch.setattr(run_mod, "walk", real_walk)
    again = index(idx, standin_models, [photos])  # the stored stats are the files' stats
    assert again.embedded == 0 and again.unchanged == 3 and again.skipped_known == 1


@pytest.mark.parametrize("change", ["grown", "truncated", "replaced", "deleted"])
def test_file_changed_while_being_read(standin_models, tmp_path, monkeypatch, change):
    photos = tmp_path / "photos"
    victim, steady = _photos(photos, ["victim.png", "steady.png"])
    idx = tmp_path / "index"
    index(idx, standin_models, [photos])
    draw_shape(victim, "white")  # changed since the first run: it is read again
    real_read = read_mod._read_all

    def read_while_changing(path, fd, size):
        if path == str(victim):
            if change == "grown":
                with open(victim, "ab") as g:
                    g.write(b"\0" * 999)
            elif change == "truncated":
                os.truncate(victim, 50)
            elif change == "replaced":
                draw_shape(tmp_path / "new.png", "purple", size=(200, 200))
                os.replace(tmp_path / "new.png", victim)
            else:
                victim.unlink()
        return real_read(path, fd, size)

    monkeypatch.setattr(read_mod, "_read_all", read_while_changing)
    stats = index(idx, standin_models, [photos])
    assert stats.unsettled == 1 and stats.embedded == 0 and stats.skipped == 0
    rows, skips = catalog_state(idx)
    assert not skips and set(rows) == {str(victim), str(steady)}  # the old row, untouched
    with IndexStore.open(idx) as store:
        check = store.check()
    assert check.ok, check.problems

    monkeypatch.setattr(read_mod, "_read_all", real_read)
    after = index(idx, standin_models, [photos])  # the next run settles it
    assert after.unsettled == 0
    assert after.embedded + after.skipped + after.deleted == 1
    assert_truthful(idx)


def test_good_file_turned_bad_leaves_images_and_search(env, shapes):
    import json

    from click.testing import CliRunner

    from wherein.search.cli import cli

    def run(*args):
        r = CliRunner().invoke(cli, [*map(str, args)])
        assert r.exit_code == 0, r.output
        return r.stdout  # the JSON alone (stderr names the stand-in models)

    run("index", shapes, "-q")
    bad = shapes / "red_square.jpg"
    assert bad.name in run("search", "red", "--paths")
    bad.write_bytes(os.urandom(3000))
    r = json.loads(run("index", shapes, "--json", "-q"))
    assert r["skipped"] == 1 and r["images"] == 5
    assert bad.name not in run("search", "red", "-k", "20", "--paths")
    status = json.loads(run("status", "--json", "--check"))
    assert [Path(s["path"]).name for s in status["skipped"]] == [bad.name]
    assert status["images"] == 5 and status["check"]["ok"]


def test_a_side_feeds_steps_on_the_shared_pool_and_the_run_waits_for_them():
    # What a video does: its route starts work on the decode pool (chunks of frames), whose
    # steps join the batches when ready, between the input's own; the run ends only once
    # the side is done.
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(2, thread_name_prefix="decode")
    threads: set[str] = set()

    class Chunks:
        def __init__(self) -> None:
            self.futures: list = []

        def start(self, n: int) -> None:
            def work(k: int) -> Step[str]:
                threads.add(threading.current_thread().name)
                time.sleep(0.01)
                return Step(f"chunk{n}.{k}", np.full((2,), 100.0 + k, np.float32))

            self.futures += [pool.submit(work, k) for k in range(3)]

        @property
        def busy(self) -> bool:
            return bool(self.futures)

        @property
        def saturated(self) -> bool:
            return len(self.futures) > 3

        def ready(self, block: bool) -> list[Step[str]]:
            if block and self.futures:
                self.futures[0].result()
            done = []
            while self.futures and self.futures[0].done():
                done.append(self.futures.pop(0).result())
            return done

    side = Chunks()
    committed: list[str] = []

    def route(i: int, loaded: np.ndarray) -> Step[str]:
        if i in (0, 5):
            side.start(i)
        return Step(f"file{i}", loaded)

    try:
        run_pipeline(
            range(10),
            lambda i: np.array([i, i], np.float32),
            route,
            lambda steps: committed.extend(s.item for s in steps),
            FakeTower(batch_size=4),
            workers=2,
            policy=CommitPolicy(every=4),
            pool=pool,
            side=side,
        )
    finally:
        pool.shutdown()
    files = [c for c in committed if c.startswith("file")]
    assert files == [f"file{i}" for i in range(10)]  # the input keeps its order
    for n in (0, 5):  # each side's steps in their order, none lost, none twice
        assert [c for c in committed if c.startswith(f"chunk{n}.")] == [
            f"chunk{n}.{k}" for k in range(3)
        ]
    assert len(committed) == 16 and threads <= {"decode_0", "decode_1"}
