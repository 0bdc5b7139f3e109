"""`wherein models optimize` at real size: indexing and cold search before and after.

    python bench/bench_optimize.py [--work DIR] [--photos 48] [--repeat 3] [--compare-ref REF]
                                   [--out bench/results/optimize.md]

A models directory laid out as `wherein models pull` lays out the real one, with
full-size random-weight graphs (no model hub here; speed does not depend on the
weights' values):
  siglip2-image/siglip2_base_224_fp16.tflite   `models convert siglip2 --random-weights
                                               --precision fp16 --batch 1`, renamed to the
                                               published name, no manifest (published-style)
  siglip2-text/open_clip_config.json + open_clip_model.safetensors (ViT-B-16-SigLIP2,
                                               random weights) + tokenizer.json: a synthetic
                                               byte-fallback BPE with Gemma's vocabulary size
                                               (256,000), since Gemma's file cannot be downloaded

Measured, each as a whole process (subprocess wall time from start to exit):
  1. `wherein models optimize --yes` (int8 image tower + LiteRT text tower), its
     verification figures on the indexed photos;
  2. `wherein index` on N synthetic 12-MP JPEGs with the optimized tower, vs an open_clip
     eager loop (open_clip.create_model_and_transforms from the same local weights,
     PIL decode, its preprocess, encode_image one photo at a time) on the same photos;
  3. per-stage core-ms: decode + preprocess (the indexer's imaging.prepare, one core)
     and model (process CPU time of ImageTower.embed, all threads); the CPU-bound limit
     is cores x 1000 / (decode + model core-ms) images/s, and the indexer's images/s is
     reported as a fraction of it. Index and stage runs alternate --repeat times (min and
     median given); --compare-ref REF adds `wherein index` as the code was at git REF
     (exported with git archive) to each round: a pipeline change's before and after on
     the same photos, graphs and machine state;
  4. cold `wherein search` with the LiteRT text tower, process start to printed hits
     (and with the open_clip text tower, before optimizing).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
WHEREIN = str(Path(sys.executable).parent / "wherein")
TEXT_CFG = "ViT-B-16-SigLIP2"
VOCAB = 256_000  # Gemma's, as in the real tokenizer.json

EAGER = """
import sys, time
from pathlib import Path
import torch, open_clip
from PIL import Image
torch.set_num_threads({threads})
model, _, preprocess = open_clip.create_model_and_transforms('local-dir:{text_dir}', device='cpu')
model.eval()
t0 = time.perf_counter()
out = []
with torch.inference_mode():
    for p in sorted(Path('{photos}').glob('*.jpg')):
        x = preprocess(Image.open(p).convert('RGB')).unsqueeze(0)
        e = model.encode_image(x)
        out.append((e / e.norm(dim=-1, keepdim=True))[0].numpy())
print(len(out), time.perf_counter() - t0)
"""


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


CPU_S: dict[str, float] = {}  # command -> CPU seconds (user + sys) of its last run


def timed_run(cmd: list[str], env: dict | None = None) -> tuple[float, str]:
    """Wall seconds and stdout of a child process; its CPU seconds go to CPU_S.

    On a shared machine the wall time includes waiting for a core; the CPU time
    is what the process itself used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    secs = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU_S[" ".join(cmd[:3])] = (after.ru_utime - before.ru_utime) + (
        after.ru_stime - before.ru_stime
    )
    if r.returncode:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stderr[-3000:]}")
    return secs, r.stdout


def last_cpu(cmd: list[str]) -> float:
    return CPU_S[" ".join(cmd[:3])]


def last_json(text: str) -> dict:
    return json.loads(text[text.index("{") :])


