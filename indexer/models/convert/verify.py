"""`wherein models verify`: run each LiteRT graph beside its PyTorch reference.

For every graph it can pair with a reference — a converted tower (reference
rebuilt from its manifest's source and pinned by the weights digest), the
stand-in image tower (reference: the stand-in torch module), the published
image tower (reference: open_clip ViT-B-16-SigLIP2, needs the weights), and a
converted text tower — it feeds both the same inputs and reports Pearson
correlation, max |diff| and top-10 neighbour agreement per signature.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from wherein.indexer.models.convert.build import (
    MANIFEST,
    MIN_CORR,
    MIN_TOP10,
    PROBE_TEXTS,
    litert_embed,
    parity,
    random_images,
    torch_embed,
)
from wherein.indexer.models.convert.towers import (
    REAL_SOURCE,
    Source,
    Target,
    image_module,
    state_digest,
    text_module,
)
from wherein.indexer.models.image_tower import file_digest
from wherein.indexer.models.modeldir import ModelDir
from wherein.schemas.errors import ModelError, WhereinError
from wherein.schemas.models import SIGLIP_IMAGE_SIZE

COLUMNS = ["model", "signature", "precision", "pearson", "max_abs_diff", "top10", "status"]


def load_images(directory: Path, count: int, size: int = SIGLIP_IMAGE_SIZE) -> np.ndarray:
    from wherein.indexer.imaging import DecodeError, decode, is_image_name, siglip_input

    arrays = []
    for path in sorted(p for p in Path(directory).rglob("*") if p.is_file() and is_image_name(p)):
        try:
            img, _ = decode(path)
        except DecodeError:
            continue
        arrays.append(siglip_input(img, size))
        if len(arrays) >= count:
            break
    if len(arrays) < 2:
        raise ModelError(f"{directory}: fewer than 2 readable images")
    return np.stack(arrays).astype(np.float32)


def _read_manifest(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ModelError(f"{path}: unreadable manifest ({exc})") from exc


def _check_pinned(manifest: dict, graph: Path, module) -> None:
    """The graph is the one converted, and the rebuilt reference has the converted weights."""
    want = manifest.get("sha256")
    if want and file_digest(graph) != want:
        raise ModelError(f"{graph.name}: file differs from the one the manifest describes (sha256)")
    pinned = manifest.get("source", {}).get("state_digest")
    if pinned and state_digest(module) != pinned:
        raise ModelError(
            "the rebuilt PyTorch reference has other weights than the converted graph "
            "(source or seed changed?)"
        )


def _row(model: str, sig: str, precision: str, p=None, status: str = "ok", note: str = "") -> dict:
    row: dict[str, str | float | None] = {
        "model": model,
        "signature": sig,
        "precision": precision,
        "pearson": None,
        "max_abs_diff": None,
        "top10": None,
        "status": status,
    }
    if p is not None:
        row.update(
            pearson=round(p.pearson, 6),
            max_abs_diff=float(f"{p.max_abs_diff:.3g}"),
            top10=round(p.top10, 3),
        )
    if note:
        row["status"] = f"{status}: {note}"
    return row


def verify_image(
    md: ModelDir, images: Path | None, count: int, log: Callable[[str], None]
) -> list[dict]:
    from wherein.indexer.models.litert_graph import LiteRTGraph

    manifest_path = md.image_dir / MANIFEST
    try:
        graph_path = md.image_tower_file()
    except WhereinError as exc:
        return [_row(md.image_dir.name, "-", "-", status="FAIL", note=str(exc))]
    name = f"{md.image_dir.name}/{graph_path.name}"
    if manifest_path.is_file():
        manifest = _read_manifest(manifest_path)
        source = Source.from_json(manifest.get("source", {}))
        precision = manifest.get("precision", "fp32")
    elif md.is_standin:
        manifest, source, precision = {}, Source("standin"), "fp16"
    else:
        manifest, source, precision = {}, Source("hub", ref=REAL_SOURCE), "fp16"
    if precision not in MIN_CORR:
        return [
            _row(name, "-", str(precision), status="FAIL", note="unknown precision in manifest")
        ]
    try:
        log(f"{name}: reference {source.describe()}")
        graph = LiteRTGraph(graph_path, None)
        # The family's input size, as the graph takes it (B/16: 224; B/32: 256).
        size = graph.signatures["serving_default"].input_shapes[0][-1]
        module = image_module(source, Target(size=size))
        _check_pinned(manifest, graph_path, module)
    except WhereinError as exc:
        return [_row(name, "-", precision, status="FAIL", note=str(exc))]
    x = load_images(images, count, size) if images else random_images(count, seed=7, size=size)
    ref = torch_embed(module, x)
    rows = []
    for sig in graph.signatures:
        p = parity(ref, litert_embed(graph, sig, x))
        bad = p.failures(precision)
        rows.append(_row(name, sig, precision, p, "FAIL" if bad else "ok", "; ".join(bad)))
    return rows


def verify_text(md: ModelDir, log: Callable[[str], None]) -> list[dict]:
    from wherein.indexer.models.text_tower_litert import TEXT_GRAPH, TEXT_MANIFEST, LiteRTTextTower

    d = md.text_dir
    if not (d / TEXT_GRAPH).is_file() or not (d / TEXT_MANIFEST).is_file():
        return []
    name = f"{d.name}/{TEXT_GRAPH}"
    try:
        manifest = _read_manifest(d / TEXT_MANIFEST)
        precision = manifest.get("precision", "fp32")
        source = Source.from_json(manifest.get("source", {}))
        log(f"{name}: reference {source.describe()}")
        module, scale, bias, _ = text_module(source)
        _check_pinned(manifest, d / manifest.get("file", TEXT_GRAPH), module)
        tower = LiteRTTextTower(d, md.space)
        import open_clip
        import torch

        ref_name = source.ref if source.kind == "hub" else f"local-dir:{source.ref}"
        theirs = open_clip.get_tokenizer(ref_name)(PROBE_TEXTS)
        ours = tower.tokenizer(PROBE_TEXTS)
        if not np.array_equal(ours, theirs.numpy()):
            raise ModelError("torch-free tokenizer gives other token ids than open_clip")
        if abs(scale - tower.logit_scale) > 1e-4 * scale or abs(
            bias - tower.logit_bias
        ) > 1e-4 * max(1, abs(bias)):
            raise ModelError("manifest logit_scale/logit_bias differ from the model's")
        with torch.inference_mode():
            ref = module(theirs).float().numpy()
        p = parity(ref, tower.encode_tokens(ours))
    except WhereinError as exc:
        return [_row(name, "-", "?", status="FAIL", note=str(exc))]
    bad = p.failures(precision if precision in MIN_CORR else "fp32")
    return [_row(name, "serving_default", precision, p, "FAIL" if bad else "ok", "; ".join(bad))]


def verify_models(
    root: Path,
    images: Path | None = None,
    count: int = 32,
    log: Callable[[str], None] = lambda s: None,
) -> tuple[list[dict], bool]:
    md = ModelDir(Path(root))
    rows = verify_image(md, images, count, log) + verify_text(md, log)
    return rows, bool(rows) and all(r["status"] == "ok" for r in rows)


def thresholds_text() -> str:
    return "; ".join(
        f"{k}: corr >= {MIN_CORR[k]}" + (f", top-10 >= {MIN_TOP10[k]}" if MIN_TOP10[k] else "")
        for k in MIN_CORR
    )
