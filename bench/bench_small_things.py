"""Small things in big photos: found, and drawn at the photo's own size (issue 27's table).

    python bench/bench_small_things.py [--work DIR] [--per-size 3] [--out bench/results/small_things.md]
                                       [--montage docs/images/small_things.png]

Photos: 12-MP JPEGs (4032x3024, light grey), each with one red square of side 100, 200, 400,
800 or 1600 px at a random place (--per-size of each), plus 20 photos with big squares
(1000-2000 px) of other colours. Models: the stand-ins (built in --work), which rank and
segment colours.

For each index (plain `wherein index`, then `wherein index --regions` when the CLI has it),
`wherein search red -k 40 --mask --json` as a fresh process; per square size:
- the square's share of the photo;
- the search's probability for those photos, against the photos without red;
- the mask's IoU with the drawn square at the photo's size (the mask PNG that `--mask` wrote),
  and, for comparison, the IoU of the whole 352-px pass alone (the mask before refinement,
  computed in this process from the same vision pass);
- the refinement's cost: the vision passes it added and the wall time of a mask with and
  without it (in this process, one thread, stand-in graphs: the host side).

A montage (--montage) shows, for the small sizes, the square's neighbourhood with the whole
pass's mask and the refined one.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

ROOT = Path(__file__).resolve().parents[1]
PHOTO = (4032, 3024)
SIDES = (100, 200, 400, 800, 1600)
LIGHT = (247, 247, 247)
OTHERS = ("blue", "green", "yellow")
N_OTHERS = 20


def make_photos(root: Path, per_size: int) -> dict[str, dict]:
    """The photos and what each holds: {name: {"side", "box", "colour"}} (written once)."""
    from wherein.indexer.models.standins.palette import rgb255

    layout_file = root.parent / "layout.json"
    if layout_file.is_file():
        return json.loads(layout_file.read_text())
    rng = np.random.default_rng(27)
    root.mkdir(parents=True, exist_ok=True)
    layout: dict[str, dict] = {}
    plan = [(s, "red", f"red{s:04d}_{i}.jpg") for s in SIDES for i in range(per_size)]
    plan += [
        (int(rng.integers(1000, 2001)), OTHERS[i % len(OTHERS)], f"other_{i:02d}.jpg")
        for i in range(N_OTHERS)
    ]
    for side, colour, name in plan:
        x0 = int(rng.integers(0, PHOTO[0] - side))
        y0 = int(rng.integers(0, PHOTO[1] - side))
        img = Image.new("RGB", PHOTO, LIGHT)
        ImageDraw.Draw(img).rectangle((x0, y0, x0 + side - 1, y0 + side - 1), fill=rgb255(colour))
        img.save(root / name, quality=90)
        layout[name] = {"side": side, "box": [x0, y0, x0 + side, y0 + side], "colour": colour}
    layout_file.write_text(json.dumps(layout))
    return layout


def truth_mask(box: list[int]) -> np.ndarray:
    m = np.zeros(PHOTO[::-1], dtype=bool)
    x0, y0, x1, y1 = box
    m[y0:y1, x0:x1] = True
    return m


def iou(a: np.ndarray, b: np.ndarray) -> float:
    return float((a & b).sum() / max(1, (a | b).sum()))


def wherein(args: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    exe = str(Path(sys.executable).with_name("wherein"))
    t = time.perf_counter()
    r = subprocess.run([exe, *args], env=env, capture_output=True, text=True)
    return time.perf_counter() - t, r


def has_regions_option(env: dict[str, str]) -> bool:
    _, r = wherein(["index", "--help"], env)
    return "--regions" in r.stdout


def search_run(work: Path, photos: Path, models: Path, regions: bool) -> dict:
    """Index (once per kind), then `search red -k 40 --mask`: hits by file name, and times."""
    name = "regions" if regions else "plain"
    index = work / f"index-{name}"
    env = {**os.environ, "WHEREIN_INDEX": str(index), "WHEREIN_MODELS": str(models)}
    index_s = None
    if not (index / "catalog.db").exists():
        index_s, r = wherein(["index", str(photos), "-q", *(["--regions"] if regions else [])], env)
        if r.returncode != 0:
            raise SystemExit(f"index failed: {r.stderr.strip()[-400:]}")
    out = work / f"masks-{name}"
    wall, r = wherein(["search", "red", "-k", "40", "--mask", "--out", str(out), "--json"], env)
    if r.returncode != 0:
        raise SystemExit(f"search failed: {r.stderr.strip()[-400:]}")
    hits = json.loads(r.stdout[r.stdout.index("[") :])
    return {"hits": {Path(h["path"]).name: h for h in hits}, "wall": wall, "index_s": index_s}


def whole_pass_masks(photos: Path, models: Path, layout: dict[str, dict]) -> dict[str, dict]:
    """Per red photo: the whole pass's mask IoU, the refined one's (in process), the passes
    the refinement added and the wall ms of a mask with and without it."""
    from wherein.indexer.models.modeldir import ModelDir
    from wherein.indexer.models.registry import load_segmenter
    from wherein.search.localize.masking import MaskResult, image_loader, open_for_mask
    from wherein.search.localize.refine import Refiner

    model = load_segmenter(ModelDir(models), 1)
    cond = model.encode_prompt("red")
    out = {}
    for name, spec in layout.items():
        if spec["colour"] != "red":
            continue
        path = photos / name
        t0 = time.perf_counter()
        image, size = open_for_mask(path)
        prob = model.decode(model.image_features(image), cond)
        coarse = MaskResult.from_probability("red", prob, size)
        t1 = time.perf_counter()
        refiner = Refiner(model, cond, size, image_loader(path))
        refined = MaskResult.composed("red", prob, size, refiner.refine(prob))
        t2 = time.perf_counter()
        truth = truth_mask(spec["box"])
        out[name] = {
            "coarse": coarse,
            "refined": refined,
            "iou_coarse": iou(coarse.mask, truth),
            "iou_refined": iou(refined.mask, truth),
            "passes": refiner.passes,
            "ms_whole": 1000 * (t1 - t0),
            "ms_refine": 1000 * (t2 - t1),
        }
    return out


def span(values: list[float], digits: int = 2) -> str:
    if not values:
        return "–"
    lo, hi = min(values), max(values)
    return (
        f"{lo:.{digits}f}"
        if round(lo, digits) == round(hi, digits)
        else f"{lo:.{digits}f}–{hi:.{digits}f}"
    )


def montage(photos: Path, layout: dict, local: dict, out: Path, sides=(100, 200, 400)) -> None:
    """Per small size, the photo whose refined IoU is that size's median: the square's
    neighbourhood (a square crop, 3x its side and at least 600 px), the whole pass's mask and
    the refined one (blue tint, at the photo's pixels)."""
    panel = 220
    rows = []
    for side in sides:
        names = sorted(n for n, s in layout.items() if s["side"] == side and n in local)
        names.sort(key=lambda n: local[n]["iou_refined"])
        name = names[len(names) // 2]
        x0, y0, x1, y1 = layout[name]["box"]
        crop = min(max(3 * side, 600), *PHOTO)
        left = min(max(0, (x0 + x1 - crop) // 2), PHOTO[0] - crop)
        top = min(max(0, (y0 + y1 - crop) // 2), PHOTO[1] - crop)
        box = (left, top, left + crop, top + crop)
        base = Image.open(photos / name).convert("RGB").crop(box)
        tiles = [base]
        for key in ("coarse", "refined"):
            mask = local[name][key].mask[box[1] : box[3], box[0] : box[2]]
            tint = Image.new("RGB", base.size, (0, 150, 255))
            alpha = Image.fromarray((mask * 170).astype(np.uint8))
            tiles.append(Image.composite(tint, base, alpha))
        ious = (local[name]["iou_coarse"], local[name]["iou_refined"])
        rows.append(([t.resize((panel, panel), Image.Resampling.BILINEAR) for t in tiles], ious))
    pad, label_h = 6, 18
    sheet = Image.new(
        "RGB", (3 * panel + 4 * pad, len(rows) * (panel + label_h + pad) + pad), (255, 255, 255)
    )
    draw = ImageDraw.Draw(sheet)
    for r, ((row, (before, after)), side) in enumerate(zip(rows, sides, strict=True)):
        y = pad + r * (panel + label_h + pad)
        labels = (
            f"{side}-px red square",
            f"whole 352-px pass: IoU {before:.2f}",
            f"refined: IoU {after:.2f}",
        )
        for c, (tile, label) in enumerate(zip(row, labels, strict=True)):
            x = pad + c * (panel + pad)
            draw.text((x, y), label, fill=(0, 0, 0))
            sheet.paste(tile, (x, y + label_h))
    out.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(out, optimize=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/wherein-bench-small"))
    ap.add_argument("--per-size", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/small_things.md")
    ap.add_argument("--montage", type=Path, default=ROOT / "docs/images/small_things.png")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from wherein.indexer.models.standins import build_standin_models

    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    models = work / "models"
    if not (models / "clipseg").exists():
        build_standin_models(models)
    photos = work / "photos"
    layout = make_photos(photos, args.per_size)
    load_start = os.getloadavg()[0]
    env = {**os.environ, "WHEREIN_MODELS": str(models)}
    runs = {"plain": search_run(work, photos, models, regions=False)}
    if has_regions_option(env):
        runs["regions"] = search_run(work, photos, models, regions=True)
    local = whole_pass_masks(photos, models, layout)
    montage(photos, layout, local, args.montage)

    def probs(run: dict, names) -> list[float]:
        return [run["hits"][n]["probability"] for n in names if n in run["hits"]]

    def ious(run: dict, names) -> list[float]:
        from wherein.search.export.labels import read_mask

        out = []
        for n in names:
            h = run["hits"].get(n)
            if h is None or not h.get("mask_path"):
                out.append(0.0)
                continue
            out.append(iou(read_mask(h["mask_path"]), truth_mask(layout[n]["box"])))
        return out

    others = [n for n, s in layout.items() if s["colour"] != "red"]
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    cpu = next(
        (ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")),
        platform.processor(),
    )
    vnni = "avx512_vnni" in info
    cols = ["square's side", "share of the photo", "probability"]
    if "regions" in runs:
        cols.append("probability with regions")
    cols += ["mask IoU, whole pass only", "mask IoU (`search --mask`)"]
    if "regions" in runs:
        cols.append("mask IoU with regions")
    cols += ["refinement: passes", "ms whole pass", "ms refinement"]
    lines = [
        "# Small things in big photos",
        "",
        f"Command: `python bench/bench_small_things.py --per-size {args.per_size}`",
        f"Machine: {cpu}{' (AVX-512 VNNI)' if vnni else ''}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}; load average {load_start:.1f} at the start.",
        f"Photos: {len(layout) - N_OTHERS} 12-MP JPEGs (4032x3024) with one red square each "
        f"({args.per_size} per side, random places), {N_OTHERS} with a 1000-2000 px square of "
        "another colour; stand-in models. `wherein search red -k 40 --mask --json`, fresh process"
        + (
            ", on a plain index and on one made with `wherein index --regions`."
            if "regions" in runs
            else " (this build has no `index --regions`)."
        ),  # fmt: skip
        "",
        "| " + " | ".join(cols) + " |",
        "|" + "---:|" * len(cols),
    ]
    for side in SIDES:
        names = sorted(n for n, s in layout.items() if s["side"] == side and s["colour"] == "red")
        row = [f"{side} px", f"{100 * side * side / (PHOTO[0] * PHOTO[1]):.2g}%"]
        row.append(span(probs(runs["plain"], names), 3))
        if "regions" in runs:
            row.append(span(probs(runs["regions"], names), 3))
        row.append(span([local[n]["iou_coarse"] for n in names]))
        row.append(span(ious(runs["plain"], names)))
        if "regions" in runs:
            row.append(span(ious(runs["regions"], names)))
        row.append(span([local[n]["passes"] for n in names], 0))
        row.append(f"{statistics.median(local[n]['ms_whole'] for n in names):.0f}")
        row.append(f"{statistics.median(local[n]['ms_refine'] for n in names):.0f}")
        lines.append("| " + " | ".join(row) + " |")
    row = ["no red (20 photos)", "–", span(probs(runs["plain"], others), 3)]
    if "regions" in runs:
        row.append(span(probs(runs["regions"], others), 3))
    row += ["–"] * (len(cols) - len(row))
    lines.append("| " + " | ".join(row) + " |")
    lines += [
        "",
        "- Probability: the range over the photos of that size, from the search's JSON (a photo "
        "missing from the 40 hits is left out of its range).",
        "- Mask IoU: against the drawn square, at 4032x3024, on the mask PNG `--mask` wrote "
        '(0 when the hit has no mask); "whole pass only" is the 352-px pass\'s mask before any '
        "refinement, the mask main drew before this change.",
        "- Refinement: vision passes it added per photo, and the median wall ms of one mask in "
        "this process (one thread, stand-in graphs) for the whole pass (decode reduced, vision, "
        "decoder, postprocess) and for the refinement (decode at the reduction the crops allow, "
        "one vision pass and decoder per crop, merge). With the full-size CLIPSeg each added "
        "pass costs one vision pass (bench/results/mask.md).",
        f"- `search --mask` wall time, fresh process: {runs['plain']['wall']:.1f} s for 40 hits"
        + (f"; with regions {runs['regions']['wall']:.1f} s." if "regions" in runs else "."),
        f"- Montage: `{args.montage.relative_to(ROOT) if args.montage.is_relative_to(ROOT) else args.montage}`.",
        "",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
