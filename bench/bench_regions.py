"""What `wherein index --regions` costs and finds, on 12-MP photos.

    python bench/bench_regions.py [--work DIR] [--out bench/results/regions.md]

Three sets of 4032x3024 JPEGs:

- issue: the photos of issue 27's table: a plain backdrop with one red square (100 to 1600
  px), and photos with big squares of other colours;
- shapes: bench/bench_index.py's photos (gradients, blurred ellipses, sensor noise);
- busy: detail everywhere (random colour blocks of 48 px), the worst case for the tiling;
- busy + red: busy photos with a red square (100 to 800 px) pasted at a random place: what
  the budget costs in recall of small things where a photo is busy all over.

1. The tiling (in process, `imaging.prepare`): regions per photo and the time to decode and
   cut them, for the default tiling and variants of it (the tiling indexes made before it,
   budget, overlap, no flat skipping), how large the red square is in its best region's
   input, and the probability of "red" (the fold's, stand-in towers) of the red squares on
   busy photos.
2. Indexing, plain and with --regions, each a fresh `wherein index` process: CPU seconds
   (this machine is shared: CPU time is steadier than wall time) and vectors. The stand-in
   tower costs next to nothing, so the cost of a real tower is added per vector from
   bench/results/optimize.md (SigLIP 2 base on this CPU: 62 core-ms an image int8, 192 fp16).
3. Probabilities for "red" (stand-ins) with and without regions: the red squares by size,
   and the photos without red (their largest).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_bigphoto import _cpu  # noqa: E402
from bench_index import make_photos  # noqa: E402

from wherein.indexer.imaging import prepare  # noqa: E402
from wherein.indexer.models.standins import build_standin_models  # noqa: E402
from wherein.indexer.regions import DEFAULT_TILING, Tiling, tiling_named  # noqa: E402
from wherein.schemas.models import SIGLIP2  # noqa: E402

W, H = 4032, 3024
SIDES = (100, 200, 400, 800, 1600)
OTHERS = [(30, 40, 220), (30, 190, 40), (230, 210, 20), (140, 40, 170), (250, 140, 10)]
TOWER_MS = {"int8": 62.0, "fp16": 192.0}  # core-ms per image, bench/results/optimize.md


def issue_photos(root: Path, others: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(27)
    for side in SIDES:
        img = Image.new("RGB", (W, H), (247, 247, 247))
        x, y = int(rng.integers(0, W - side)), int(rng.integers(0, H - side))
        ImageDraw.Draw(img).rectangle((x, y, x + side - 1, y + side - 1), fill=(220, 30, 30))
        img.save(root / f"red_{side:04d}.jpg", quality=90)
        (root / f"red_{side:04d}.json").write_text(json.dumps([x, y, x + side, y + side]))
    for i in range(others):
        img = Image.new("RGB", (W, H), (247, 247, 247))
        side = int(rng.integers(1200, 2400))
        x, y = int(rng.integers(0, W - side)), int(rng.integers(0, H - side))
        colour = OTHERS[i % len(OTHERS)]
        ImageDraw.Draw(img).rectangle((x, y, x + side, y + side), fill=colour)
        img.save(root / f"other_{i:02d}.jpg", quality=90)


def busy_photos(root: Path, n: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(28)
    for i in range(n):
        blocks = rng.integers(0, 256, size=(H // 48, W // 48, 3), dtype=np.uint8)
        img = Image.fromarray(blocks).resize((W, H), Image.Resampling.NEAREST)
        img.save(root / f"busy_{i:02d}.jpg", quality=90)


def busy_red_photos(root: Path, busy: Path) -> None:
    """Busy photos with one red square each, two per side (100 to 800 px)."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(29)
    sources = jpegs(busy)
    for i, side in enumerate([s for s in SIDES[:-1] for _ in range(2)]):
        img = Image.open(sources[i % len(sources)]).convert("RGB")
        x, y = int(rng.integers(0, W - side)), int(rng.integers(0, H - side))
        ImageDraw.Draw(img).rectangle((x, y, x + side - 1, y + side - 1), fill=(220, 30, 30))
        img.save(root / f"red_{side:04d}_{i}.jpg", quality=90)


def jpegs(root: Path) -> list[Path]:
    return sorted(root.glob("*.jpg"))


