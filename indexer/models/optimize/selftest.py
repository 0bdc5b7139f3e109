"""Semantic self-test: do the loaded models, wired as wherein wires them, see what is drawn?

A few generated photos of known content (a coloured shape on a plain background,
at several sizes, formats and EXIF orientations) go through the same code paths
as `wherein index`, `wherein search` and the masks:

1. caption ranking: each photo's true caption ("a red square") must rank first
   among captions that differ only in colour;
2. calibration: the calibrated probability must be small for the wrong captions
   and not vanishingly small for the true ones;
3. masks: CLIPSeg's mask for the true caption must overlap the drawn shape.

The thresholds catch wiring errors, not model quality: a colour-only stand-in
passes, a real model passes with a wide margin. A failure names the step it
points to, found by re-running the failed part with one step swapped for an
independent version: preprocessing written here from the documented contract
(docs/models.md) rather than shared with imaging.py, the decoder with the
vision outputs in every order, the text encodings compared with each other.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from PIL import Image

from wherein.indexer.imaging import decode, prepare
from wherein.indexer.models.modeldir import ModelDir
from wherein.indexer.models.optimize.probes import SELF_TEST, Probe
from wherein.schemas.models import (
    CLIPSEG_IMAGE_SIZE,
    CLIPSEG_MASK_THRESHOLD,
    CLIPSEG_MEAN,
    CLIPSEG_STD,
    SIGLIP2,
    SIGLIP_IMAGE_SIZE,
    SIGLIP_MEAN,
    SIGLIP_PROMPT_TEMPLATE,
    SIGLIP_STD,
    EmbedderSpec,
)

# Wiring thresholds (see module docstring).
MIN_TRUE_PROBABILITY = 1e-3  # best true caption; a scale left in log space gives ~1e-7
MAX_WRONG_PROBABILITY = 0.5  # mean over wrong captions; a lost or flipped bias gives ~1
# Median over photos of logit_scale x (true - best wrong cosine): the scale must be the
# multiplier exp(t), not t itself (112.7 vs 4.72 for SigLIP 2 B/16).
MIN_LOGIT_GAP = 1.0
MIN_MASK_IOU = 0.4  # mask vs drawn shape
SAME_PIPELINE_COS = 0.95  # file path vs independent preprocessing of the drawn image
COLLAPSED_COS = 0.995  # two different captions encoded (almost) identically

PREPROCESSING = "preprocessing (decode, EXIF orientation, resize or normalisation)"
TOKENIZER = "tokenizer (different captions encode alike)"
CALIBRATION = "calibration (logit scale/bias)"
BINDING = "graph binding t3/t6/t9 (vision outputs reach the decoder in the wrong slots)"


@dataclass
class Check:
    name: str
    ok: bool
    figures: str
    points_to: str = ""
    data: dict = field(default_factory=dict)
    skipped: bool = False  # not judged: an earlier check failed first

    def to_json(self) -> dict:
        return {
            "check": self.name,
            "ok": self.ok,
            "skipped": self.skipped,
            "figures": self.figures,
            "points_to": self.points_to or None,
            **self.data,
        }


@dataclass
class SelfTest:
    checks: list[Check]
    rows: list[dict]  # one per probe

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def to_json(self) -> dict:
        return {
            "ok": self.ok,
            "checks": [c.to_json() for c in self.checks],
            "probes": self.rows,
        }


# -- independent preprocessing, from the contract ------------------------------
def reference_siglip(img: Image.Image, size: int = SIGLIP_IMAGE_SIZE) -> np.ndarray:
    """SigLIP 2's input at the family's size: squashed, bicubic, (x/255 - 0.5) / 0.5."""
    x = np.asarray(img.convert("RGB").resize((size,) * 2, Image.Resampling.BICUBIC), np.float64)
    x = (x / 255.0 - np.array(SIGLIP_MEAN)) / np.array(SIGLIP_STD)
    return x.transpose(2, 0, 1).astype(np.float32)


def reference_clipseg(img: Image.Image) -> np.ndarray:
    x = np.asarray(
        img.convert("RGB").resize((CLIPSEG_IMAGE_SIZE,) * 2, Image.Resampling.BILINEAR), np.float64
    )
    x = (x / 255.0 - np.array(CLIPSEG_MEAN)) / np.array(CLIPSEG_STD)
    return x.transpose(2, 0, 1).astype(np.float32)


def _truth_352(probe: Probe) -> np.ndarray:
    t = Image.fromarray(probe.truth().astype(np.uint8) * 255)
    return np.asarray(t.resize((CLIPSEG_IMAGE_SIZE,) * 2, Image.Resampling.NEAREST)) > 127


def _pipeline_pixels(data: bytes, spec: EmbedderSpec = SIGLIP2) -> np.ndarray:
    prepared = prepare(data, spec.image)
    if prepared.pixels is None:  # the probes are drawn images: they always decode
        raise ValueError(f"a self-test probe did not decode: {prepared.error}")
    return prepared.pixels


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    u = int((a | b).sum())
    return int((a & b).sum()) / u if u else 0.0


def _collapsed(vectors: np.ndarray) -> float:
    """Largest cosine between two different rows."""
    v = vectors / np.linalg.norm(vectors, axis=1, keepdims=True).clip(1e-12)
    s = v @ v.T
    np.fill_diagonal(s, -1)
    return float(s.max())


# -- loading ---------------------------------------------------------------------
def text_encoder(md: ModelDir):
    """The query encoder `wherein search` uses: the LiteRT text tower when converted, else open_clip."""
    from wherein.indexer.models.text_tower_litert import LiteRTTextTower, has_litert_text

    if has_litert_text(md.root):
        return LiteRTTextTower.from_models(md)
    from wherein.indexer.models.text_tower import TextTower

    return TextTower.from_models(md)


# -- the checks ----------------------------------------------------------------
def _ranking(probes, tower, encoder) -> tuple[list[Check], list[dict]]:
    files = [p.file_bytes() for p in probes]
    spec: EmbedderSpec = getattr(tower, "spec", SIGLIP2)
    template = spec.template or SIGLIP_PROMPT_TEMPLATE
    pipeline = tower.embed(np.stack([_pipeline_pixels(f, spec) for f in files]))
    size = spec.image.size
    reference = tower.embed(np.stack([reference_siglip(p.draw(), size) for p in probes]))
    rows, fails, ref_fails, drift, worst_margin, collapse = [], [], [], [], 1.0, 0.0
    p_true: list[float] = []
    p_wrong: list[float] = []
    gaps: list[float] = []
    for i, probe in enumerate(probes):
        captions = [probe.caption, *probe.wrong_captions()]
        t = encoder.encode([template.format(c) for c in captions])
        collapse = max(collapse, _collapsed(t))
        cos, cos_ref = t @ pipeline[i], t @ reference[i]
        rank = int((cos > cos[0]).sum()) + 1
        margin = float(cos[0] - cos[1:].max())
        worst_margin = min(worst_margin, margin)
        probs = encoder.probability(cos)
        if rank == 1:  # calibration is judged where the ranking is right
            gaps.append(encoder.logit_scale * margin)
            p_true.append(float(probs[0]))
            p_wrong.extend(float(v) for v in probs[1:])
        same = float(pipeline[i] @ reference[i])
        if rank != 1:
            fails.append(probe.name)
        if int((cos_ref > cos_ref[0]).sum()) != 0:
            ref_fails.append(probe.name)
        if same < SAME_PIPELINE_COS:
            drift.append(probe.name)
        rows.append(
            {
                "probe": probe.name,
                "rank": rank,
                "margin": round(margin, 4),
                "p_true": round(float(probs[0]), 4),
                "p_wrong_max": round(float(probs[1:].max()), 4),
                "cos_vs_reference_preprocessing": round(same, 4),
            }
        )
    n = len(probes)
    figures = f"{n - len(fails)}/{n} true captions first, worst margin {worst_margin:+.4f} cosine"
    points = ""
    if fails:
        if collapse > COLLAPSED_COS:
            points = TOKENIZER
        elif drift or len(ref_fails) < len(fails):
            points = PREPROCESSING
        else:
            points = "image and text towers disagree (not one model / embedding space?)"
        figures += f"; failed: {', '.join(fails)}"
    ranking = Check(
        "caption ranking",
        not fails,
        figures,
        points,
        {"max_caption_cosine": round(collapse, 4), "preprocessing_drift": drift},
    )
    if not gaps:
        calibration = Check(
            "calibration", False, "not judged: no true caption ranked first", skipped=True
        )
        return [ranking, calibration], rows
    best_true, mean_wrong = max(p_true), float(np.mean(p_wrong))
    gap = float(np.median(gaps))
    calib_ok = (
        best_true >= MIN_TRUE_PROBABILITY
        and mean_wrong <= MAX_WRONG_PROBABILITY
        and gap >= MIN_LOGIT_GAP
    )
    calibration = Check(
        "calibration",
        calib_ok,
        f"best true p {best_true:.4f} (>= {MIN_TRUE_PROBABILITY}), mean wrong p {mean_wrong:.4f} "
        f"(<= {MAX_WRONG_PROBABILITY}), median logit gap {gap:.2f} (>= {MIN_LOGIT_GAP}) "
        f"on {len(gaps)} photos ranked right; scale {encoder.logit_scale:.3f}, "
        f"bias {encoder.logit_bias:.3f}",
        "" if calib_ok else CALIBRATION,
    )
    return [ranking, calibration], rows


def _mask(model, feats, cond) -> np.ndarray:
    return model.decode(feats, cond) > CLIPSEG_MASK_THRESHOLD


def _masks(probes: Sequence[Probe], model) -> tuple[Check, list[float]]:
    from wherein.indexer.models.clipseg import Features

    ious, fails, points = [], [], ""
    conds = [model.encode_prompt(p.caption) for p in probes]
    for probe, cond in zip(probes, conds, strict=True):
        img, _ = decode(probe.file_bytes(), draft_size=CLIPSEG_IMAGE_SIZE)
        feats = model.image_features(img)
        truth = _truth_352(probe)
        iou = _iou(_mask(model, feats, cond), truth)
        ious.append(iou)
        if iou >= MIN_MASK_IOU:
            continue
        fails.append(probe.name)
        if points:
            continue
        # Which step? Each alternative swaps exactly one step for an independent one.
        orders = [o for o in itertools.permutations(range(3)) if o != (0, 1, 2)]
        slots = feats.in_slot_order()
        good = [
            o
            for o in orders
            if _iou(_mask(model, Features(*(slots[k] for k in o)), cond), truth) >= MIN_MASK_IOU
        ]
        ref_feats = Features(*model.vision.run(reference_clipseg(probe.draw())[None]))
        if good:
            order = "/".join(("t3", "t6", "t9")[k] for k in good[0])
            points = f"{BINDING}: the mask is right with the vision outputs read as {order}"
        elif _iou(_mask(model, ref_feats, cond), truth) >= MIN_MASK_IOU:
            points = PREPROCESSING
        elif _collapsed(np.stack(conds)) > COLLAPSED_COS:
            points = TOKENIZER
        else:
            points = "CLIPSeg graphs (vision, text and decoder do not work together?)"
    n = len(probes)
    figures = f"{n - len(fails)}/{n} masks overlap the drawn shape (IoU >= {MIN_MASK_IOU}), worst IoU {min(ious):.3f}"
    if fails:
        figures += f"; failed: {', '.join(fails)}"
    return Check("CLIPSeg masks", not fails, figures, points), ious


def run_self_test(
    md: ModelDir,
    probes: Sequence[Probe] = SELF_TEST,
    *,
    tower=None,
    encoder=None,
    clipseg=None,
    masks: bool = True,
) -> SelfTest:
    """Load what is not given the way the commands load it, then run the three checks."""
    if tower is None:
        from wherein.indexer.models.image_tower import ImageTower
        from wherein.indexer.models.registry import entry_for

        tower = ImageTower.from_models(md, spec=entry_for(md).spec)
    if encoder is None:
        encoder = text_encoder(md)
    checks, rows = _ranking(probes, tower, encoder)
    if masks:
        if clipseg is None:
            from wherein.indexer.models.registry import load_segmenter

            clipseg = load_segmenter(md)
        check, ious = _masks(probes, clipseg)
        checks.append(check)
        for row, iou in zip(rows, ious, strict=True):
            row["mask_iou"] = round(iou, 3)
    return SelfTest(checks, rows)
