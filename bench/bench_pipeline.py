"""Where the cores idle while `wherein index` runs: the ingest pipeline, instrumented in-process.

    python bench/bench_pipeline.py --models DIR --photos DIR [--rounds 3] [--out FILE]

DIR as bench_optimize.py leaves them (`--work W`: W/run-models holds the int8 tower after
its optimize step, W/photos the 12-MP JPEGs). Each round indexes the photos into a fresh
index twice, alternating:
  main thread   the tower's embed() in the main thread on one interpreter of all cores
                (how the pipeline ran before the tower got lanes);
  lanes         the tower's lane pool: one single-threaded interpreter per core.
Per run: images/s; process CPU per image; how busy the cores were (process CPU / wall /
cores); CPU by thread (main; decode pool, timed inside each load; the tower's own threads:
the XNNPACK worker or the lanes); what the
main thread waited for (the decode pool's next item, the tower, commits); and the share of
~1-ms samples in which at least `cores` of the process's threads were runnable (state R,
read from /proc by a second process): the pipeline's own demand, which other jobs on a
shared machine do not change (an XNNPACK worker spin-waiting counts as runnable, so it
flatters the main-thread runs). Interpreters are made and warmed before the clock starts
(steady state: a whole `wherein index` process also pays each interpreter's weight packing,
which holds the GIL). After each round, the CPU-bound limit as bench_optimize.py measures it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))


def sample(pid: int, out: Path) -> None:
    """Runnable threads of pid, one count per ~1 ms, from SIGUSR1 to SIGTERM."""
    state = {"go": False, "stop": False}
    signal.signal(signal.SIGUSR1, lambda *_: state.update(go=True))
    signal.signal(signal.SIGTERM, lambda *_: state.update(stop=True))
    counts: list[int] = []
    while not state["stop"]:
        if not state["go"]:
            time.sleep(0.0005)
            continue
        n = 0
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:  # the process is gone
            break
        for t in tasks:
            try:
                stat = Path(f"/proc/{pid}/task/{t}/stat").read_text()
            except OSError:
                continue
            n += stat[stat.rindex(")") + 2] == "R"
        counts.append(n)
        time.sleep(0.001)
    out.write_text(json.dumps(counts))


def thread_cpu() -> dict[int, float]:
    """CPU seconds by native thread id, from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for t in os.listdir("/proc/self/task"):
        try:
            stat = Path(f"/proc/self/task/{t}/stat").read_text()
        except OSError:
            continue
        f = stat[stat.rindex(")") + 2 :].split()
        out[int(t)] = (int(f[11]) + int(f[12])) / tick
    return out


class Probe:
    """Wraps the pipeline's hand-offs with clocks (the code under test is not changed)."""

    def __init__(self, towers: list) -> None:
        from wherein.indexer.ingest import pipeline, run

        self.t: dict[str, float] = {}
        self.decode_tids: set[int] = set()
        self.lock = threading.Lock()
        prefetch, commit = pipeline.prefetch, run._Run.commit
        for tower in towers:
            tower.embed = self.timed_embed(tower.embed)

        def timed_prefetch(items, load, workers, ahead, pool=None):
            def timed_load(item):
                self.decode_tids.add(threading.get_native_id())
                c = time.thread_time()
                r = load(item)
                self.add("decode CPU", time.thread_time() - c)
                return r

            stream = prefetch(items, timed_load, workers, ahead, pool)
            try:
                while True:
                    t = time.perf_counter()
                    try:
                        x = next(stream)
                    except StopIteration:
                        return
                    self.add("main: wait for decode", time.perf_counter() - t)
                    yield x
            finally:
                stream.close()

        def timed_commit(run_self, steps):
            t = time.perf_counter()
            commit(run_self, steps)
            self.add("main: commits", time.perf_counter() - t)

        pipeline.prefetch = timed_prefetch
        run._Run.commit = timed_commit

    def timed_embed(self, embed):
        def timed(batch):
            t = time.perf_counter()
            v = embed(batch)
            self.add("tower (all calls)", time.perf_counter() - t)
            return v

        return timed

    def add(self, key: str, secs: float) -> None:
        with self.lock:
            self.t[key] = self.t.get(key, 0.0) + secs


