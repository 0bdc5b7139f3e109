"""Figures that decide whether a candidate graph may replace its full-precision source.

Image tower: every signature of the candidate against the source's batch-1
signature on the same inputs (Pearson correlation, top-10 neighbour agreement,
max |diff|), plus ms per image on each graph's largest batch. CLIPSeg vision:
masks (p > 0.5) from the candidate against masks from the source for several
prompts per image, through the same text graph and decoder. CLIPSeg text at L
positions: cond from the short graph against cond from the 77-position graph for
prompts of 1 to L - 2 content tokens, each on its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from PIL import Image

from wherein.indexer.imaging import siglip_input
from wherein.indexer.models.convert.build import MIN_CORR, MIN_TOP10, litert_embed, parity
from wherein.indexer.models.litert_graph import LiteRTGraph
from wherein.schemas.models import CLIPSEG_EOT, CLIPSEG_MASK_THRESHOLD

MIN_MASK_IOU = 0.95
MIN_COND_CORR = 0.9999  # the short text graph is exact: anything below is a wrong rewrite
# ... and so is its scale (the decoder is not scale-free): max |diff| / max |cond|.
MAX_COND_REL_DIFF = 1e-3
# Prompts of several lengths, beside the sample's common subjects and the probes' captions.
FIXED_PROMPTS = (
    "car",
    "red car",
    "a person on the left",
    "the tall building behind the trees",
    "a small brown dog sitting on a wooden bench in the park",
)
# Single-token words: a prompt of n of them has n content tokens.
_FILLER = "a photo of the red car next to a green tree on the left side of the old house"
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


def side_by_side(
    source_fn: Callable[[Any], Any], candidate_fn: Callable[[Any], Any], items: Sequence[Any]
) -> tuple[list[tuple[Any, Any, Any]], float, float]:
    """[(item, source_fn(item), candidate_fn(item))] and the seconds each side took in all.

    One untimed run of each on the first item first: that run packs the weights.
    """
    if items:
        source_fn(items[0])
        candidate_fn(items[0])
    out, src_s, cand_s = [], 0.0, 0.0
    for item in items:
        t = time.perf_counter()
        a = source_fn(item)
        src_s += time.perf_counter() - t
        t = time.perf_counter()
        b = candidate_fn(item)
        cand_s += time.perf_counter() - t
        out.append((item, a, b))
    return out, src_s, cand_s


def image_tower_figures(
    source: LiteRTGraph, candidate: LiteRTGraph, images: Sequence[Image.Image], timing: int = 16
) -> dict:
    """{"signatures": {sig: parity}, "failed": [...], "ms_per_image": {...}, "n": n}."""
    size = source.signatures["serving_default"].input_shapes[0][-1]  # the family's input
    x = np.stack([siglip_input(im, size) for im in images]).astype(np.float32)
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
    runs, src_s, cand_s = side_by_side(
        source_model.image_features, candidate_model.image_features, images[: len(prompts)]
    )
    for (_, fa, fb), ps in zip(runs, prompts, strict=False):
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


def content_tokens(model, prompt: str) -> int:
    ids = model.tokenize(prompt)
    return int(np.argmax(ids == CLIPSEG_EOT)) - 1


def text_gate_prompts(model, length: int) -> list[str]:
    """Prompts that fit `length` positions (1 to length - 2 content tokens), every length
    in that range at least once: common subjects, probe captions, fixed and filler ones."""
    from wherein.indexer.models.optimize.inputs import COMMON_PROMPTS
    from wherein.indexer.models.optimize.probes import SELF_TEST

    words = _FILLER.split()
    fill = [" ".join(words[i % len(words)] for i in range(n)) for n in range(1, length - 1)]
    wrong = [c for p in SELF_TEST[:2] for c in p.wrong_captions()]
    candidates = [*FIXED_PROMPTS, *COMMON_PROMPTS, *(p.caption for p in SELF_TEST), *wrong, *fill]
    seen: dict[str, None] = {}
    for p in candidates:
        if 1 <= content_tokens(model, p) <= length - 2:
            seen.setdefault(p, None)
    return list(seen)


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    if a.std() == 0 or b.std() == 0:  # a constant vector: correlation is undefined
        return 1.0 if np.array_equal(a, b) else 0.0
    return float(np.corrcoef(a, b)[0, 1])


def text_short_figures(source_model, candidate_model, prompts: Sequence[str]) -> dict:
    """cond through the candidate's short text graph vs the source's 77-position graph.

    source_model / candidate_model: ClipSeg instances that differ only in short_text.
    A prompt the candidate would not route to its short graph is not compared (it
    would compare the 77 graph with itself).
    """
    short = candidate_model.short_text
    length = short.length if short is not None else 0
    per = []
    fitting = [
        p
        for p in prompts
        if candidate_model.text_graph_for(candidate_model.tokenize(p))[0] is short
    ]
    runs, src_s, cand_s = side_by_side(
        source_model.compute_cond, candidate_model.compute_cond, fitting
    )
    for p, a, b in runs:
        diff = float(np.abs(a - b).max())
        rel = diff / max(float(np.abs(a).max()), float(np.abs(b).max())) if diff else 0.0
        per.append((p, content_tokens(candidate_model, p), _pearson(a, b), diff, rel))
    failed = [
        f"CLIPSeg text at {length} tokens: cond correlation {r:.6f} < {MIN_COND_CORR} for {p!r}"
        if not r >= MIN_COND_CORR
        else f"CLIPSeg text at {length} tokens: cond differs by {rel:.1e} of its size "
        f"(> {MAX_COND_REL_DIFF}) for {p!r}"
        for p, _, r, _, rel in per
        if not (r >= MIN_COND_CORR and rel <= MAX_COND_REL_DIFF)
    ][:3]
    if not per:
        failed = [f"CLIPSeg text at {length} tokens: no prompt fits the short graph"]
    n = max(1, len(per))
    worst = min(per, key=lambda x: x[2]) if per else None
    return {
        "cond_pearson_min": round(worst[2], 7) if worst else None,
        "max_abs_diff": max((x[3] for x in per), default=None),
        "max_rel_diff": max((x[4] for x in per), default=None),
        "worst_prompt": worst[0] if worst else None,
        "prompts": len(per),
        "content_tokens": [min(x[1] for x in per), max(x[1] for x in per)] if per else None,
        "failed": failed,
        "thresholds": {"cond_pearson": MIN_COND_CORR, "max_rel_diff": MAX_COND_REL_DIFF},
        "ms_per_prompt": {
            "source": round(src_s / n * 1000, 2),
            "candidate": round(cand_s / n * 1000, 2),
        },
        "n": len(per),
    }