# -- 1. the tiling ---------------------------------------------------------------------------
VARIANTS = {
    f"default, {DEFAULT_TILING.name} (budget 2, down to 224 px)": DEFAULT_TILING,
    "pyramid-v1, indexes made before (budget 4, down to 320 px)": tiling_named("pyramid-v1"),
    "budget 4": replace(DEFAULT_TILING, budget=4),
    "budget 1": replace(DEFAULT_TILING, budget=1),
    "overlap 0": replace(DEFAULT_TILING, overlap=0.0),
    "no flat skipping (flat 0)": replace(DEFAULT_TILING, flat=0.0),
}
COSTED = ("issue", "shapes", "busy")  # the sets whose cost is measured


def tiling_rows(sets: dict[str, Path], models: Path) -> list[dict]:
    rows = []
    datas = {name: [p.read_bytes() for p in jpegs(sets[name])] for name in COSTED}
    plain_ms = {name: _prepare_ms(d, None) for name, d in datas.items()}
    look = Looks(models)
    for label, tiling in VARIANTS.items():
        row = {"tiling": label}
        for name, data in datas.items():
            ms, regions = _prepare_ms(data, tiling, count=True)
            row[name] = (statistics.mean(regions), ms - plain_ms[name])
        row["red"] = _red_share(sets["issue"], tiling)
        row["busy red"] = look.red(jpegs(sets["busy+red"]), tiling)
        row["busy"] = row["busy"] + (max(look.red(jpegs(sets["busy"]), tiling).values()),)
        rows.append(row)
    row = {"tiling": "plain (no regions)", "busy red": look.red(jpegs(sets["busy+red"]), None)}
    row["busy"] = (0.0, 0.0, max(look.red(jpegs(sets["busy"]), None).values()))
    return [*rows, row]


class Looks:
    """The probability of "red" a search gives a photo (the region fold over its items),
    with the stand-in towers, in process."""

    def __init__(self, models: Path) -> None:
        from wherein.indexer.models.image_tower import ImageTower
        from wherein.indexer.models.modeldir import ModelDir
        from wherein.indexer.models.text_tower import TextTower

        self.tower = ImageTower.from_models(ModelDir(models))
        self.text = TextTower.from_models(ModelDir(models))
        q = self.text.encode(["red"])[0]
        self.query = (q / np.linalg.norm(q)).astype(np.float64)

    def red(self, paths: list[Path], tiling: Tiling | None) -> dict[str, float]:
        from wherein.search.regions import photo_cosine

        out = {}
        for p in paths:
            res = prepare(p.read_bytes(), SIGLIP2.image, tiling=tiling)
            v = self.tower.embed(np.stack([px for _, px in res.items]))
            cos = (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float64) @ self.query
            whole = np.array([loc.box is None for loc, _ in res.items])
            out[p.stem] = float(
                self.text.probability(photo_cosine(cos, whole, self.text.logit_scale))
            )
        return out


def _prepare_ms(datas: list[bytes], tiling: Tiling | None, count: bool = False):
    times, regions = [], []
    for data in datas:
        best = float("inf")
        for _ in range(2):
            t = time.thread_time()
            res = prepare(data, SIGLIP2.image, tiling=tiling)
            best = min(best, time.thread_time() - t)
        times.append(best * 1e3)
        regions.append(res.regions or 0)
    ms = statistics.median(times)
    return (ms, regions) if count else ms


def _red_share(root: Path, tiling: Tiling) -> dict[int, float]:
    """side -> the share of red in the model input of the region holding the square whole
    (0: none does)."""
    out = {}
    for side in SIDES:
        res = prepare((root / f"red_{side:04d}.jpg").read_bytes(), SIGLIP2.image, tiling=tiling)
        x0, y0, x1, y1 = json.loads((root / f"red_{side:04d}.json").read_text())
        best = 0.0
        for loc, px in res.items[1:]:
            bx0, by0, bx1, by1 = loc.box or (0, 0, 0, 0)
            if bx0 <= x0 and by0 <= y0 and x1 <= bx1 and y1 <= by1:
                best = max(best, float(((px[0] > 0.5) & (px[1] < -0.5)).mean()))
        out[side] = best
    return out


