"""Figures that decide whether a candidate graph may replace its full-precision source.

Image tower: every signature of the candidate against the source's batch-1
signature on the same inputs (Pearson correlation, top-10 neighbour agreement,
max |diff|), plus ms per image on each graph's largest batch. CLIPSeg vision:
masks (p > 0.5) from the candidate against masks from the source for several
prompts per image, through the same text graph and decoder.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
from PIL import Image

from wherein.indexer.imaging import siglip_input
from wherein.indexer.models.convert.build import MIN_CORR, MIN_TOP10, litert_embed, parity
from wherein.indexer.models.litert_graph import LiteRTGraph
from wherein.schemas.models import CLIPSEG_MASK_THRESHOLD

MIN_MASK_IOU = 0.95
MIN_TEXT_CORR = MIN_CORR["fp32"]  # a converted text tower against open_clip


def ms_per_image(graph: LiteRTGraph, x: np.ndarray, signature: str) -> float:
    """Best of two passes over x on one signature (warm: the first run packs weights)."""
    b = graph.signatures[signature].batch
    litert_embed(graph, signature, x[:b])
    best = float("inf")
    for _ in range(2):
        t = time.perf_counter()
        litert_embed(graph, signature, x)
        best = min(best, time.perf_counter() - t)
    return best / len(x) * 1000


def largest_signature(graph: LiteRTGraph) -> str:
    return max(graph.signatures.values(), key=lambda s: s.batch).key


def image_tower_figures(
    source: LiteRTGraph, candidate: LiteRTGraph, images: Sequence[Image.Image], timing: int = 16
) -> dict:
    """{"signatures": {sig: parity}, "failed": [...], "ms_per_image": {...}, "n": n}."""
    x = np.stack([siglip_input(im) for im in images]).astype(np.float32)
    ref = litert_embed(source, "serving_default", x)
    figures, failed = {}, []
    for key in candidate.signatures:
        p = parity(ref, litert_embed(candidate, key, x))
        figures[key] = p.to_json()
        failed += [f"image tower {key}: {f}" for f in p.failures("int8")]
    t = x[: max(timing, 1)]
    src_sig, cand_sig = largest_signature(source), largest_signature(candidate)
    return {
        "signatures": figures,
        "failed": failed,
        "thresholds": {"pearson": MIN_CORR["int8"], "top10_agreement": MIN_TOP10["int8"]},
        "ms_per_image": {
            "source": round(ms_per_image(source, t, src_sig), 1),
            "candidate": round(ms_per_image(candidate, t, cand_sig), 1),
            "signatures": [src_sig, cand_sig],
            "threads": candidate.num_threads,
        },
        "n": len(x),
    }


def _masks(model, feats, prompts: Sequence[str]) -> list[np.ndarray]:
    return [model.decode(feats, model.encode_prompt(p)) > CLIPSEG_MASK_THRESHOLD for p in prompts]


def clipseg_figures(
    source_model, candidate_model, images: Sequence[Image.Image], prompts: Sequence[Sequence[str]]
) -> dict:
    """Pooled mask IoU (sum of intersections / sum of unions over every image x prompt),
    the worst single pair among masks that cover at least 1% of the image, and the
    feature correlation (t3, t6, t9)."""
    inter = union = 0
    worst, pairs, corr = 1.0, 0, []
    src_s = cand_s = 0.0
    if images:  # warm-up: the first run packs the weights
        source_model.image_features(images[0])
        candidate_model.image_features(images[0])
    for img, ps in zip(images, prompts, strict=False):
        t = time.perf_counter()
        fa = source_model.image_features(img)
        src_s += time.perf_counter() - t
        t = time.perf_counter()
        fb = candidate_model.image_features(img)
        cand_s += time.perf_counter() - t
        for a, b in zip(fa.in_slot_order(), fb.in_slot_order(), strict=True):
            corr.append(float(np.corrcoef(a.ravel(), b.ravel())[0, 1]))
        for ma, mb in zip(
            _masks(source_model, fa, ps), _masks(candidate_model, fb, ps), strict=True
        ):
            i, u = int((ma & mb).sum()), int((ma | mb).sum())
            inter, union, pairs = inter + i, union + u, pairs + 1
            if u >= 0.01 * ma.size:
                worst = min(worst, i / u)
    n = max(1, len(prompts))
    iou = inter / union if union else 1.0
    failed = [] if iou >= MIN_MASK_IOU else [f"CLIPSeg vision: mask IoU {iou:.3f} < {MIN_MASK_IOU}"]
    return {
        "mask_iou": round(iou, 4),
        "worst_pair_iou": round(worst, 4),
        "feature_pearson_min": round(min(corr), 6) if corr else None,
        "pairs": pairs,
        "mask_pixels": union,
        "failed": failed,
        "thresholds": {"mask_iou": MIN_MASK_IOU},
        "ms_per_image": {
            "source": round(src_s / n * 1000, 1),
            "candidate": round(cand_s / n * 1000, 1),
        },
        "n": len(prompts),
    }
