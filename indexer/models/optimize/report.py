"""`models check` rows for optimized graphs: the verification figures each manifest holds.

A candidate that failed verification is not used; its row says so with status
"not used" (the models in use are fine, so `models check` still passes).
"""

from __future__ import annotations

import json
from pathlib import Path

from wherein.indexer.models.convert.build import MIN_CORR, MIN_TOP10
from wherein.indexer.models.modeldir import CLIPSEG_MANIFEST, IMAGE_MANIFEST, ModelDir
from wherein.indexer.models.optimize.compare import (
    MAX_COND_REL_DIFF,
    MIN_COND_CORR,
    MIN_MASK_IOU,
    MIN_TEXT_CORR,
)
from wherein.schemas.errors import WhereinError
from wherein.schemas.models import CLIPSEG

NOT_USED = "not used"


def _manifest(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        return None  # the loaders report an unreadable manifest in their own rows


def _image_found(record: dict) -> str:
    f = record.get("figures", {})
    sigs = f.get("signatures", {})
    corr = min((s["pearson"] for s in sigs.values()), default=float("nan"))
    top = min((s["top10_agreement"] for s in sigs.values()), default=float("nan"))
    ms = f.get("ms_per_image", {})
    speed = f", {ms['source']:.0f} -> {ms['candidate']:.0f} ms/image" if ms else ""
    return f"corr {corr:.6f}, top-10 {top:.3f}{speed} ({record.get('verified_on', '?')})"


def optimized_rows(md: ModelDir) -> list[dict]:
    rows = []
    image = _manifest(md.image_dir / IMAGE_MANIFEST)
    if image and image.get("optimize"):
        rec = image["optimize"]
        used = rec.get("passed") and image.get("file") == rec.get("candidate")
        found = _image_found(rec)
        if not rec.get("passed"):
            found = f"failed: {'; '.join(rec.get('figures', {}).get('failed', []))}; {found}"
        rows.append(
            {
                "model": md.image_dir.name,
                "file": rec.get("candidate", "?"),
                "expected": f"int8 vs {rec.get('from')}: corr >= {MIN_CORR['int8']}, top-10 >= {MIN_TOP10['int8']}",
                "found": found,
                "status": "ok" if used else NOT_USED,
            }
        )
    clip = _manifest(md.clipseg_dir / CLIPSEG_MANIFEST)
    if clip and clip.get("vision"):
        rec = clip["vision"]
        f = rec.get("figures", {})
        ms = f.get("ms_per_image", {})
        found = (
            f"mask IoU {f.get('mask_iou', float('nan')):.3f} over {f.get('pairs', 0)} image x prompt "
            f"pairs, {ms.get('source', 0):.0f} -> {ms.get('candidate', 0):.0f} ms/image"
        )
        status = "ok"
        if not rec.get("passed"):
            found, status = f"failed: {'; '.join(f.get('failed', []))}", NOT_USED
        else:
            try:
                from wherein.indexer.models.litert_graph import LiteRTGraph

                LiteRTGraph(md.clipseg_vision_file(), 1).check(CLIPSEG.graphs[0])
            except WhereinError as exc:
                found, status = str(exc), "FAIL"
        rows.append(
            {
                "model": CLIPSEG.key,
                "file": rec.get("file", "?"),
                "expected": f"int8 vs {rec.get('from')}: mask IoU >= {MIN_MASK_IOU}",
                "found": found,
                "status": status,
            }
        )
    if clip and clip.get("text_short"):
        rows.append(_text_short_row(md, clip["text_short"]))
    text = _manifest(md.text_dir / "manifest.json") or {}
    fig = text.get("parity", {}).get("figures", {}).get("serving_default")
    if fig:
        rows.append(
            {
                "model": md.text_dir.name,
                "file": text.get("file", "text_tower.tflite"),
                "expected": f"LiteRT vs open_clip: corr >= {MIN_TEXT_CORR}",
                "found": f"corr {fig['pearson']:.6f}, max |diff| {fig['max_abs_diff']:.1e}",
                "status": "ok" if fig["pearson"] >= MIN_TEXT_CORR else "FAIL",
            }
        )
    return rows


def _text_short_row(md: ModelDir, rec: dict) -> dict:
    """The short text graph: its cond figures, and whether the host uses it now."""
    from wherein.indexer.models.image_tower import file_digest

    f = rec.get("figures", {})
    n = rec.get("length", "?")
    ms = f.get("ms_per_prompt", {})
    found = (
        f"cond corr {f.get('cond_pearson_min') or float('nan'):.6f}, max |diff| "
        f"{f.get('max_abs_diff') or 0:.1e} over {f.get('prompts', 0)} prompts, "
        f"{ms.get('source', 0):.1f} -> {ms.get('candidate', 0):.1f} ms/prompt"
    )
    status = "ok"
    if not rec.get("passed"):
        found, status = f"failed: {'; '.join(f.get('failed', []))}", NOT_USED
    else:
        path, source = md.clipseg_dir / rec.get("file", "?"), md.clipseg_dir / rec.get("from", "?")
        try:
            current = file_digest(source) == rec.get("from_sha256") and file_digest(
                path
            ) == rec.get("sha256")
        except OSError as exc:
            current = False
            found = f"{exc.strerror}: {exc.filename}"
        if not current:
            status = NOT_USED
            found = f"stale: not the verified files (re-run `wherein models optimize`); {found}"
        elif md.clipseg_text_short() is None:
            status = NOT_USED
            found = f"not vouched for since copied (re-run `wherein models optimize`); {found}"
    return {
        "model": CLIPSEG.key,
        "file": rec.get("file", "?"),
        "expected": f"{n} tokens vs {rec.get('from')}: cond corr >= {MIN_COND_CORR}, "
        f"max |diff| <= {MAX_COND_REL_DIFF} x max |cond|",
        "found": found,
        "status": status,
    }
