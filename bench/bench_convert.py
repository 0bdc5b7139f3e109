"""Converted SigLIP 2 towers vs the published-style graph vs torch eager, on this CPU.

    /work/venv/bin/python bench/bench_convert.py [--out bench/results/convert.md] [--work DIR]

Full-size ViT-B/16 image tower with random weights (no hub here; speed and
conversion fidelity do not depend on the weights' values):
  - published-style: batch-1 only, fp16 weights (what litert-community ships);
  - project: batch 1 + 8 signatures at fp32, fp16 and int8 (dynamic range);
  - open_clip/timm torch eager at batch 1 and 8.
Each graph is also compared with the torch reference (Pearson, max |diff|,
top-10 neighbour agreement on 16 random colour-grid images).

Text tower: the full ViT-B-16-SigLIP2 text config (vocab 256000, width 768,
12 layers) with random weights: cold start (fresh process: imports + load +
first query) and per-query time, torch vs .tflite. Tokenization is left out of
both (the Gemma tokenizer.json cannot be downloaded here); the torch-free
tokenizer's own cost is measured on the stand-in models.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
GFLOP_PER_IMAGE = (
    34.4  # ViT-B/16 at 224 + MAP head: the LiteRT converter counts 17.18 GMAC per image
)


def cpu_peak() -> dict:
    """Estimated fp32 FMA peak from lscpu, and a measured large-SGEMM rate for comparison."""
    info = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    flags = re.search(r"^Flags:\s*(.*)$", info, re.M)
    flags = set(flags.group(1).split()) if flags else set()
    mhz = None
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("cpu MHz"):
            mhz = float(line.split(":")[1])
            break
    cores = len(os.sched_getaffinity(0))
    model = re.search(r"^Model name:\s*(.*)$", info, re.M)
    # Zen 4 (avx512_bf16 + avx512_vnni on AMD): two 256-bit FMA pipes per core, i.e.
    # 16 fp32 FMA = 32 FLOP per cycle (AVX-512 is executed as two 256-bit halves).
    # Intel AVX-512 server parts: two 512-bit FMA units = 64 FLOP/cycle. AVX2: 2 x 256 = 32.
    amd = "AMD" in (model.group(1) if model else "")
    if "avx512f" in flags and not amd:
        per_cycle, why = 64, "2 x 512-bit FMA units (AVX-512)"
    elif "fma" in flags:
        per_cycle, why = (
            32,
            "2 x 256-bit FMA pipes" + (" (Zen 4 runs AVX-512 as 2 x 256)" if amd else ""),
        )
    else:
        per_cycle, why = 8, "no FMA"
    ghz = (mhz or 2000) / 1000
    peak = cores * ghz * per_cycle
    return {
        "model": model.group(1) if model else "?",
        "cores": cores,
        "ghz": ghz,
        "per_cycle": per_cycle,
        "why": why,
        "peak_gflops": peak,
        "sgemm_gflops": sgemm_gflops(),
    }


def sgemm_gflops(n: int = 4096, trials: int = 5) -> float:
    """Best of several numpy (OpenBLAS) SGEMMs on all cores: the attainable fp32 rate."""
    a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    a @ a
    best = min(_timed(lambda: a @ a) for _ in range(trials))
    return 2 * n**3 / best / 1e9


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _runner(kind: str, obj, threads: int):
    """(batch -> callable running one batch) for a graph path or a torch module."""
    import torch

    xs = {
        b: np.random.default_rng(b).uniform(-1, 1, (b, 3, 224, 224)).astype(np.float32)
        for b in (1, 8)
    }
    if kind == "torch":

        def run_torch(b):
            with torch.inference_mode():
                obj(torch.from_numpy(xs[b]))

        return {1: lambda: run_torch(1), 8: lambda: run_torch(8)}
    from wherein.indexer.models.litert_graph import LiteRTGraph

    g = LiteRTGraph(obj, threads)
    return {
        sig.batch: (lambda key=key, b=sig.batch: g.run(xs[b], signature=key))
        for key, sig in g.signatures.items()
    }


def time_all(variants: dict[str, tuple[str, object]], threads: int, rounds: int, log) -> dict:
    """ms/image per variant and batch: rounds interleaved across variants, min and median kept.

    The machine is shared: interleaving spreads others' load evenly over the
    variants, and the minimum is the least disturbed estimate.
    """
    runners = {name: _runner(kind, obj, threads) for name, (kind, obj) in variants.items()}
    for fns in runners.values():  # warm-up (XNNPACK packs weights on first run)
        for fn in fns.values():
            fn()
    samples: dict[str, dict[int, list[float]]] = {
        n: {b: [] for b in fns} for n, fns in runners.items()
    }
    for r in range(rounds):
        log(f"timing round {r + 1}/{rounds}, load average {os.getloadavg()[0]:.1f}")
        for name, fns in runners.items():
            for b, fn in fns.items():
                t = time.perf_counter()
                fn()
                samples[name][b].append((time.perf_counter() - t) / b * 1000)
    return {n: {b: (min(v), float(np.median(v))) for b, v in d.items()} for n, d in samples.items()}


def image_bench(work: Path, threads: int, rounds: int, log) -> tuple[list[dict], dict]:
    import torch

    from wherein.indexer.models.convert import build as C
    from wherein.indexer.models.convert.towers import Source, image_module
    from wherein.indexer.models.litert_graph import LiteRTGraph

    torch.set_num_threads(threads)
    src = Source("random", config="full", seed=0)
    times_file = work / "convert_times.json"
    conv = json.loads(times_file.read_text()) if times_file.is_file() else {}
    pub_dir, proj_dir = work / "published" / "siglip2-image", work / "project" / "siglip2-image"
    if not (pub_dir / "manifest.json").is_file():
        t = time.perf_counter()
        C.convert_image_tower(src, work / "published", [1], "fp16", log=log)
        conv["convert_published_s"] = time.perf_counter() - t
    if not (proj_dir / "manifest.json").is_file():
        t = time.perf_counter()
        C.convert_image_tower(src, work / "project", [1, 8], "fp32", log=log)
        conv["convert_project_s"] = time.perf_counter() - t
    pub = pub_dir / json.loads((pub_dir / "manifest.json").read_text())["file"]
    fp32 = proj_dir / json.loads((proj_dir / "manifest.json").read_text())["file"]
    variants = {"published-style fp16, batch 1": pub, "project fp32, batch 1+8": fp32}
    conv.setdefault("quantize_s", {})
    for prec in ("fp16", "int8"):
        dst = fp32.with_name(C.image_file_name(prec, [1, 8]))
        if not dst.is_file():
            t = time.perf_counter()
            C.reduce_precision(fp32, dst, prec)
            conv["quantize_s"][prec] = time.perf_counter() - t
        variants[f"project {prec}, batch 1+8"] = dst
    times_file.write_text(json.dumps(conv))
    module = image_module(src)
    x = C.random_images(16, seed=1234)
    ref = C.torch_embed(module, x)
    rows: list[dict] = []
    for name, path in variants.items():
        g = LiteRTGraph(path, threads)
        sig = "batch_8" if "batch_8" in g.signatures else "serving_default"
        p = C.parity(ref, C.litert_embed(g, sig, x))
        rows.append(
            {
                "name": name,
                "mb": path.stat().st_size / 1e6,
                "pearson": p.pearson,
                "maxdiff": p.max_abs_diff,
                "top10": p.top10,
            }
        )
    rows.append(
        {
            "name": "open_clip/timm torch eager fp32",
            "mb": None,
            "pearson": 1.0,
            "maxdiff": 0.0,
            "top10": 1.0,
        }
    )
    load0 = os.getloadavg()[0]
    ms = time_all(
        {
            **{n: ("litert", p) for n, p in variants.items()},
            "open_clip/timm torch eager fp32": ("torch", module),
        },
        threads,
        rounds,
        log,
    )
    conv["load"] = (load0, os.getloadavg()[0])
    for r in rows:
        got = ms[r["name"]]
        r["ms1"], r["ms1_med"] = got.get(1, (None, None))
        r["ms8"], r["ms8_med"] = got.get(8, (None, None))
    return rows, conv


TEXT_CFG = "ViT-B-16-SigLIP2"
CHILD_TORCH = """
import time, sys; t0 = time.perf_counter()
import torch, open_clip
torch.set_num_threads({threads})
m = open_clip.create_model('local-dir:{d}', device='cpu'); m.visual = None; m.eval()
tok = torch.randint(2, 256000, (1, 64))
with torch.inference_mode():
    m.encode_text(tok, normalize=True)
    t1 = time.perf_counter()
    for _ in range(10): m.encode_text(tok, normalize=True)