# -- models laid out as `pull` writes them ----------------------------------------
def synthetic_tokenizer(out_dir: Path, vocab_size: int = VOCAB, seed: int = 0) -> None:
    """A byte-fallback BPE with SentencePiece-style word marks and Gemma's special ids
    (pad 0, eos 1, bos 2, unk 3; EOS appended), as large as Gemma's vocabulary."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import BPE

    specials = ["<pad>", "<eos>", "<bos>", "<unk>"]
    vocab: dict[str, int] = {t: i for i, t in enumerate(specials)}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    chars = "▁abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?'&;:-_"
    for c in chars:
        vocab.setdefault(c, len(vocab))
    rng = random.Random(seed)
    short = list(chars)  # pieces of at most 5 characters: merged into words of up to 10
    tails = [c for c in chars if c != "▁"]
    merges = []
    while len(vocab) < vocab_size:
        a, b = rng.choice(short), rng.choice(tails)
        if a + b in vocab:
            continue
        vocab[a + b] = len(vocab)
        merges.append((a, b))
        if len(a + b) <= 5:
            short.append(a + b)
            tails.append(a + b)
    tok = Tokenizer(BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_previous")
    tok.post_processor = processors.TemplateProcessing(
        single="$A <eos>", pair="$A <eos> $B <eos>", special_tokens=[("<eos>", 1)]
    )
    tok.add_special_tokens(specials)
    tok.save(str(out_dir / "tokenizer.json"))
    (out_dir / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "pad_token": "<pad>",
                "eos_token": "<eos>",
                "bos_token": "<bos>",
                "unk_token": "<unk>",
                "model_max_length": 64,
            }
        )
    )


def build_models(work: Path) -> Path:
    """work/models laid out as `pull` writes it (cached across runs in work/)."""
    models = work / "models"
    image = models / "siglip2-image" / "siglip2_base_224_fp16.tflite"
    text = models / "siglip2-text"
    if not image.is_file():
        from wherein.indexer.models.convert import build as C
        from wherein.indexer.models.convert.towers import Source

        log("converting the published-style fp16 image tower (random weights, batch 1)")
        conv = work / "convert"
        m = C.convert_image_tower(
            Source("random", config="full", seed=0), conv, [1], "fp16", log=log
        )
        image.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(conv / "siglip2-image" / m["file"], image)
    random_text_dir(text)
    return models


def random_text_dir(text: Path) -> None:
    """A random-weight ViT-B-16-SigLIP2 open_clip directory at `text` (kept when there)."""
    if not (text / "open_clip_model.safetensors").is_file():
        import open_clip
        import torch
        from safetensors.torch import save_file

        log("writing a random-weight ViT-B-16-SigLIP2 open_clip directory")
        text.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(0)
        model = open_clip.create_model(TEXT_CFG, pretrained=None, device="cpu")
        cfg = {
            "model_cfg": open_clip.get_model_config(TEXT_CFG),
            "preprocess_cfg": {
                "mean": [0.5, 0.5, 0.5],
                "std": [0.5, 0.5, 0.5],
                "interpolation": "bicubic",
                "resize_mode": "squash",
            },
        }
        (text / "open_clip_config.json").write_text(json.dumps(cfg))
        save_file(
            {k: v.contiguous() for k, v in model.state_dict().items()},
            str(text / "open_clip_model.safetensors"),
        )
        synthetic_tokenizer(text)


# -- measurements ------------------------------------------------------------------
def index_once(photos: Path, models: Path, index: Path, wherein: list[str] | None = None) -> dict:
    shutil.rmtree(index, ignore_errors=True)
    args = ["index", str(photos), "--models", str(models), "--index", str(index), "--json"]
    cmd = [*(wherein or [WHEREIN]), *args]
    secs, out = timed_run(cmd)
    res = last_json(out)
    return {
        "process_s": secs,
        "cpu_s": last_cpu(cmd),
        "run_s": res["seconds"],
        "images_per_s": res["images_per_second"],
    }


def cold_search(models: Path, index: Path, runs: int) -> list[tuple[float, float]]:
    """(wall s, CPU s) per new `wherein search` process."""
    times = []
    for i in range(runs):
        cmd = [
            WHEREIN,
            "search",
            f"a red bicycle {i}",
            "--models",
            str(models),
            "--index",
            str(index),
        ]
        secs, out = timed_run(cmd)
        assert out.strip(), "no hits printed"
        times.append((secs, last_cpu(cmd)))
    return times


TOKENIZER_LOAD = """
import time; t0, c0 = time.perf_counter(), time.process_time()
from tokenizers import Tokenizer
Tokenizer.from_file('{path}')
print(time.perf_counter() - t0, time.process_time() - c0)
"""


def tokenizer_load(models: Path) -> tuple[float, float]:
    """(wall s, CPU s) of loading tokenizer.json in a fresh process: part of every cold search."""
    code = TOKENIZER_LOAD.format(path=models / "siglip2-text" / "tokenizer.json")
    _, out = timed_run([sys.executable, "-c", code])
    wall, cpu = out.split()
    return float(wall), float(cpu)


def stage_core_ms(photos: list[Path], models: Path) -> dict:
    from wherein.indexer.imaging import prepare
    from wherein.indexer.models.image_tower import ImageTower
    from wherein.indexer.models.modeldir import ModelDir
    from wherein.schemas.models import SIGLIP2

    decode = []
    pixels = []
    for p in photos:
        t = time.thread_time()
        prepared = prepare(p.read_bytes(), SIGLIP2.image)
        decode.append((time.thread_time() - t) * 1000)
        pixels.append(prepared.pixels)
    x = np.stack(pixels)
    # Work per image: one interpreter thread, its own CPU time (a 2-thread pool's spin-waits
    # would count as work on a busy machine). Wall: the indexer's setting (all cores).
    one = ImageTower.from_models(ModelDir(models), num_threads=1)
    one.embed(x[:2])  # warm-up: weights packed on the first run
    c = time.thread_time()
    one.embed(x)
    model_core = (time.thread_time() - c) * 1000 / len(x)
    tower = ImageTower.from_models(ModelDir(models))
    tower.embed(x[:2])
    w = time.perf_counter()
    tower.embed(x)
    model_wall = (time.perf_counter() - w) * 1000 / len(x)
    # The indexer's way: one image per call, spread over the tower's lanes.
    pool = tower.lane_pool()
    for f in [pool.submit(tower.embed, x[i : i + 1]) for i in range(2 * tower.lanes)]:
        f.result()  # every lane's interpreter made and its weights packed
    w = time.perf_counter()
    for f in [pool.submit(tower.embed, x[i : i + 1]) for i in range(len(x))]:
        f.result()
    lanes_wall = (time.perf_counter() - w) * 1000 / len(x)
    return {
        "decode_core_ms": statistics.mean(decode),
        "model_core_ms": model_core,
        "model_wall_ms": model_wall,
        "lanes_wall_ms": lanes_wall,
        "threads": tower.graph.num_threads,
        "lanes": f"{tower.lanes}x{tower.lane_threads}",
        "tower": tower.path.name,
    }


def limit_runs(
    photo_dir: Path,
    photos: list[Path],
    models: Path,
    index: Path,
    repeat: int,
    ref: list[str] | None,
) -> list[dict]:
    """repeat x (index with the ref's code, index with this code, stage core-ms), alternated
    so that other jobs on a shared machine weigh on each alike."""
    runs = []
    for i in range(repeat):
        log(f"  round {i + 1} of {repeat}")
        run = {"ref": index_once(photo_dir, models, index, ref)} if ref else {}
        run["this"] = index_once(photo_dir, models, index)
        run["stages"] = stage_core_ms(photos, models)
        runs.append(run)
    return runs


def code_at(ref: str, dest: Path) -> list[str]:
    """A `wherein` command that runs the package as it was at git ref."""
    pkg = dest / "wherein"
    shutil.rmtree(pkg, ignore_errors=True)
    pkg.mkdir(parents=True)
    tar = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "indexer", "schemas", "search"],
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(pkg)], input=tar, check=True)
    boot = (
        f"import sys; sys.path.insert(0, {str(dest)!r}); sys.argv[0] = 'wherein'; "
        "from wherein.search.cli import cli; cli()"
    )
    return [sys.executable, "-c", boot]


def cpu_name() -> str:
    """The CPU as lscpu names it, with the int8 dot-product extensions it exposes."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    name = re.search(r"^model name\s*:\s*(.+)$", info, re.M)
    flags = re.search(r"^flags\s*:\s*(.+)$", info, re.M)
    have = set(flags.group(1).split()) if flags else set()
    isa = [f for f in ("avx512_vnni", "avx_vnni", "amx_int8") if f in have]
    isa = isa or [f for f in ("avx512f", "avx2") if f in have][:1]
    return f"{name.group(1).strip() if name else platform.machine()} ({', '.join(isa) or 'no AVX'})"


def priority() -> str:
    """The scheduler weight this run had against other jobs (autogroup nice, where set)."""
    try:
        nice = Path("/proc/self/autogroup").read_text().split()[-1]
    except (OSError, IndexError):
        return ""
    return f"; autogroup nice {nice}" if nice != "0" else ""


def eager(photos: Path, models: Path, threads: int) -> dict:
    code = EAGER.format(threads=threads, text_dir=models / "siglip2-text", photos=photos)
    cmd = [sys.executable, "-c", code]
    secs, out = timed_run(cmd)
    n, loop_s = out.strip().splitlines()[-1].split()
    return {"process_s": secs, "cpu_s": last_cpu(cmd), "loop_s": float(loop_s), "images": int(n)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=None, help="keep graphs and photos here")
    ap.add_argument("--photos", type=int, default=48)
    ap.add_argument("--search-runs", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3, help="index + stage rounds per tower")
    ap.add_argument("--compare-ref", default=None, help="also index with the code at this git ref")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "optimize.md")
    args = ap.parse_args()
    cmd = " ".join(["python bench/bench_optimize.py", *sys.argv[1:]])
    cores = len(os.sched_getaffinity(0))
    t_all = time.perf_counter()
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        models = build_models(work)
        # A fresh copy of the pulled layout: optimize writes into it.
        run_models = work / "run-models"
        shutil.rmtree(run_models, ignore_errors=True)
        shutil.copytree(models, run_models, copy_function=os.link)
        photo_dir = work / "photos"
        if len(list(photo_dir.glob("*.jpg"))) != args.photos:
            from bench_index import make_photos

            shutil.rmtree(photo_dir, ignore_errors=True)
            log(f"writing {args.photos} synthetic 4032x3024 JPEGs")
            make_photos(photo_dir, args.photos)
        photos = sorted(photo_dir.glob("*.jpg"))
        index = work / "index"

        ref = code_at(args.compare_ref, work / "ref-code") if args.compare_ref else None
        log("before: wherein index with the published-style fp16 tower")
        fp16_runs = limit_runs(photo_dir, photos, run_models, index, args.repeat, ref)
        before = fp16_runs[-1]["this"]
        log("before: cold search with the open_clip text tower")
        search_torch = cold_search(run_models, index, 2)

        log("wherein models optimize --yes")
        opt_s, out = timed_run(
            [
                WHEREIN,
                "models",
                "optimize",
                "--models",
                str(run_models),
                "--index",
                str(index),
                "--yes",
                "--no-self-test",  # random weights cannot pass a semantic test
                "--min-speedup",  # measure the int8 tower even where it does not pay
                "0",
                "--only",
                "siglip2-image",
                "--only",
                "siglip2-text",
                "--json",
            ]
        )
        optimized = last_json(out)
        load.append(os.getloadavg()[0])

        log("after: wherein index (fresh index) with the optimized tower")
        int8_runs = limit_runs(
            photo_dir, photos, run_models, work / "index-after", args.repeat, ref
        )
        after = int8_runs[-1]["this"]
        log("after: cold searches with the LiteRT text tower")
        search_lite = cold_search(run_models, work / "index-after", args.search_runs)
        tok_load = tokenizer_load(run_models)
        log("open_clip eager loop")
        torch_loop = eager(photo_dir, run_models, cores)
        load.append(os.getloadavg()[0])
    secs = time.perf_counter() - t_all
    md = report(
        cmd,
        cores,
        load,
        secs,
        args.photos,
        before,
        after,
        optimized,
        opt_s,
        search_torch,
        search_lite,
        torch_loop,
        tok_load,
        {"fp16": fp16_runs, "int8": int8_runs},
        args.compare_ref,
    )
    args.out.write_text(md)
    print(md)