def one_run(tower, probe: Probe, photos: Path, cores: int) -> dict:
    from wherein.indexer.ingest.run import Indexer
    from wherein.indexer.store.index_store import IndexStore

    probe.t.clear()
    with tempfile.TemporaryDirectory() as tmp:
        counts = Path(tmp) / "counts.json"
        sampler = subprocess.Popen(
            [sys.executable, __file__, "--sample", str(os.getpid()), str(counts)]
        )
        time.sleep(0.5)  # the sampler's own start is not the run's
        with IndexStore.open(Path(tmp) / "index", write=True, create=True) as store:
            ix = Indexer(store, tower)
            before = thread_cpu()
            sampler.send_signal(signal.SIGUSR1)
            c, t = time.process_time(), time.perf_counter()
            stats = ix.run([photos])
            wall, cpu = time.perf_counter() - t, time.process_time() - c
            sampler.terminate()
            after = thread_cpu()
        sampler.wait()
        runnable = json.loads(counts.read_text())
    main = threading.get_native_id()
    d = {tid: after[tid] - before.get(tid, 0.0) for tid in after}
    n = stats.embedded
    return {
        "images/s": stats.images_per_second,
        "CPU ms/img": cpu * 1000 / n,
        "cores busy": cpu / wall / cores,
        f">= {cores} runnable": sum(c >= cores for c in runnable) / max(1, len(runnable)),
        "main thread CPU ms/img": d.get(main, 0.0) * 1000 / n,
        "decode CPU ms/img": probe.t.get("decode CPU", 0.0) * 1000 / n,
        "tower threads CPU ms/img (XNNPACK worker, or lanes)": sum(
            v for k, v in d.items() if k != main
        )
        * 1000
        / n,
        "main: wait for decode s": probe.t.get("main: wait for decode", 0.0),
        "tower calls s (summed over lanes)": probe.t.get("tower (all calls)", 0.0),
        "main: commits s": probe.t.get("main: commits", 0.0),
        "run s": stats.seconds,
        "load": os.getloadavg()[0],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", type=Path, default=Path("/tmp/wherein-bench-optimize/run-models"))
    ap.add_argument("--photos", type=Path, default=Path("/tmp/wherein-bench-optimize/photos"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--sample", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.sample:
        sample(int(args.sample[0]), Path(args.sample[1]))
        return
    from bench_optimize import cpu_name, priority, stage_core_ms

    from wherein.indexer.models.modeldir import ModelDir
    from wherein.indexer.models.registry import load_image_embedder

    cores = len(os.sched_getaffinity(0))
    lanes = load_image_embedder(ModelDir(args.models))
    inline = load_image_embedder(ModelDir(args.models))
    inline.lane_pool = None  # type: ignore[assignment]  # the pipeline runs embed() itself
    x = np.zeros((1, 3, 224, 224), np.float32)
    inline.embed(x)
    pool = lanes.lane_pool()
    for f in [pool.submit(lanes.embed, x) for _ in range(4 * lanes.lanes)]:
        f.result()
    configs = {
        f"main thread (1 interpreter x {inline.graph.num_threads} threads)": inline,
        f"lanes ({lanes.lanes} interpreters x {lanes.lane_threads} thread)": lanes,
    }
    probe = Probe(list(configs.values()))
    results: dict[str, list[dict]] = {name: [] for name in configs}
    photos = sorted(args.photos.glob("*.jpg"))
    for i in range(args.rounds):
        runs = {name: one_run(tower, probe, args.photos, cores) for name, tower in configs.items()}
        # The limit as bench_optimize.py measures it, right after this round's runs.
        st = stage_core_ms(photos, args.models)
        limit = cores * 1000 / (st["decode_core_ms"] + st["model_core_ms"])
        for name, res in runs.items():
            res["% of CPU-bound limit"] = res["images/s"] / limit * 100
            res["limit images/s (decode + model core-ms, one thread each)"] = limit
            results[name].append(res)
            print(f"round {i + 1} {name}: {json.dumps(res)}", file=sys.stderr, flush=True)
    keys = list(next(iter(results.values()))[0])
    lines = [
        f"Machine: {cpu_name()}, {cores} cores{priority()}; tower {lanes.path.name}; "
        f"{len(list(args.photos.glob('*.jpg')))} photos; {args.rounds} rounds, median (min-max).",
        "",
        "| figure | " + " | ".join(configs) + " |",
        "|---|" + "---:|" * len(configs),
    ]
    for k in keys:
        cells = []
        for name in configs:
            v = [r[k] for r in results[name]]
            fmt = ".2f" if max(abs(x) for x in v) < 10 else ".1f"
            cells.append(
                f"{statistics.median(v):{fmt}} ({min(v):{fmt}}-{max(v):{fmt}})"
                if len(v) > 1
                else f"{v[0]:{fmt}}"
            )
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    md = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(md)
    print(md)


if __name__ == "__main__":
    main()