print(t1 - t0, (time.perf_counter() - t1) / 10)
"""
CHILD_LITE = """
import time, sys; t0 = time.perf_counter()
import numpy as np
from ai_edge_litert.interpreter import Interpreter
it = Interpreter(model_path='{p}', num_threads={threads}); r = it.get_signature_runner('serving_default')
tok = np.random.default_rng(0).integers(2, 256000, (1, 64)).astype(np.int32)
r(args_0=tok)
t1 = time.perf_counter()
for _ in range(10): r(args_0=tok)
print(t1 - t0, (time.perf_counter() - t1) / 10)
"""
CHILD_STANDIN = """
import time, sys; t0 = time.perf_counter()
from wherein.search.{mod} import {fn}
t = {fn}('{root}')
t.encode(['a red square'])
t1 = time.perf_counter()
for i in range(20): t.encode([f'a red square number {{i}}'])
print(t1 - t0, (time.perf_counter() - t1) / 20, 'torch' in sys.modules)
"""


def _child(code: str) -> list[str]:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900)
    if r.returncode:
        raise RuntimeError(r.stderr[-2000:])
    return r.stdout.strip().splitlines()[-1].split()


def text_bench(work: Path, threads: int, log) -> dict:
    import open_clip
    import torch
    from safetensors.torch import save_file

    from wherein.indexer.models.convert import build as C

    res: dict = {}
    d = work / "text-random"
    d.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = open_clip.create_model(TEXT_CFG, pretrained=None, device="cpu")
    cfg = open_clip.get_model_config(TEXT_CFG)
    (d / "open_clip_config.json").write_text(json.dumps({"model_cfg": cfg}))
    save_file(
        {k: v.contiguous() for k, v in model.state_dict().items()},
        str(d / "open_clip_model.safetensors"),
    )
    model.visual = None
    model.eval()
    res["text_params_m"] = sum(p.numel() for p in model.parameters()) / 1e6

    class Text(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, tokens):
            return self.m.encode_text(tokens, normalize=True)

    module = Text(model).eval()
    path = d / "text_tower.tflite"
    log("converting the full-size text tower")
    t = time.perf_counter()
    C._write_graph(
        [("serving_default", module, (torch.zeros(1, 64, dtype=torch.long),))], path, "fp32"
    )
    res["convert_s"] = time.perf_counter() - t
    res["tflite_mb"] = path.stat().st_size / 1e6
    tok = torch.randint(2, 256000, (8, 64), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        ref = module(tok).numpy()
    from ai_edge_litert.interpreter import Interpreter

    r = Interpreter(model_path=str(path), num_threads=threads).get_signature_runner(
        "serving_default"
    )
    got = np.concatenate(
        [r(args_0=tok[i : i + 1].numpy().astype(np.int32))["output_0"] for i in range(8)]
    )
    p = C.parity(ref, got)
    res["pearson"], res["maxdiff"] = p.pearson, p.max_abs_diff
    del model, module
    log("text cold starts (fresh processes)")
    res["torch_cold"], res["torch_query"] = map(
        float, _child(CHILD_TORCH.format(d=d, threads=threads))
    )
    res["lite_cold"], res["lite_query"] = map(
        float, _child(CHILD_LITE.format(p=path, threads=threads))
    )
    return res


def standin_text_bench(work: Path) -> dict:
    """Whole query path (tokenizer included) on the stand-in tower: what the import of torch costs."""
    from wherein.indexer.models.convert import build as C
    from wherein.indexer.models.convert.towers import parse_source
    from wherein.indexer.models.standins import build_standin_models

    root = build_standin_models(work / "standin")
    C.convert_text_tower(
        parse_source(f"local-dir:{root / 'siglip2-text'}"), root, log=lambda s: None
    )
    lite = _child(CHILD_STANDIN.format(mod="text_tower_litert", fn="load_query_encoder", root=root))
    torch_ = _child(CHILD_STANDIN.format(mod="text_tower", fn="load_text_tower", root=root))
    return {
        "lite_cold": float(lite[0]),
        "lite_query": float(lite[1]),
        "lite_torch_imported": lite[2],
        "torch_cold": float(torch_[0]),
        "torch_query": float(torch_[1]),
    }


def _f(v, fmt="{:.0f}"):
    return "–" if v is None else fmt.format(v)


def report(
    cmd: str,
    peak: dict,
    rows: list[dict],
    conv: dict,
    text: dict,
    standin: dict,
    secs: float,
    rounds: int,
) -> str:
    base = next(r for r in rows if r["name"].startswith("published"))["ms1"]
    torch8 = rows[-1]["ms8"]
    lines = [
        "# Converted SigLIP 2 towers: speed and fidelity",
        "",
        f"Command: `{cmd}` (whole run {secs / 60:.1f} min)",
        "",
        f"Machine: {peak['model']}, {peak['cores']} cores at {peak['ghz']:.2f} GHz, Python {platform.python_version()}; "
        f"LiteRT and torch both on {peak['cores']} threads (int8 counts int8 MACs as FLOPs, so it can pass 100%). Random-weight full-size ViT-B/16 "
        "(`vit_base_patch16_siglip_224`, MAP pool, 768-d), so speed is the real model's; "
        "fidelity is measured against the same torch module.",
        "",
        f"fp32 peak, estimated: {peak['cores']} cores × {peak['ghz']:.2f} GHz × {peak['per_cycle']} FLOP/cycle "
        f"({peak['why']}; `lscpu` flags, clock from /proc/cpuinfo) = {peak['peak_gflops']:.0f} GFLOP/s. "
        f"That clock is the VM's nominal one: numpy/OpenBLAS SGEMM 4096³ (best of 5, both cores) measures "
        f"**{peak['sgemm_gflops']:.0f} GFLOP/s**, so the cores run boosted (EPYC Zen 4 boosts to ~3.7 GHz: "
        f"{peak['cores'] * 3.7 * peak['per_cycle']:.0f} GFLOP/s). The % column uses the larger of the "
        f"estimate and the SGEMM measurement as the peak. Work per image: {GFLOP_PER_IMAGE} GFLOP "
        "(the converter's count, 17.18 GMAC).",
        "",
        "## Image tower",
        "",
        f"Timing: {rounds} rounds interleaved across all variants (the machine is shared with other jobs: "
        f"load average {conv['load'][0]:.1f} before, {conv['load'][1]:.1f} after, on {peak['cores']} cores); "
        "the table gives the minimum per-image time over rounds (least disturbed), median in brackets.",
        "",
        "| graph | ms/image b1 | ms/image b8 | speed-up vs published b1 | % of fp32 peak (best batch) | size MB | corr vs torch | max abs diff | top-10 agreement |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        best = min(v for v in (r["ms1"], r["ms8"]) if v is not None)
        frac = (
            GFLOP_PER_IMAGE / (best / 1000) / max(peak["peak_gflops"], peak["sgemm_gflops"]) * 100
        )
        lines.append(
            f"| {r['name']} | {_f(r['ms1'])} ({_f(r['ms1_med'])}) | {_f(r['ms8'])} ({_f(r['ms8_med'])}) | {base / best:.2f}× | {frac:.0f}% | "
            f"{_f(r['mb'])} | {r['pearson']:.6f} | {r['maxdiff']:.1e} | {r['top10']:.3f} |"
        )
    lines += [
        "",
        "Batch 8 vs torch eager batch 8: "
        + ", ".join(f"{r['name']} {torch8 / r['ms8']:.2f}×" for r in rows[:-1] if r["ms8"])
        + ".",
        "",
        f"Conversion time (2 cores): published-style {conv['convert_published_s']:.0f} s, "
        f"project fp32 b1+8 {conv['convert_project_s']:.0f} s (includes torch build and the parity check); "
        f"fp16 / int8 from that fp32 graph: {conv['quantize_s']['fp16']:.0f} s / {conv['quantize_s']['int8']:.0f} s.",
        "",
        "int8 is dynamic-range (ai-edge-quantizer: int8 per-channel weights on FULLY_CONNECTED and CONV_2D, "
        "activations quantized at run time); its accuracy cost is the corr / top-10 columns above. "
        "fp16 is fp16 weights (float casting), dequantized to fp32 at load: same speed as fp32, half the file.",
        "",
        "## Text tower (query encoder)",
        "",
        f"Full ViT-B-16-SigLIP2 text config, random weights ({text['text_params_m']:.0f} M parameters), "
        f"tokens [1,64]. Conversion {text['convert_s']:.0f} s, .tflite {text['tflite_mb']:.0f} MB, "
        f"corr vs torch {text['pearson']:.6f} (max |diff| {text['maxdiff']:.1e}). Tokenizer excluded here.",
        "",
        "| encoder | cold start (new process: imports + load + first query) | per query |",
        "|---|---:|---:|",
        f"| open_clip torch | {text['torch_cold']:.2f} s | {text['torch_query'] * 1000:.0f} ms |",
        f"| LiteRT .tflite | {text['lite_cold']:.2f} s | {text['lite_query'] * 1000:.0f} ms |",
        "",
        f"Whole query path on the stand-in models (tokenizer included; tiny tower, so this is import + "
        f"tokenizer cost): torch TextTower cold {standin['torch_cold']:.2f} s, {standin['torch_query'] * 1000:.1f} ms/query; "
        f"LiteRTTextTower cold {standin['lite_cold']:.2f} s, {standin['lite_query'] * 1000:.1f} ms/query "
        f"(torch imported: {standin['lite_torch_imported']}).",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "convert.md")
    ap.add_argument(
        "--work",
        type=Path,
        default=None,
        help="keep converted graphs and text figures here, and reuse them on the next run",
    )
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--rounds", type=int, default=6, help="timing rounds (min and median reported)")
    ap.add_argument(
        "--skip-text", action="store_true", help="reuse the text figures saved in --work"
    )
    args = ap.parse_args()
    cmd = " ".join(["python bench/bench_convert.py", *sys.argv[1:]])
    t0 = time.perf_counter()
    log = lambda s: print(f"[{time.perf_counter() - t0:6.0f}s] {s}", file=sys.stderr, flush=True)  # noqa: E731
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        peak = cpu_peak()
        log(f"peak estimate {peak['peak_gflops']:.0f} GFLOP/s, sgemm {peak['sgemm_gflops']:.0f}")
        saved = work / "text_figures.json"
        if args.skip_text and saved.is_file():
            standin, text = json.loads(saved.read_text())
        else:
            standin = standin_text_bench(work)
            text = text_bench(work, args.threads, log)
            saved.write_text(json.dumps([standin, text]))
        rows, conv = image_bench(work, args.threads, args.rounds, log)
    md = report(cmd, peak, rows, conv, text, standin, time.perf_counter() - t0, args.rounds)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(md)
    print(md)


if __name__ == "__main__":
    main()