def report(
    cmd,
    cores,
    load,
    secs,
    n,
    before,
    after,
    optimized,
    opt_s,
    search_torch,
    search_lite,
    torch_loop,
    tok_load,
    limit_rounds,
    compare_ref,
) -> str:
    parts = {o["model"]: o for o in optimized["optimized"]}
    img = parts["siglip2-image"]
    fig = img["figures"]
    sig = fig["signatures"]["serving_default"]
    text = parts["siglip2-text"]

    speedup = torch_loop["process_s"] / after["process_s"]
    lines = [
        "# `wherein models optimize` at real size",
        "",
        f"Command: `{cmd}` (whole run {secs / 60:.1f} min)",
        "",
        f"Machine: {cpu_name()}, {cores} cores, Python "
        f"{platform.python_version()}. **Shared**: other jobs ran on the same 2 cores during the "
        f"run (load average {load[0]:.1f} at start, {load[1]:.1f} after optimize, {load[2]:.1f} "
        f"at the end{priority()}), so wall times are upper bounds; core-ms figures are steadier.",
        "",
        "Models laid out as `wherein models pull` writes them, with full-size random-weight "
        "graphs: the image tower is `models convert siglip2 --random-weights --precision fp16 "
        "--batch 1` under the published file name (fp16 constants behind DEQUANTIZE ops, like "
        "`siglip2_base_224_fp16.tflite`); the text directory holds a random-weight "
        "ViT-B-16-SigLIP2 open_clip model and a synthetic 256,000-token BPE `tokenizer.json`. "
        f"Photos: {n} synthetic 4032x3024 JPEGs (`bench_index.make_photos`).",
        "",
        "## What optimize did",
        "",
        f"`wherein models optimize --yes` took {opt_s:.0f} s (whole process). Verified on "
        f"{optimized['verified_on']}:",
        "",
        "| model | status | file | result |",
        "|---|---|---|---|",
    ]
    for o in optimized["optimized"]:
        lines.append(f"| {o['model']} | {o['status']} | {o['file']} | {o['message']} |")
    lines += [
        "",
        f"Image tower int8 vs its fp16 source on the indexed photos: correlation "
        f"{sig['pearson']:.6f}, top-10 agreement {sig['top10_agreement']:.3f}, max |diff| "
        f"{sig['max_abs_diff']:.1e} (pass marks 0.99 / 0.9); "
        f"{fig['ms_per_image']['source']:.0f} -> {fig['ms_per_image']['candidate']:.0f} ms/image. "
        f"Text tower LiteRT vs open_clip: correlation {text['figures'].get('pearson', float('nan')):.6f}.",
        "",
        "## Indexing: whole process",
        "",
        "| run | process wall s | process CPU s | images/s (whole process) | indexer run s | indexer images/s |",
        "|---|---:|---:|---:|---:|---:|",
        f"| `wherein index`, published-style fp16 tower | {before['process_s']:.1f} | "
        f"{before['cpu_s']:.1f} | {n / before['process_s']:.2f} | {before['run_s']:.1f} | "
        f"{before['images_per_s']:.2f} |",
        f"| `wherein index`, optimized int8 tower | {after['process_s']:.1f} | "
        f"{after['cpu_s']:.1f} | {n / after['process_s']:.2f} | {after['run_s']:.1f} | "
        f"{after['images_per_s']:.2f} |",
        f"| open_clip eager loop (same weights, one photo at a time) | {torch_loop['process_s']:.1f} | "
        f"{torch_loop['cpu_s']:.1f} | {n / torch_loop['process_s']:.2f} | {torch_loop['loop_s']:.1f} | "
        f"{n / torch_loop['loop_s']:.2f} |",
        "",
        f"**wherein index (optimized) vs open_clip eager, whole process: {speedup:.1f}x wall, "
        f"{torch_loop['cpu_s'] / after['cpu_s']:.1f}x CPU** (target >= 6x).",
        "",
        "## Where the time goes: the CPU-bound limit",
        "",
        "Decode = the indexer's `imaging.prepare` (read, SHA-256, JPEG draft decode, resize, "
        "normalise), thread CPU time; model = `ImageTower.embed` on one interpreter thread, thread "
        "CPU time (a thread pool's spin-waits on a busy machine would count as work otherwise). "
        f"Limit = {cores} cores x 1000 / (decode + model core-ms). Model wall: one call of "
        "the whole batch on one interpreter of all threads; lanes wall: one image per call "
        "over the tower's lanes (lanes x threads each), as the indexer runs it. Each round "
        "pairs an index run with the stage figures measured right after it; "
        f"{len(limit_rounds['int8'])} rounds, median (min-max) where several.",
        "",
        *limit_table(limit_rounds, cores, compare_ref),
        "",
        "Target: >= 90% of the limit.",
        "",
        "## Cold search: process start to printed hits",
        "",
        "| query encoder | runs | wall min s | wall median s | CPU min s | CPU median s |",
        "|---|---:|---:|---:|---:|---:|",
        _search_row("open_clip text tower (before optimize)", search_torch),
        _search_row("LiteRT text tower (after optimize)", search_lite),
        "",
        "Target: <= 1 s. Each run is a new `wherein search` process over the 48-photo index "
        "(the files are in the page cache: warm disk, cold process). Part of it: loading the "
        f"256,000-token `tokenizer.json` alone takes {tok_load[0]:.2f} s wall, {tok_load[1]:.2f} s "
        "CPU in a fresh process (`tokenizers.Tokenizer.from_file`).",
        "",
    ]
    return "\n".join(lines)


