"""CLIPSeg mask cost: per graph call, postprocessing, and k masks on k search hits.

    python bench/bench_mask.py [--full] [--work DIR] [--reps 5] [--out bench/results/mask.md]

1. Stand-in graphs (tiny; they measure the host pipeline: decode, preprocessing,
   token lookup, sigmoid/resize/threshold/regions, PNG + JPEG writing).
2. --full: a random-weight, full-size CLIPSeg rd64-refined (transformers'
   default CLIPSegConfig with patch 16 and the complex transposed convolution:
   ViT-B/16 vision 12x768, text 12x512, decoder rd64) split into the three
   published graph contracts and converted to fp32 LiteRT with litert-torch
   (cached in --work). The published bundle is fp16-weight; speed is similar
   on CPU (XNNPACK computes in fp32 either way).

Photos are synthetic 4032x3024 JPEGs (camera size), decoded as `add_masks_to_hits`
does (Image.draft, EXIF). Times are medians over --reps runs.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

ROOT = Path(__file__).resolve().parents[1]


def med_ms(fn, reps: int) -> tuple[float, float]:
    """Median wall ms and median process CPU ms (all threads) of fn()."""
    fn()  # warm-up (interpreter allocation, caches)
    wall, cpu = [], []
    for _ in range(reps):
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - t) * 1000)
        cpu.append((time.process_time() - c) * 1000)
    return statistics.median(wall), statistics.median(cpu)


def make_photos(root: Path, n: int, size=(4032, 3024)) -> list[Path]:
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        img = Image.new("RGB", size, (247, 247, 247))
        d = ImageDraw.Draw(img)
        for _ in range(4):
            x0, y0 = int(rng.integers(0, size[0] - 1200)), int(rng.integers(0, size[1] - 1200))
            colour = [(219, 26, 26), (26, 64, 224), (26, 178, 38)][int(rng.integers(0, 3))]
            d.ellipse(
                (x0, y0, x0 + int(rng.integers(300, 1200)), y0 + int(rng.integers(300, 1200))),
                fill=colour,
            )
        p = root / f"photo_{i:02d}.jpg"
        img.save(p, quality=90)
        out.append(p)
    return out


def bench_model(
    label: str, models_root: Path, photos: list[Path], reps: int, ks: list[int]
) -> list[str]:
    from wherein.indexer.models.clipseg import ClipSeg, load_cached
    from wherein.indexer.models.modeldir import ModelDir
    from wherein.schemas.records import Hit
    from wherein.search.localize.masking import (
        MaskResult,
        add_masks_to_hits,
        open_for_mask,
        plan_parallelism,
    )

    cores = os.cpu_count() or 1
    model = ClipSeg.load(ModelDir(models_root), num_threads=cores)
    img, size = open_for_mask(photos[0])
    feats = model.image_features(img)
    cond = model.encode_prompt("a red ball")
    prob = model.decode(feats, cond)
    ids = model.tokenize("a red ball")

    def text_uncached():
        model.text.run(model.embed_tokens(ids))

    rows = [
        ("decode 4032x3024 JPEG (draft) ", med_ms(lambda: open_for_mask(photos[0]), reps)),
        ("vision graph (352x352 -> t3/t6/t9)", med_ms(lambda: model.image_features(img), reps)),
        (
            "text graph + lookup + projection",
            med_ms(lambda: (text_uncached(), model.embed_tokens(ids)), reps),
        ),
        ("decoder graph", med_ms(lambda: model.decode(feats, cond), reps)),
        (
            "postprocess to 4032x3024 (resize, threshold, regions)",
            med_ms(lambda: MaskResult.from_probability("p", prob, size), reps),
        ),
    ]
    res = MaskResult.from_probability("p", prob, size)
    with tempfile.TemporaryDirectory() as tmp:
        rows.append(
            (
                "write mask PNG 4032x3024 + overlay JPEG 2048x1536",
                med_ms(
                    lambda: (
                        res.save_mask(Path(tmp) / "m.png"),
                        res.save_overlay(Path(tmp) / "o.jpg", img),
                    ),
                    reps,
                ),
            )
        )
    lines = [
        f"### {label}",
        "",
        f"Interpreter threads: {cores} (one call at a time).",
        "",
        "| step | wall ms | CPU ms |",
        "|---|---:|---:|",
    ]
    lines += [f"| {name} | {w:.1f} | {c:.1f} |" for name, (w, c) in rows]
    lines += [
        "",
        "k masks on k hits (`add_masks_to_hits`, end to end: decode, vision, decoder, "
        "postprocess, write files; cond cached):",
        "",
        "| k | workers x threads | wall s | per hit wall ms | CPU s |",
        "|---:|---|---:|---:|---:|",
    ]
    for k in ks:
        hits = [
            Hit(
                rank=i + 1,
                path=str(photos[i % len(photos)]),
                score=0.5,
                probability=None,
                width=None,
                height=None,
                id=i,
            )
            for i in range(k)
        ]
        workers, threads = plan_parallelism(k)
        load_cached(models_root, threads).encode_prompt(
            "a red ball"
        )  # loaded and cond cached: steady state
        with tempfile.TemporaryDirectory() as tmp:
            t, c = time.perf_counter(), time.process_time()
            out = add_masks_to_hits(hits, "a red ball", Path(tmp), models_root)
            total, cpu = time.perf_counter() - t, time.process_time() - c
        assert len(out) == k
        lines.append(
            f"| {k} | {workers} x {threads} | {total:.2f} | {1000 * total / k:.0f} | {cpu:.2f} |"
        )
    return lines + [""]


def build_full(work: Path) -> Path:
    """Random-weight full-size CLIPSeg -> three LiteRT graphs + assets in work/models/clipseg."""
    target = work / "models"
    d = target / "clipseg"
    if all(
        (d / g).is_file()
        for g in (
            "clipseg_vision_fp16.tflite",
            "clipseg_text_fp16.tflite",
            "clipseg_decoder.tflite",
            "token_embedding_f16.bin",
        )
    ):
        return target
    import litert_torch
    import torch
    from transformers import CLIPSegConfig, CLIPSegForImageSegmentation

    sys.path.insert(0, str(ROOT / "tests"))
    from test_clipseg_parity import split, write_assets

    from wherein.schemas.models import CLIPSEG

    config = CLIPSegConfig(
        vision_config={"patch_size": 16}, use_complex_transposed_convolution=True
    )
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = CLIPSegForImageSegmentation(config).eval()
    write_assets(model, d)
    ex = {
        "vision": (torch.zeros(1, 3, 352, 352),),
        "text": (torch.zeros(1, 77, 512),),
        "decoder": tuple(torch.zeros(1, 485, 768) for _ in range(3)) + (torch.zeros(1, 512),),
    }

    class Wrap(torch.nn.Module):
        def __init__(self, fn) -> None:
            super().__init__()
            self.fn = fn
            self.model = model

        def forward(self, *xs):
            return self.fn(*xs)

    for name, piece, spec in zip(
        ("vision", "text", "decoder"), split(model), CLIPSEG.graphs, strict=True
    ):
        t = time.perf_counter()
        litert_torch.convert(Wrap(piece.fn).eval(), ex[name]).export(str(d / spec.filename))
        print(f"converted {spec.filename} in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    return target


NOTES = [
    "Notes:",
    "- CPU ms is process CPU time (all threads); wall ms is what a user waits on this shared machine.",
    "- Per hit, the model work is one vision pass + one decoder run; the text graph runs once per",
    "  prompt (cond is cached), so k hits cost k x (decode + vision + decoder + postprocess + files) + 1 text.",
    "- Postprocess and files scale with the photo's pixel count (the mask PNG is full size);",
    "  the overlay is capped at 2048 px on its long side.",
    "- Random weights give a noise-like probability map (many small regions): a worse case for the",
    "  postprocess step (region labelling) than a trained model's smooth masks.",
    "",
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--full",
        action="store_true",
        help="Also convert and time a full-size random-weight CLIPSeg.",
    )
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "wherein-bench-mask")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    from wherein.indexer.models.standins import build_standin_models

    args.work.mkdir(parents=True, exist_ok=True)
    photos = make_photos(args.work / "photos", 8)
    standin = build_standin_models(args.work / "standin-models")
    lines = [
        "# CLIPSeg mask cost",
        "",
        f"Command: `python bench/bench_mask.py{' --full' if args.full else ''} --reps {args.reps}`",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared), Python {platform.python_version()}.",
        "Photos: synthetic 4032x3024 JPEG, decoded with Image.draft as add_masks_to_hits does.",
        f"Load average at start: {os.getloadavg()[0]:.1f} (other jobs share the cores: CPU ms is the "
        "steadier figure; wall ms is what a user waits under that load).",
        "",
    ]
    lines += bench_model(
        "Stand-in graphs (host pipeline cost)", standin, photos, args.reps, [1, 4, 8]
    )
    if args.full:
        full = build_full(args.work)
        lines += bench_model(
            "Full-size CLIPSeg rd64-refined, random weights, fp32 LiteRT (litert-torch 0.10)",
            full,
            photos,
            args.reps,
            [1, 4, 8],
        )
    lines += NOTES
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)


if __name__ == "__main__":
    main()
