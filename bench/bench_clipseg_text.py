"""What a new CLIPSeg prompt costs: the text graph at 77 token positions vs cut to 16.

    .venv/bin/python bench/bench_clipseg_text.py --models /tmp/wherein-bench-mask/models \\
        --work /tmp/bench-clipseg-text

--models holds clipseg/clipseg_text_fp16.tflite (e.g. the full-size random-weight bundle
bench/bench_mask.py builds); nothing there is written. The short graph (and, when
ai-edge-quantizer is installed, an fp16-weight copy of both, like the published file)
goes to --work. Each graph is timed in a fresh process per thread count: load (LiteRT
interpreter + XNNPACK weight packing), first run, and the median of warm runs, wall and
process CPU time. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

TEXT = "clipseg_text_fp16.tflite"


def child(path: str, n: int, threads: int, reps: int) -> None:
    import numpy as np

    from wherein.indexer.models.litert_graph import LiteRTGraph

    x = np.random.default_rng(0).standard_normal((1, n, 512)).astype(np.float32) * 0.02
    t0, c0 = time.perf_counter(), time.process_time()
    g = LiteRTGraph(path, threads)
    t1, c1 = time.perf_counter(), time.process_time()
    g.run(x)
    t2 = time.perf_counter()
    wall, cpu = [], []
    for _ in range(reps):
        t, c = time.perf_counter(), time.process_time()
        g.run(x)
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    ms = lambda v: round(1000 * v, 1)  # noqa: E731
    print(
        json.dumps(
            {
                "load_ms": ms(t1 - t0),
                "load_cpu_ms": ms(c1 - c0),
                "first_ms": ms(t2 - t1),
                "warm_ms": ms(float(np.median(wall))),
                "warm_cpu_ms": ms(float(np.median(cpu))),
            }
        )
    )


def measure(path: Path, n: int, threads: int, reps: int) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(path), str(n), str(threads), str(reps)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def graphs(models: Path, work: Path, length: int) -> list[tuple[str, Path, Path]]:
    """(weights, 77-position graph, short graph) pairs, built in work."""
    from wherein.indexer.models.optimize.build import quantizer_available
    from wherein.indexer.models.optimize.shorten import short_name, shorten

    work.mkdir(parents=True, exist_ok=True)
    src = models / "clipseg" / TEXT
    pairs = []
    short = work / short_name(src, length)
    if not short.is_file():
        shorten(src, short, length)
    pairs.append(("as given", src, short))
    if quantizer_available():
        from wherein.indexer.models.convert.build import reduce_precision
        from wherein.indexer.models.optimize.widen import fp16_constant_count

        if not fp16_constant_count(src):  # fp32 weights: also time the published fp16 layout
            half = work / "clipseg_text_fp16w.tflite"
            if not half.is_file():
                reduce_precision(src, half, "fp16")
            half_short = work / short_name(half, length)
            if not half_short.is_file():
                shorten(half, half_short, length)
            pairs.append(("fp16 (DEQUANTIZE)", half, half_short))
    return pairs


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--length", type=int, default=16)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    rows = [
        "| weights | positions | threads | load ms (CPU) | first run ms | warm ms/prompt (CPU) |",
        "|---|---|---|---|---|---|",
    ]
    for weights, full, short in graphs(args.models, args.work, args.length):
        for threads in (int(t) for t in args.threads.split(",")):
            for n, path in ((77, full), (args.length, short)):
                m = measure(path, n, threads, args.reps)
                rows.append(
                    f"| {weights} | {n} | {threads} | {m['load_ms']:.0f} ({m['load_cpu_ms']:.0f}) "
                    f"| {m['first_ms']:.0f} | {m['warm_ms']:.1f} ({m['warm_cpu_ms']:.1f}) |"
                )
                print(rows[-1], file=sys.stderr)
    print("\n".join(rows))


if __name__ == "__main__":
    main()