def _limit(stages: dict, cores: int) -> float:
    return cores * 1000 / (stages["decode_core_ms"] + stages["model_core_ms"])


def _spread(values: list[float], fmt: str = ".0f", unit: str = "") -> str:
    if len(values) == 1:
        return f"{values[0]:{fmt}}{unit}"
    return f"{statistics.median(values):{fmt}}{unit} ({min(values):{fmt}}-{max(values):{fmt}})"


def limit_table(rounds: dict[str, list[dict]], cores: int, compare_ref: str | None) -> list[str]:
    """One row per tower and code: stage figures, images/s and its share of the limit."""
    lines = [
        "| tower | code | decode core-ms/img | model core-ms/img | model wall ms/img | "
        "lanes wall ms/img | limit images/s | indexer images/s | % of limit |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for runs in rounds.values():
        st = [r["stages"] for r in runs]
        limits = [_limit(x, cores) for x in st]
        for code in ("ref", "this"):
            if code not in runs[0]:
                continue
            rate = [r[code]["images_per_s"] for r in runs]
            share = [v / lim * 100 for v, lim in zip(rate, limits, strict=True)]
            name = f"`{compare_ref}`" if code == "ref" else "this branch"
            lines.append(
                f"| {st[0]['tower']} | {name} | {_spread([x['decode_core_ms'] for x in st])} | "
                f"{_spread([x['model_core_ms'] for x in st])} | "
                f"{_spread([x['model_wall_ms'] for x in st])} | "
                f"{_spread([x['lanes_wall_ms'] for x in st])} ({st[0]['lanes']}) | "
                f"{_spread(limits, '.2f')} | {_spread(rate, '.2f')} | "
                f"**{_spread(share, '.0f', '%')}** |"
            )
    return lines


def _search_row(name: str, runs: list[tuple[float, float]]) -> str:
    wall, cpu = [w for w, _ in runs], [c for _, c in runs]
    return (
        f"| {name} | {len(runs)} | {min(wall):.2f} | {statistics.median(wall):.2f} | "
        f"{min(cpu):.2f} | {statistics.median(cpu):.2f} |"
    )


if __name__ == "__main__":
    main()