# -- 2. indexing -------------------------------------------------------------------------------
def index_run(photos: Path, index: Path, models: Path, regions: bool) -> dict:
    shutil.rmtree(index, ignore_errors=True)
    cmd = [sys.executable, "-m", "wherein.search.cli", "index", str(photos), "--json", "-q"]
    cmd += ["--index", str(index), "--models", str(models)] + (["--regions"] if regions else [])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    report = json.loads(out)
    return {"wall": wall, "cpu": cpu, "vectors": report["images"], "photos": report["seen"]}


def standin_tower_ms(models: Path) -> float:
    """Core-ms per image of the stand-in tower (taken out before a real tower's is added)."""
    from wherein.indexer.models.image_tower import ImageTower
    from wherein.indexer.models.modeldir import ModelDir

    tower = ImageTower.from_models(ModelDir(models))
    batch = np.zeros((tower.batch_size, 3, 224, 224), dtype=np.float32)
    tower.embed(batch)
    t = time.process_time()
    for _ in range(5):
        tower.embed(batch)
    return (time.process_time() - t) * 1e3 / (5 * tower.batch_size)


# -- 3. probabilities --------------------------------------------------------------------------
def probabilities(index: Path, models: Path) -> dict[str, dict]:
    from wherein.search.service.search import open_index

    with open_index(index, models) as s:
        return {
            Path(h.path).stem: {"p": h.probability, "region": h.region}
            for h in s.search("red", k=100)
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/wherein-bench-regions"))
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--others", type=int, default=10)
    ap.add_argument("--shapes", type=int, default=12)
    ap.add_argument("--busy", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=2, help="index runs of each; the least CPU")
    args = ap.parse_args()
    work = args.work
    models = work / "models"
    if not (models / "STANDIN.json").exists():
        build_standin_models(models)
    sets = {name: work / name for name in (*COSTED, "busy+red")}
    if not jpegs(sets["issue"]):
        issue_photos(sets["issue"], args.others)
    if not jpegs(sets["shapes"]):
        make_photos(sets["shapes"], args.shapes)
    if not jpegs(sets["busy"]):
        busy_photos(sets["busy"], args.busy)
    if not jpegs(sets["busy+red"]):
        busy_red_photos(sets["busy+red"], sets["busy"])

    t0 = time.perf_counter()
    load = os.getloadavg()[0]
    tiling = tiling_rows(sets, models)
    standin_ms = standin_tower_ms(models)
    (work / "empty").mkdir(exist_ok=True)
    startup = min(
        index_run(work / "empty", work / "index-empty", models, False)["cpu"] for _ in range(3)
    )
    runs = {}
    for name in COSTED:
        for regions in (False, True):
            tries = [
                index_run(sets[name], work / f"index-{name}-{regions}", models, regions)
                for _ in range(args.repeat)
            ]
            runs[name, regions] = min(tries, key=lambda r: r["cpu"])
    probs = {r: probabilities(work / f"index-issue-{r}", models) for r in (False, True)}
    for r in runs.values():
        r["cpu"] -= startup  # the process's start and model load, the same for both
    load = (load, os.getloadavg()[0])
    report = render(
        tiling, runs, probs, standin_ms, startup, sets, time.perf_counter() - t0, load, args.repeat
    )
    print(report)
    if args.out:
        args.out.write_text(report)


def render(tiling, runs, probs, standin_ms, startup, sets, seconds, load, repeat) -> str:
    cpu = _cpu()
    lines = [
        "# Regions of large photos: what `index --regions` costs and finds",
        "",
        f"Command: `python bench/bench_regions.py {' '.join(sys.argv[1:])}` ({seconds:.0f} s)",
        "",
        f"Machine: {cpu}, {os.cpu_count()} cores (shared with other jobs: CPU seconds are "
        f"steadier than wall; load average {load[0]:.1f} at the start, {load[1]:.1f} at the "
        f"end), Python {platform.python_version()}. Stand-in models.",
        "",
        "Photos, all 4032x3024 JPEGs (12 MP): "
        + ", ".join(f"**{n}** {len(jpegs(r))}" for n, r in sets.items())
        + " (see the script's docstring).",
        "",
        "## 1. The tiling",
        "",
        "Regions per photo (mean) and the CPU time they add to `imaging.prepare` per photo "
        "(decode, busy map, second decode when the level needs it, crops; median ms), and "
        "the share of the red square in the model input of the region holding it whole "
        "(issue photos: on a plain backdrop).",
        "",
        "| tiling | issue: regions, +ms | shapes: regions, +ms | busy: regions, +ms | "
        + " | ".join(f"red {s} px" for s in SIDES)
        + " |",
        "|---|---|---|---|" + "---:|" * len(SIDES),
    ]
    for row in tiling[:-1]:
        cells = [f"{row[n][0]:.1f}, +{row[n][1]:.0f}" for n in COSTED]
        reds = [f"{row['red'][s]:.0%}" for s in SIDES]
        lines.append(f"| {row['tiling']} | " + " | ".join(cells + reds) + " |")
    busy_sides = SIDES[:-1]
    lines += [
        "",
        "What the budget costs in recall where a photo is busy all over: the probability of "
        "\"red\" (the search's fold over the photo's items, stand-in towers) of red squares "
        "pasted on busy photos (two of each side: their range), and the largest among the "
        "busy photos without one.",
        "",
        "| tiling | "
        + " | ".join(f"red {s} px on busy" for s in busy_sides)
        + " | busy, no red (largest) |",
        "|---|" + "---:|" * (len(busy_sides) + 1),
    ]
    for row in tiling:
        by_side = {
            s: [p for stem, p in row["busy red"].items() if stem.startswith(f"red_{s:04d}")]
            for s in busy_sides
        }
        cells = [f"{min(v):.3f}–{max(v):.3f}" for v in by_side.values()]
        lines.append(f"| {row['tiling']} | " + " | ".join(cells) + f" | {row['busy'][2]:.3f} |")
    lines += [
        "",
        "## 2. Indexing: plain and with `--regions`",
        "",
        f"CPU seconds of the `wherein index` process (the least of {repeat} runs), less "
        "its start and model load "
        f"({startup:.2f} s: the same command on an empty folder, the least of 3); the "
        f"stand-in tower costs {standin_ms:.2f} core-ms an image. *With a real tower*: the "
        "CPU seconds, less the "
        "stand-in's share, plus each vector at SigLIP 2 base's cost on this CPU "
        "(bench/results/optimize.md: 62 core-ms int8, 192 fp16).",
        "",
        "| photos | run | vectors | wall s | CPU s | CPU ms a photo | CPU ratio | "
        "with int8 tower | with fp16 tower |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in COSTED:
        plain, cut = runs[name, False], runs[name, True]
        for label, r in (("plain", plain), ("--regions", cut)):
            real = {
                k: _with_tower(r, standin_ms, ms) / _with_tower(plain, standin_ms, ms)
                for k, ms in TOWER_MS.items()
            }
            lines.append(
                f"| {name} ({r['photos']}) | {label} | {r['vectors']} | {r['wall']:.1f} | "
                f"{r['cpu']:.2f} | {r['cpu'] * 1e3 / r['photos']:.0f} | "
                f"{r['cpu'] / plain['cpu']:.2f}x | **{real['int8']:.2f}x** | "
                f"**{real['fp16']:.2f}x** |"
            )
    lines += [
        "",
        "Target: `--regions` at most 3x a plain run of the same 12-MP photos, never more than 6x.",
        "",
        '## 3. Probability of "red" (stand-ins)',
        "",
        "| photo | share of the photo | p, plain | p, --regions | region |",
        "|---|---:|---:|---:|---|",
    ]
    for side in SIDES:
        stem = f"red_{side:04d}"
        before, after = probs[False][stem], probs[True][stem]
        lines.append(
            f"| red square {side} px | {side * side / (W * H):.2%} | {before['p']:.3f} | "
            f"{after['p']:.3f} | {after['region']} |"
        )
    others = [k for k in probs[False] if not k.startswith("red_")]
    top = {r: max(probs[r][k]["p"] for k in others) for r in (False, True)}
    lines.append(
        f"| the {len(others)} photos without red (largest) | 0 | {top[False]:.3f} | "
        f"{top[True]:.3f} | |"
    )
    return "\n".join(lines) + "\n"


def _with_tower(run: dict, standin_ms: float, tower_ms: float) -> float:
    return run["cpu"] + run["vectors"] * (tower_ms - standin_ms) / 1e3


if __name__ == "__main__":
    main()
