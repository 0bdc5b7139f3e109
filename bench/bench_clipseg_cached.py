"""CLIPSeg's three graphs on the Interpreter (as the mask pipeline runs them) against LiteRT's
CompiledModel with an XNNPACK weight cache (as the text tower runs): memory, same outputs.

    .venv/bin/python bench/bench_clipseg_cached.py --clipseg DIR/models/clipseg --work /tmp/cs-cache

--clipseg is a CLIPSeg folder: a full-size one from `bench_mask.build_full` (random weights)
or `models pull`. Each way runs in a fresh process: the vision, text and decoder graphs
opened in turn and run once on the same random inputs, the process's VmRSS, RssAnon and
RssFile printed after each. CompiledModel runs twice: the first start writes the caches
(into --work), the second maps them, as every later server start does. Each graph's outputs
are summed and compared between the ways (the same XNNPACK kernels: they must be equal).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

GRAPHS = ("clipseg_vision_fp16.tflite", "clipseg_text_fp16.tflite", "clipseg_decoder.tflite")

PROBE = r"""
import json, os, sys
from pathlib import Path
import numpy as np

mode, folder, work = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
graphs = json.loads(sys.argv[4])

def status():
    f = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        k, _, rest = line.partition(":")
        if k in ("VmRSS", "RssAnon", "RssFile"):
            f[k] = round(int(rest.split()[0]) / 1024)
    return f

def feed(shape, dtype):
    return np.random.default_rng(0).standard_normal(shape).astype(dtype)

rows, sums, keep = [], {}, []
if mode == "interpreter":
    from ai_edge_litert.interpreter import Interpreter
    for name in graphs:
        it = Interpreter(model_path=str(folder / name), num_threads=2)
        run = it.get_signature_runner()
        out = run(**{k: feed(v["shape"], v["dtype"]) for k, v in run.get_input_details().items()})
        sums[name] = {k: float(np.asarray(v, np.float64).sum()) for k, v in out.items()}
        keep.append((it, run))
        rows.append({"graph": name, **status()})
else:
    import ai_edge_litert
    from ai_edge_litert import _pywrap_litert_compiled_model_wrapper as cm
    from ai_edge_litert import _pywrap_litert_environment_wrapper as envw
    from ai_edge_litert import _pywrap_litert_tensor_buffer_wrapper as tb
    env = envw.CreateEnvironment(
        runtime_path=os.path.dirname(ai_edge_litert.__file__),
        compiler_plugin_path="",
        dispatch_library_path="",
    )
    for name in graphs:
        cache = work / (name + ".xnnpack-cache")
        model = cm.CreateCompiledModelFromFile(
            env, str(folder / name), hardware_accel=1, cpu_num_threads=2,
            xnnpack_weight_cache_path=str(cache),
        )
        key = next(iter(model.GetSignatureList()))
        index = model.GetSignatureIndex(key)
        ins, outs = model.CreateInputBuffers(index), model.CreateOutputBuffers(index)
        for buf, (k, v) in zip(ins, model.GetInputTensorDetails(key).items()):
            dt = np.dtype(v["dtype"])
            tb.WriteTensorBuffer(buf, feed(v["shape"], dt).reshape(-1), dt.name)
        model.RunByIndex(index, ins, outs)
        sums[name] = {}
        for buf, (k, v) in zip(outs, model.GetOutputTensorDetails(key).items()):
            dt = np.dtype(v["dtype"])
            y = np.empty(int(np.prod(v["shape"])), dt)
            tb.ReadTensorToBuffer(buf, y, dt.name)
            sums[name][k] = float(y.astype(np.float64).sum())
        keep.append((model, ins, outs))
        rows.append({"graph": name, "cache_mb": round(cache.stat().st_size / 2**20, 1), **status()})
print(json.dumps({"rows": rows, "sums": sums}))
"""


def probe(mode: str, folder: Path, work: Path) -> dict:
    res = subprocess.run(
        [sys.executable, "-c", PROBE, mode, str(folder), str(work), json.dumps(GRAPHS)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clipseg", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    for old in args.work.glob("*.xnnpack-cache"):
        old.unlink()
    runs = {
        "Interpreter": probe("interpreter", args.clipseg, args.work),
        "CompiledModel, first start (writes the caches)": probe(
            "compiled", args.clipseg, args.work
        ),
        "CompiledModel, a later start (maps them)": probe("compiled", args.clipseg, args.work),
    }
    ref = runs["Interpreter"]["sums"]
    print("| way | after | cache MB | RSS MB | anonymous MB | file-backed MB |")
    print("|---|---|---|---|---|---|")
    for way, run in runs.items():
        for row in run["rows"]:
            print(
                f"| {way} | {row['graph']} | {row.get('cache_mb', '')} | {row['VmRSS']} | "
                f"{row['RssAnon']} | {row['RssFile']} |"
            )
    same = all(run["sums"] == ref for run in runs.values())
    print(f"\noutputs equal to the Interpreter's (sums of every output): {same}")
    if not same:
        print(json.dumps({way: run["sums"] for way, run in runs.items()}, indent=1))


if __name__ == "__main__":
    main()
