"""`select --mask --export X.coco.json`: the local engine against Ray local mode, images/s and split.

    python bench/bench_ray_masks.py [--n 40] [--full-models DIR] [--work DIR] [--out FILE]

On N synthetic photos (3 MP JPEGs with coloured discs, indexed with the stand-in
SigLIP), every photo is selected and masked with the prompt "red" into a COCO
export, as `wherein select` does it:

- local: `MaskSession.add_masks` (thread pool, mask PNG + overlay per photo) then `write_export`
  (reads the PNGs back into the COCO writer), in this process;
- ray: `masks_at_scale.export_masks` (actors, shards in a work folder, merge), once
  starting Ray's local mode itself (what a CLI run pays) and once on a Ray already up
  (actor start and model loads only);

and checks that the two COCO files are the same (all but the creation date). The
per-image split: local, one photo at a time through the same functions; Ray, the
actors' own clocks summed over photos (decode, vision, decoder + postprocess +
piece encoding) and the driver's shard writes and merge.

--full-models DIR: also a models folder with a full-size CLIPSeg (`clipseg/` as
`wherein models pull` lays it out, e.g. the one bench_mask.py --full converts);
its SigLIP towers are replaced by the stand-ins (only CLIPSeg is timed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_mask import combined_models, make_photos  # noqa: E402

if TYPE_CHECKING:
    from wherein.search.curate.masks_at_scale import RayMaskStats

PROMPT = "red"
PHOTO = (2048, 1536)


def index(work: Path, models: Path, photos: Path) -> Path:
    import subprocess

    idx = work / f"index-{models.name}"
    if not (idx / "catalog.db").exists():
        env = {**os.environ, "WHEREIN_INDEX": str(idx), "WHEREIN_MODELS": str(models)}
        wherein = str(Path(sys.executable).with_name("wherein"))
        subprocess.run([wherein, "index", str(photos), "-q"], env=env, check=True)
    return idx


def selection(idx: Path, models: Path, n: int) -> list:
    from wherein.search.service.search import Query, open_index

    with open_index(idx, models) as searcher:
        return searcher.search(Query.build([PROMPT]), k=n)


def coco_body(path: Path) -> dict:
    doc = json.loads(path.read_text())
    doc["info"].pop("date_created", None)
    return doc


def run_local(hits, models: Path, out: Path) -> tuple[float, float, Path]:
    from wherein.search.export.hits import write_export
    from wherein.search.service.mask import MaskSession

    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    t, c = time.perf_counter(), time.process_time()
    masked = MaskSession(models).add_masks(hits, PROMPT, out / "masks")
    dest = write_export(masked, out / "local.coco.json", None, prompt=PROMPT)
    return time.perf_counter() - t, time.process_time() - c, dest


def split_local(hits, models: Path, out: Path) -> dict[str, float]:
    """Seconds per stage over all photos, one at a time, with the local engine's functions."""
    from wherein.indexer.models.clipseg import load_cached
    from wherein.search.export.labels import encode_piece, images_from_hits
    from wherein.search.localize.masking import (
        MaskResult,
        hit_values,
        open_for_mask,
        seen_image,
        with_fields,
        write_mask_files,
    )

    model = load_cached(models, os.cpu_count())
    cond = model.encode_prompt(PROMPT)
    spent = dict.fromkeys(("decode", "vision", "decoder", "write"), 0.0)
    out.mkdir(parents=True, exist_ok=True)
    for h in hits:
        t0 = time.perf_counter()
        image, size = open_for_mask(h.path)
        t1 = time.perf_counter()
        seen = seen_image(model, image, size)  # the vision pass (and the overlay's preview)
        t2 = time.perf_counter()
        res = MaskResult.from_probability(PROMPT, model.decode(seen.features, cond), seen.size)
        values = hit_values(res)
        t3 = time.perf_counter()
        files = write_mask_files(res, seen, out, f"{h.id}")
        hit = with_fields(h, {**values, "mask_path": files["mask"]})
        for item in images_from_hits([hit], PROMPT):
            encode_piece(item, "coco", [PROMPT])
        t4 = time.perf_counter()
        for k, v in zip(spent, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            spent[k] += v
    return spent


def run_ray(
    hits, models: Path, dest: Path, ray_up: bool, shard_size: int
) -> tuple[float, RayMaskStats]:
    from wherein.search.curate.masks_at_scale import export_masks

    dest.unlink(missing_ok=True)
    if ray_up:
        import ray

        ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        t = time.perf_counter()
        _, stats = export_masks(hits, PROMPT, dest, "coco", models, shard_size=shard_size)
        return time.perf_counter() - t, stats
    finally:
        if ray_up:
            import ray

            ray.shutdown()


def section(label: str, models: Path, work: Path, photos: Path, n: int, shard: int) -> list[str]:
    idx = index(work, models, photos)
    hits = selection(idx, models, n)
    out = work / f"out-{models.name}"
    wall_l, cpu_l, local = run_local(hits, models, out)
    split = split_local(hits, models, out / "split")
    wall_cold, cold = run_ray(
        hits, models, out / "ray-cold.coco.json", ray_up=False, shard_size=shard
    )
    wall_warm, warm = run_ray(hits, models, out / "ray.coco.json", ray_up=True, shard_size=shard)
    same = (
        coco_body(local)
        == coco_body(out / "ray.coco.json")
        == coco_body(out / "ray-cold.coco.json")
    )
    k = len(hits)

    def per(s: dict[str, float], key: str) -> str:
        return f"{1000 * s.get(key, 0.0) / k:.1f}"

    lines = [
        f"### {label}",
        "",
        f"{k} photos selected and masked into one COCO file; identical COCO from both engines "
        f"(pixel for pixel, same annotation ids): {'yes' if same else 'NO'}.",
        "",
        "| engine | wall s | images/s | driver CPU s |",
        "|---|---:|---:|---:|",
        f"| local (`add_masks` + `write_export`, PNG + overlay per photo) | {wall_l:.2f} | "
        f"{k / wall_l:.1f} | {cpu_l:.2f} |",
        f"| ray, starting local mode (what a CLI run pays: Ray init, actors, model loads) | "
        f"{wall_cold:.2f} | {k / wall_cold:.1f} | |",
        f"| ray, Ray already up (actors + model loads + masks) | {wall_warm:.2f} | "
        f"{k / wall_warm:.1f} | |",
        "",
        "Per-image split, ms (local: one photo at a time, interpreter threads = cores; ray: "
        f"the actors' clocks, {warm.shards} shard(s) on the pool, summed over photos):",
        "",
        "| stage | local | ray |",
        "|---|---:|---:|",
        f"| decode (JPEG draft) | {per(split, 'decode')} | {per(warm.spent, 'decode')} |",
        f"| vision graph | {per(split, 'vision')} | {per(warm.spent, 'vision')} |",
        f"| decoder + postprocess (+ piece encoding on Ray) | {per(split, 'decoder')} | "
        f"{per(warm.spent, 'decoder')} |",
        f"| write (local: mask PNG + overlay + read back + encode; ray: shard file) | "
        f"{per(split, 'write')} | {per(warm.spent, 'write')} |",
        f"| merge into the COCO file (ray, whole run) | | {per(warm.spent, 'merge')} |",
        "",
    ]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=40, help="photos (all selected)")
    ap.add_argument(
        "--shard-size", type=int, default=10, help="photos per shard (the CLI's default: 100)"
    )
    ap.add_argument("--full-models", type=Path, default=None)
    ap.add_argument(
        "--work", type=Path, default=Path(tempfile.gettempdir()) / "wherein-bench-ray-masks"
    )
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    from wherein.indexer.models.standins import build_standin_models

    args.work.mkdir(parents=True, exist_ok=True)
    photos = make_photos(args.work / "photos", args.n, PHOTO)[0].parent
    standin = build_standin_models(args.work / "standin-models")
    cmd = f"python bench/bench_ray_masks.py --n {args.n} --shard-size {args.shard_size}" + (
        f" --full-models {args.full_models}" if args.full_models else ""
    )
    lines = [
        "# Masks at dataset scale: `select --mask` local vs Ray local mode",
        "",
        f"Command: `{cmd}`",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores SHARED with other jobs running at "
        f"the same time (load average at start {os.getloadavg()[0]:.1f}), Python "
        f"{platform.python_version()}. Ray local mode: one actor per core, "
        f"{args.shard_size} photos per shard.",
        f"Photos: {args.n} synthetic {PHOTO[0]}x{PHOTO[1]} JPEGs, prompt {PROMPT!r}.",
        "",
    ]
    lines += section(
        "Stand-in CLIPSeg (host pipeline cost)", standin, args.work, photos, args.n, args.shard_size
    )
    if args.full_models:
        combo = combined_models(args.work, standin, args.full_models, "full")
        lines += section(
            "Full-size CLIPSeg rd64-refined, random weights, fp32 LiteRT",
            combo,
            args.work,
            photos,
            args.n,
            args.shard_size,
        )
    lines.append(f"Load average at the end: {os.getloadavg()[0]:.1f}.")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
