"""CLIPSeg mask cost on 12-megapixel photos: per-hit split, k hits, a second prompt, CLI and web.

    python bench/bench_mask.py [--full] [--work DIR] [--reps 3] [--k 10] [--out bench/results/mask.md]
        [--only web|refine|cost] [--models standin,fp32,int8]

1. Stand-in graphs (tiny; they measure the host pipeline: decode, preprocessing,
   token lookup, postprocess, PNG + JPEG writing).
2. --full: a random-weight, full-size CLIPSeg rd64-refined (transformers'
   default CLIPSegConfig with patch 16 and the complex transposed convolution:
   ViT-B/16 vision 12x768, text 12x512, decoder rd64) split into the three
   published graph contracts and converted to fp32 LiteRT with litert-torch
   (cached in --work); then its vision graph made dynamic-range int8 by
   `models optimize`'s recipe (`optimize.build.make_int8`) and chosen through
   clipseg/manifest.json as the loader does after `models optimize`.

Photos are synthetic 4032x3024 JPEGs (camera size). Per model:
- per hit: decode (JPEG draft to CLIPSeg's input), vision, decoder, postprocess
  (regions, boxes, area, score at photo size), write (mask PNG at photo size +
  preview overlay); for comparison, the previous postprocess (stretch the map to
  4032x3024, threshold, label pixels) and a full-size overlay;
- k hits through `add_masks_to_hits` (what `search --mask` adds), vision cache empty;
- the coarse-to-fine refinement's cost beside those k masks: the whole pass only, the
  refinement as each hit's map triggers it, forced to one crop per hit, and another prompt
  with the crop passes on disk (vision passes counted; passes added per hit, wall and CPU ms
  per added pass); `--only cost --models int8` runs just these and the per-hit split;
- a second prompt on hits already masked (vision passes cached in memory), and a third as a
  new process has it (vision passes read from INDEX/cache/vision);
- `wherein search red -k K --mask` as a fresh process (imports, model load, search, masks),
  then `--mask-prompt` another prompt in another process (passes on disk);
- `wherein serve`: GET /api/mask/{id} + its overlay (first prompt on an image, then another,
  then another after a restart).
Times are medians over --reps runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

ROOT = Path(__file__).resolve().parents[1]
PHOTO_SIZE = (4032, 3024)


def med_ms(fn, reps: int, setup=None) -> tuple[float, float]:
    """Median wall ms and median process CPU ms (all threads) of fn(); setup() untimed before each."""
    if setup:
        setup()
    fn()  # warm-up (interpreter allocation, caches)
    wall, cpu = [], []
    for _ in range(reps):
        if setup:
            setup()
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - t) * 1000)
        cpu.append((time.process_time() - c) * 1000)
    return statistics.median(wall), statistics.median(cpu)


def make_photos(root: Path, n: int, size=PHOTO_SIZE) -> list[Path]:
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        p = root / f"photo_{i:02d}.jpg"
        out.append(p)
        if p.is_file():
            continue
        img = Image.new("RGB", size, (247, 247, 247))
        d = ImageDraw.Draw(img)
        for _ in range(4):
            x0, y0 = int(rng.integers(0, size[0] - 1200)), int(rng.integers(0, size[1] - 1200))
            colour = [(219, 26, 26), (26, 64, 224), (26, 178, 38)][int(rng.integers(0, 3))]
            d.ellipse(
                (x0, y0, x0 + int(rng.integers(300, 1200)), y0 + int(rng.integers(300, 1200))),
                fill=colour,
            )
        img.save(p, quality=90)
    return out


def _hits(photos: list[Path], k: int):
    from wherein.schemas.records import Hit

    return [
        Hit(rank=i + 1, path=str(photos[i % len(photos)]), score=0.5, probability=None,
            width=None, height=None, id=i)
        for i in range(k)
    ]  # fmt: skip


def _timed(fn) -> tuple[float, float, object]:
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - t, time.process_time() - c, out


def bench_steps(models_root: Path, photos: list[Path], reps: int) -> list[str]:
    from wherein.indexer.models.clipseg import ClipSeg
    from wherein.indexer.models.modeldir import ModelDir
    from wherein.search.localize.masking import (
        MaskResult,
        open_for_mask,
        preview_base,
        regions,
        stretch,
    )

    cores = os.cpu_count() or 1
    model = ClipSeg.load(ModelDir(models_root), num_threads=cores)
    img, size = open_for_mask(photos[0])
    base = preview_base(img, size)
    feats = model.image_features(img)
    cond = model.encode_prompt("a red ball")
    prob = model.decode(feats, cond)
    res = MaskResult.from_probability("p", prob, size)
    full_img, _ = open_for_mask(photos[0], full_size=True)

    def old_postprocess():
        soft = stretch(prob, size)
        mask = soft > 0.5
        return regions(mask), float(mask.mean()), float(soft[mask].mean()) if mask.any() else 0

    def fresh():  # the photo-size mask is built when the PNG is written, once per result
        return MaskResult.from_probability("p", prob, size)

    box = {}

    def write_setup():
        box["r"] = fresh()

    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        rows = [
            (
                f"decode {size[0]}x{size[1]} JPEG (draft to {img.width}x{img.height})",
                med_ms(lambda: open_for_mask(photos[0]), reps),
            ),
            ("vision graph (352x352 -> t3/t6/t9)", med_ms(lambda: model.image_features(img), reps)),
            ("decoder graph + sigmoid", med_ms(lambda: model.decode(feats, cond), reps)),
            (
                f"postprocess: regions, boxes, area, score at {size[0]}x{size[1]}",
                med_ms(fresh, reps),
            ),
            (
                f"write mask PNG {size[0]}x{size[1]} (1 bit) + overlay JPEG {base.width}x{base.height}",
                med_ms(
                    lambda: (
                        box["r"].save_mask(t / "m.png"),
                        box["r"].save_overlay(t / "o.jpg", base),
                    ),
                    reps,
                    write_setup,
                ),
            ),
            (
                "text graph + lookup + projection (once per prompt; tokenizer included)",
                med_ms(lambda: model.compute_cond("a red ball"), reps),
            ),  # fmt: skip
            (
                "(before) postprocess on the stretched map: stretch, threshold, label pixels",
                med_ms(old_postprocess, reps),
            ),
            (
                f"(--full-size-overlays) decode in full + overlay JPEG {size[0]}x{size[1]}",
                med_ms(
                    lambda: res.save_overlay(
                        t / "f.jpg", open_for_mask(photos[0], full_size=True)[0]
                    ),
                    reps,
                ),
            ),
        ]
    del full_img
    lines = [
        f"Per hit ({size[0]}x{size[1]} JPEG; interpreter threads: {cores}, one call at a time):",
        "",
        "| step | wall ms | CPU ms |",
        "|---|---:|---:|",
    ]
    lines += [f"| {name} | {w:.1f} | {c:.1f} |" for name, (w, c) in rows]
    return lines + [""]


def bench_hits(models_root: Path, photos: list[Path], ks: list[int], reps: int) -> list[str]:
    from wherein.indexer.models.clipseg import load_cached
    from wherein.search.cache.vision_store import VISION_DIR, VisionStore
    from wherein.search.localize import masking
    from wherein.search.localize.masking import add_masks_to_hits, plan_parallelism

    lines = [
        "k hits (`add_masks_to_hits`, what `search --mask` adds: decode, vision, decoder, "
        "postprocess, files; model loaded, cond cached, vision cache empty), then a second prompt "
        "on the same hits (vision passes cached in memory), then a third as a new process has it "
        "(memory empty, vision passes read from INDEX/cache/vision):",
        "",
        "| k | workers x threads | wall s | per hit wall ms | CPU s | 2nd prompt wall s | "
        "2nd prompt per hit: wall ms | CPU ms | from disk: per hit wall ms | CPU ms |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for k in ks:
        hits = _hits(photos, k)
        workers, threads = plan_parallelism(k)
        model = load_cached(models_root, threads)
        second = [f"a blue ball {i}" for i in range(reps)]
        third = [f"a green ball {i}" for i in range(reps)]
        for p in ["a red ball", *second, *third]:
            model.encode_prompt(p)  # steady state: the text graph ran once per prompt
        add_masks_to_hits(hits[:1], "a red ball", Path(tempfile.mkdtemp()), models_root)  # warm
        firsts, cpus, seconds, cpus2, thirds, cpus3 = [], [], [], [], [], []
        for i in range(reps):
            masking._CACHES.pop(model, None)  # a fresh process's cache: every vision pass runs
            with tempfile.TemporaryDirectory() as tmp:
                store = VisionStore(Path(tmp) / "cache" / VISION_DIR)
                wall, cpu, out = _timed(
                    lambda h=hits, t=tmp, s=store: add_masks_to_hits(
                        h, "a red ball", Path(t), models_root, store=s
                    )
                )
                assert len(out) == k and all(h.mask_path for h in out)
                firsts.append(wall)
                cpus.append(cpu)
                wall2, cpu2, out2 = _timed(
                    lambda: add_masks_to_hits(hits, second[i], Path(tmp) / "2", models_root)  # noqa: B023
                )
                assert len(out2) == k
                seconds.append(wall2)
                cpus2.append(cpu2)
                masking._CACHES.pop(model, None)  # a new process: only the disk has the passes
                disk = VisionStore(store.root)
                wall3, cpu3, out3 = _timed(
                    lambda h=hits, p=third[i], t=tmp, s=disk: add_masks_to_hits(
                        h, p, Path(t) / "3", models_root, store=s
                    )
                )
                assert len(out3) == k and disk.loaded >= k  # crops may be kept too
                thirds.append(wall3)
                cpus3.append(cpu3)
        w, c, w2, c2, w3, c3 = (
            statistics.median(x) for x in (firsts, cpus, seconds, cpus2, thirds, cpus3)
        )
        lines.append(
            f"| {k} | {workers} x {threads} | {w:.2f} | {1000 * w / k:.0f} | {c:.2f} | "
            f"{w2:.3f} | {1000 * w2 / k:.0f} | {1000 * c2 / k:.0f} | "
            f"{1000 * w3 / k:.0f} | {1000 * c3 / k:.0f} |"
        )
    return lines + [""]


FORCED_THING = 200  # px: the side of the small thing a forced refinement crops around


def bench_refinement(models_root: Path, photos: list[Path], k: int, reps: int) -> list[str]:
    """What the coarse-to-fine refinement adds to k masks (`add_masks_to_hits`, as `search
    --mask` runs them, with INDEX/cache/vision; memory cache empty): the whole pass only,
    then the refinement as the map triggers it, then forced to one crop per hit (a small
    thing of FORCED_THING px at the photo's centre: the cost of each hit holding one), then
    another prompt on those hits in a new process (whole and crop passes on disk). The
    vision passes are counted; passes added per hit and the wall and CPU ms per added pass
    are against the whole pass only."""
    from wherein.indexer.models.modeldir import ModelDir
    from wherein.indexer.models.registry import load_segmenter
    from wherein.search.cache.vision_store import VISION_DIR, VisionStore
    from wherein.search.localize import masking, refine
    from wherein.search.localize.masking import add_masks_to_hits, plan_parallelism

    hits = _hits(photos, k)
    workers, threads = plan_parallelism(k)
    model = load_segmenter(ModelDir(models_root), threads, cached=True)  # add_masks_to_hits'
    passes = [0]
    run_pass = model.image_features

    def counted(image):
        passes[0] += 1
        return run_pass(image)

    model.image_features = counted  # this bench's model only: every pass, whole or crop
    loader, small = masking.image_loader, refine.small_boxes

    def forced(prob, size, limit=refine.MAX_CROPS):
        w, h, half = size[0], size[1], FORCED_THING // 2
        return [(w // 2 - half, h // 2 - half, w // 2 + half, h // 2 + half)]

    cases = [
        ("whole pass only (no refinement: the mask before issue 27)", False, small, False),
        ("coarse to fine, as each hit's map triggers it", True, small, False),
        (f"coarse to fine, forced to one crop per hit (a {FORCED_THING}-px thing)", True,
         forced, False),
        ("the same hits, another prompt in a new process (whole and crop passes on disk)", True,
         forced, True),
    ]  # fmt: skip
    add_masks_to_hits(hits[:1], "a red ball", Path(tempfile.mkdtemp()), models_root)  # warm
    for p in ("a red ball", *(f"a blue ball {i}" for i in range(reps))):
        model.encode_prompt(p)  # steady state: the text graph ran once per prompt
    rows, base = [], None
    for name, refined, boxes, again in cases:
        # The whole pass alone: no image to crop from, so mask_of refines nothing.
        masking.image_loader = loader if refined else (lambda *_a, **_k: None)  # type: ignore[assignment]
        refine.small_boxes = boxes  # type: ignore[assignment]
        walls, cpus, counts = [], [], []
        for i in range(reps):
            with tempfile.TemporaryDirectory() as tmp:
                store = Path(tmp) / "cache" / VISION_DIR
                prompt = "a red ball"
                if again:  # the first prompt, untimed, fills the store
                    masking._CACHES.pop(model, None)
                    add_masks_to_hits(hits, prompt, Path(tmp) / "1", models_root,
                                      store=VisionStore(store))  # fmt: skip
                    prompt = f"a blue ball {i}"
                masking._CACHES.pop(model, None)  # a fresh process's cache
                passes[0] = 0
                wall, cpu, out = _timed(
                    lambda t=tmp, p=prompt, s=store: add_masks_to_hits(
                        hits, p, Path(t) / "2", models_root, store=VisionStore(s)
                    )
                )
            assert len(out) == k and all(h.mask_path for h in out)
            walls.append(wall)
            cpus.append(cpu)
            counts.append(passes[0])
        w, c, n = (statistics.median(x) for x in (walls, cpus, counts))
        if base is None:
            base = (w, c, n)
        added = n - base[2]
        per = (
            f"{added / k:+.1f} | {1000 * (w - base[0]) / added:.0f} | "
            f"{1000 * (c - base[1]) / added:.0f}"
            if added > 0 and not again
            else "– | – | –"
        )
        rows.append(f"| {name} | {w:.2f} | {c:.2f} | {n:.0f} | {per} |")
    masking.image_loader, refine.small_boxes = loader, small
    del model.image_features
    return [
        f"{k} masks on {k} 12-MP hits (`add_masks_to_hits` as `search --mask` runs them: "
        f"{workers} workers x {threads} interpreter threads, vision passes kept in "
        "INDEX/cache/vision, memory cache empty), median of "
        f"{reps}; the refinement's cost against the whole pass only:",
        "",
        "| masks | wall s | CPU s | vision passes | passes added per hit | wall ms per added "
        "pass | CPU ms per added pass |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *rows,
        "",
    ]


def combined_models(work: Path, standin: Path, clipseg_root: Path, name: str) -> Path:
    """A models folder: the stand-in SigLIP towers (to index and search) + the given CLIPSeg."""
    root = work / f"models-{name}"
    root.mkdir(parents=True, exist_ok=True)
    for sub in standin.iterdir():
        link = root / sub.name
        if not link.exists() and sub.name != "clipseg":
            link.symlink_to(sub)
    if not (root / "clipseg").exists():
        (root / "clipseg").symlink_to(clipseg_root / "clipseg")
    return root


def bench_cli_index(work: Path, models: Path, photos: list[Path]) -> dict[str, str]:
    """The index of the 12-MP photos that the CLI and web rows search (made once); its env."""
    index = work / f"index-{models.name}"
    env = {**os.environ, "WHEREIN_INDEX": str(index), "WHEREIN_MODELS": str(models)}
    if not (index / "catalog.db").exists():
        wherein = str(Path(sys.executable).with_name("wherein"))  # the venv's console script
        subprocess.run([wherein, "index", str(photos[0].parent), "-q"], env=env, check=True)
    return env


def bench_cli(work: Path, models: Path, photos: list[Path], k: int, reps: int) -> list[str]:
    """`wherein search red -k K --mask` in a fresh process, on an index of the 12-MP photos."""
    wherein = [str(Path(sys.executable).with_name("wherein"))]  # the venv's console script
    env = bench_cli_index(work, models, photos)

    def run(args: list[str]) -> tuple[float, str]:
        """Wall seconds and, on failure, the last line of stderr (the bench goes on)."""
        t = time.perf_counter()
        r = subprocess.run([*wherein, *args], env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t
        if r.returncode != 0:
            return wall, (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
        if "--mask" in args:
            hits = json.loads(r.stdout[r.stdout.index("[") :])
            assert len(hits) == k and all(h["mask_path"] for h in hits), r.stdout[-500:]
        return wall, ""

    stored = Path(env["WHEREIN_INDEX"]) / "cache" / "vision"
    masked, again, plain, one, one_again, failed = [], [], [], [], [], []
    photo = str(photos[0])
    for i in range(reps):  # interleaved, so all see the same load
        out = work / f"cli-masks-{i}"
        shutil.rmtree(stored, ignore_errors=True)  # the first masked run computes every pass
        for args, walls in (
            (["search", "red", "-k", str(k), "--mask", "--out", str(out), "--json"], masked),
            (["search", "red", "-k", str(k), "--mask", "--mask-prompt", f"a blue ball {i}",
              "--out", str(out / "2"), "--json"], again),
            (["search", "red", "-k", str(k), "--json"], plain),
        ):  # fmt: skip
            wall, err = run(args)
            (failed.append(f"{' '.join(args[:5])}: {err}") if err else walls.append(wall))
        shutil.rmtree(stored, ignore_errors=True)
        for args, walls in (
            (["mask", photo, "a red ball", "--out", str(out / "m"), "--json"], one),
            (["mask", photo, f"a green ball {i}", "--out", str(out / "m"), "--json"], one_again),
        ):
            wall, err = run(args)
            (failed.append(f"{' '.join(args[:3])}: {err}") if err else walls.append(wall))
    med = {n: f"{statistics.median(w):.2f} s" if w else "failed" for n, w in
           (("masked", masked), ("again", again), ("plain", plain), ("one", one),
            ("one_again", one_again))}  # fmt: skip
    return [
        f"`wherein search red -k {k} --mask` as a fresh process (imports, CLIPSeg load, search, "
        f"{k} masks): median {med['masked']} wall over {len(masked)}; then another "
        f"`--mask-prompt` on the same hits, a new process reading the {k} vision passes from "
        f"INDEX/cache/vision: {med['again']} (the same search without --mask: {med['plain']}; "
        "these searches use the stand-in SigLIP text tower, which imports torch).",
        "",
        f"`wherein mask PHOTO PROMPT` (one 12-MP photo, files written) as a fresh process: "
        f"{med['one']} with its vision pass computed, {med['one_again']} for another prompt "
        "with the pass read from INDEX/cache/vision (no SigLIP, no torch).",
        *(f"Failed run: {f}" for f in failed),
        "",
    ]


def bench_web(work: Path, models: Path, photos: list[Path], reps: int) -> list[str]:
    """`wherein serve`: opening a hit's mask = GET /api/mask/{id} then GET its overlay."""
    from fastapi.testclient import TestClient

    from wherein.search.web.app import create_app

    index = work / f"index-{models.name}"
    for kind in ("masks", "vision"):  # masks and vision passes of an earlier run
        shutil.rmtree(index / "cache" / kind, ignore_errors=True)
    rows = []
    # On demand first: no background masks, so every open below pays its own vision pass.
    app = create_app(index, models, prefetch_masks=0)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        hits = client.get("/api/search", params={"q": "red", "per_page": 50}).json()["hits"]
        ids = [h["id"] for h in hits]

        def open_mask(image_id: int, prompt: str) -> tuple[float, float]:
            t, c = time.perf_counter(), time.process_time()  # the app runs in this process
            m = client.get(f"/api/mask/{image_id}", params={"prompt": prompt}).json()
            assert client.get(m["overlay_url"]).status_code == 200, m
            return time.perf_counter() - t, time.process_time() - c

        open_mask(ids[-1], "warm-up")  # model load, first interpreter
        first = [open_mask(ids[i % len(ids)], f"red {i}") for i in range(reps)]
        again = [open_mask(ids[i % len(ids)], f"blue {i}") for i in range(reps)]
        mask_png = []
        for i in range(reps):
            m = client.get(f"/api/mask/{ids[i % len(ids)]}", params={"prompt": f"red {i}"}).json()
            t, c = time.perf_counter(), time.process_time()
            assert client.get(m["mask_url"]).status_code == 200
            mask_png.append((time.perf_counter() - t, time.process_time() - c))
        status = client.get("/api/status").json()["masks"]
    restarted = restarted_open(index, models, ids, reps)
    shutil.rmtree(index / "cache" / "vision", ignore_errors=True)  # the guesses compute theirs
    ahead, made_in = prefetched_open(index, models, len(ids), reps)
    rows = [
        ("open a hit's mask, first prompt on the image (decode + vision + decoder + files)", first),
        ("another prompt on the same image (vision pass cached)", again),
        ("then the mask PNG link (made on its first request, from the kept result)", mask_png),
        ("a restarted server: another prompt on an image (vision pass read from disk)", restarted),
        (
            "open a hit's mask made in the background after the search "
            f"(--prefetch-masks {min(reps, len(ids))}: made {made_in:.1f} s after the search)",
            ahead,
        ),
    ]
    lines = [
        f"`wherein serve` through the API (TestClient, {reps} images; GET /api/mask/{{id}} + "
        f"GET overlay_url; vision passes {status['vision_passes']}, decoder runs "
        f"{status['decoder_runs']}):",
        "",
        "| request | median wall ms | max wall ms | median CPU ms |",
        "|---|---:|---:|---:|",
    ]
    for name, v in rows:
        walls, cpus = [x[0] for x in v], [x[1] for x in v]
        lines.append(
            f"| {name} | {1000 * statistics.median(walls):.0f} | {1000 * max(walls):.0f} | "
            f"{1000 * statistics.median(cpus):.0f} |"
        )
    return lines + [""]


def restarted_open(
    index: Path, models: Path, ids: list[int], reps: int
) -> list[tuple[float, float]]:
    """A new app on the same index: new prompts on the images opened before."""
    from fastapi.testclient import TestClient

    from wherein.search.web.app import create_app

    with TestClient(
        create_app(index, models, prefetch_masks=0), base_url="http://127.0.0.1"
    ) as client:
        client.get(f"/api/mask/{ids[-1]}", params={"prompt": "warm-up 2"})  # model load
        opens = []
        for i in range(reps):
            t, c = time.perf_counter(), time.process_time()
            m = client.get(f"/api/mask/{ids[i % len(ids)]}", params={"prompt": f"green {i}"}).json()
            assert client.get(m["overlay_url"]).status_code == 200, m
            opens.append((time.perf_counter() - t, time.process_time() - c))
        assert client.get("/api/status").json()["masks"]["vision_passes"] == 0
    return opens


def prefetched_open(
    index: Path, models: Path, n_hits: int, reps: int
) -> tuple[list[tuple[float, float]], float]:
    """Search, let the app make the first hits' masks in the background, then open them.

    Returns the opens (wall s, CPU s) and how long after the search the masks were ready:
    a person who looks at the results that long finds them ready.
    """
    from fastapi.testclient import TestClient

    from wherein.search.web.app import create_app

    n = min(reps, n_hits)
    with TestClient(
        create_app(index, models, prefetch_masks=n), base_url="http://127.0.0.1"
    ) as client:
        client.get("/api/mask/1", params={"prompt": "warm-up"})  # model load, as above
        t0 = time.perf_counter()
        params = {"q": "green", "per_page": 50}
        hits = client.get("/api/search", params=params).json()["hits"][:n]
        while client.get("/api/status").json()["masks"]["prefetched"] < n:
            time.sleep(0.02)
        made_in = time.perf_counter() - t0
        opens = []
        for h in hits:
            t, c = time.perf_counter(), time.process_time()
            m = client.get(f"/api/mask/{h['id']}", params={"prompt": "green"}).json()
            assert m["cached"], m
            assert client.get(m["overlay_url"]).status_code == 200, m
            opens.append((time.perf_counter() - t, time.process_time() - c))
    return opens, made_in


def random_full_clipseg():
    """A full-size CLIPSeg rd64-refined with random weights (seed 0): transformers' default
    config with patch 16 and the complex transposed convolution, eager attention."""
    import torch
    from transformers import CLIPSegConfig, CLIPSegForImageSegmentation

    config = CLIPSegConfig(
        vision_config={"patch_size": 16}, use_complex_transposed_convolution=True
    )
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    return CLIPSegForImageSegmentation(config).eval()


def as_module(fn, model):
    """fn (a piece of model's forward) as a torch module for litert_torch.convert, holding
    model so that its weights are the module's parameters."""
    import torch

    class Piece(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fn = fn
            self.model = model

        def forward(self, *xs):
            return self.fn(*xs)

    return Piece()


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

    sys.path.insert(0, str(ROOT / "tests"))
    from test_clipseg_parity import split, write_assets

    from wherein.schemas.models import CLIPSEG

    model = random_full_clipseg()
    write_assets(model, d)
    ex = {
        "vision": (torch.zeros(1, 3, 352, 352),),
        "text": (torch.zeros(1, 77, 512),),
        "decoder": tuple(torch.zeros(1, 485, 768) for _ in range(3)) + (torch.zeros(1, 512),),
    }

    for name, piece, spec in zip(
        ("vision", "text", "decoder"), split(model), CLIPSEG.graphs, strict=True
    ):
        t = time.perf_counter()
        litert_torch.convert(as_module(piece.fn, model).eval(), ex[name]).export(
            str(d / spec.filename)
        )
        print(f"converted {spec.filename} in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    return target


INT8_VISION = "clipseg_vision_int8.tflite"


def build_int8(work: Path, full: Path) -> Path | None:
    """The full-size bundle with its vision graph made int8 (models optimize's recipe), chosen by
    clipseg/manifest.json; None when the quantizer is not installed."""
    from wherein.indexer.models.modeldir import ModelDir
    from wherein.indexer.models.optimize.build import (
        CLIPSEG_MANIFEST,
        make_int8,
        optimize_clipseg_text,
        quantizer_available,
    )

    if not quantizer_available():
        return None
    target = work / "models-int8-clipseg"
    d = target / "clipseg"
    d.mkdir(parents=True, exist_ok=True)
    for f in (full / "clipseg").iterdir():
        if not (d / f.name).exists():
            (d / f.name).symlink_to(f)
    if not (d / INT8_VISION).is_file():
        done = make_int8(d / "clipseg_vision_fp16.tflite", d / INT8_VISION, print)
        print(f"int8 vision graph: {done}", file=sys.stderr)
    manifest = {"vision": {"file": INT8_VISION, "passed": True, "note": "bench: unverified"}}
    (d / CLIPSEG_MANIFEST).write_text(json.dumps(manifest))
    # The text step of `models optimize` as a user runs it (gated: cond bit-identical here).
    outcome = optimize_clipseg_text(ModelDir(target), log=lambda s: print(s, file=sys.stderr))
    print(f"short text graph: {outcome.status}: {outcome.message}", file=sys.stderr)
    return target


NOTES = [
    "Notes:",
    "- CPU ms is process CPU time (all threads); wall ms is what a user waits on this shared machine.",
    "- Per hit, the model work is one vision pass + one decoder run; the text graph runs once per",
    "  prompt (cond is cached), so k hits cost k x (decode + vision + decoder + postprocess + files) + 1 text.",
    "- Postprocess never builds the photo-size map: per photo row, threshold crossings come from the",
    "  352 map's columns and probability sums from prefix sums (cost ~ rows x 352 + mask outline).",
    "  The mask PNG (photo size, 1 bit) is the only photo-size array; the overlay is a preview",
    "  (long side <= 1024) drawn on the JPEG decoded at reduced scale.",
    "- Random weights give a noise-like probability map (many small regions): a worse case for",
    "  region labelling than a trained model's smooth masks.",
    "- The int8 row uses the same random weights, quantized without `models optimize`'s",
    "  verification (random weights have no meaning to verify); its speed is what counts here.",
    "  Its text graph is the 16-position one `models optimize` cuts and gates (prompts here fit).",
    "",
]


def section(label: str, models_root: Path, standin: Path, args, photos) -> list[str]:
    lines = [f"### {label}", ""]
    combo = combined_models(args.work, standin, models_root, models_root.name)
    if args.only == "refine":
        return lines + bench_refinement(models_root, photos, args.k, args.reps)
    if args.only == "cost":  # the per-hit split and what the refinement adds to k masks
        lines += bench_steps(models_root, photos, args.reps)
        return lines + bench_refinement(models_root, photos, args.k, args.reps)
    if args.only != "web":
        lines += bench_steps(models_root, photos, args.reps)
        lines += bench_hits(models_root, photos, [1, args.k], args.reps)
        lines += bench_refinement(models_root, photos, args.k, args.reps)
        lines += bench_cli(args.work, combo, photos, args.k, args.reps)
    else:
        bench_cli_index(args.work, combo, photos)
    lines += bench_web(args.work, combo, photos, args.reps)
    return lines


def cpu_name() -> str:
    """The CPU's model name, and whether it has int8 dot-product instructions (where the
    int8 vision graph pays)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.machine()
    name = next(
        (ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")),
        platform.machine(),
    )
    isa = [f for f in ("avx512_vnni", "avx_vnni") if f in info.split()]
    return f"{name} ({', '.join(isa)})" if isa else f"{name} (no VNNI)"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--full",
        action="store_true",
        help="Also convert and time a full-size random-weight CLIPSeg (fp32, then int8 vision).",
    )
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "wherein-bench-mask")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument(
        "--only",
        choices=["web", "refine", "cost"],
        default=None,
        help="Only the `wherein serve` rows, only the refinement's (with and without it), or "
        "the per-hit split and the refinement's rows.",
    )
    ap.add_argument(
        "--models",
        default="standin,fp32,int8",
        help="Which sections: a comma list of standin, fp32, int8 (fp32 and int8 need --full).",
    )
    args = ap.parse_args()

    from wherein.indexer.models.standins import build_standin_models

    args.work.mkdir(parents=True, exist_ok=True)
    photos = make_photos(args.work / "photos", args.k)
    standin = build_standin_models(args.work / "standin-models")
    load = os.getloadavg()[0]
    cpu0 = time.process_time()
    lines = [
        "# CLIPSeg mask cost",
        "",
        f"Command: `python bench/bench_mask.py{' --full' if args.full else ''} --reps {args.reps} "
        f"--k {args.k}{f' --only {args.only}' if args.only else ''}"
        f"{f' --models {args.models}' if args.models != 'standin,fp32,int8' else ''}`",
        f"Machine: {cpu_name()}, {os.cpu_count()} cores (shared), Python "
        f"{platform.python_version()}.",
        f"Photos: {args.k} synthetic {PHOTO_SIZE[0]}x{PHOTO_SIZE[1]} JPEGs.",
        f"Load average at start: {load:.1f} (other jobs share the cores: CPU ms is the steadier "
        "figure; wall ms is what a user waits under that load).",
        "",
    ]
    wanted = set(args.models.split(","))
    if "standin" in wanted:
        lines += section("Stand-in graphs (host pipeline cost)", standin, standin, args, photos)
    if args.full:
        full = build_full(args.work)
        if "fp32" in wanted:
            lines += section(
                "Full-size CLIPSeg rd64-refined, random weights, fp32 LiteRT (litert-torch)",
                full, standin, args, photos,
            )  # fmt: skip
        int8 = build_int8(args.work, full) if "int8" in wanted else None
        if int8 is not None:
            lines += section(
                "Same after `models optimize`: int8 vision graph, 16-position text graph",
                int8, standin, args, photos,
            )  # fmt: skip
    lines.append(
        f"Load average at the end: {os.getloadavg()[0]:.1f}; this process's CPU time over the "
        f"run: {time.process_time() - cpu0:.0f} s."
    )
    lines.append("")
    lines += NOTES
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)


if __name__ == "__main__":
    main()
