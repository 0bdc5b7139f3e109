"""`wherein models check`: load every model and verify its contract, one row per file."""

from __future__ import annotations

from pathlib import Path

from wherein.indexer.models.litert_graph import LiteRTGraph
from wherein.indexer.models.modeldir import ModelDir
from wherein.schemas.errors import WhereinError
from wherein.schemas.models import CLIPSEG, SIGLIP_EMBED_DIM, SIGLIP_IMAGE, GraphSpec


def _io(spec: GraphSpec) -> str:
    ins = ", ".join(t.describe() for t in spec.inputs)
    outs = ", ".join(t.describe() for t in spec.outputs)
    return f"{ins} -> {outs}"


def _image_tower_name(md: ModelDir, spec: GraphSpec) -> str:
    """The graph the image check loads: a converted tower's (manifest) wins over the published one."""
    try:
        return md.image_tower_file().name
    except (WhereinError, OSError, ValueError):  # none, or a bad manifest: name the expected file
        return spec.filename


def check_models(root: Path) -> tuple[list[dict], bool]:
    md = ModelDir(Path(root))
    rows: list[dict] = []

    def add(model: str, file: str, expected: str, fn) -> None:
        try:
            found = fn()
            rows.append(
                {"model": model, "file": file, "expected": expected, "found": found, "status": "ok"}
            )
        except WhereinError as exc:
            rows.append(
                {
                    "model": model,
                    "file": file,
                    "expected": expected,
                    "found": str(exc),
                    "status": "FAIL",
                }
            )
        except Exception as exc:  # a check must report, not crash
            rows.append(
                {
                    "model": model,
                    "file": file,
                    "expected": expected,
                    "found": f"{type(exc).__name__}: {exc}",
                    "status": "FAIL",
                }
            )

    def image():
        from wherein.indexer.models.image_tower import ImageTower
        from wherein.indexer.models.registry import entry_for

        tower = ImageTower.from_models(md, 1, entry_for(md).spec)
        return f"batch sizes {tower.graph.batch_sizes}"

    spec = SIGLIP_IMAGE.graphs[0]
    add(SIGLIP_IMAGE.key, _image_tower_name(md, spec), _io(spec), image)

    def text():
        from wherein.indexer.models.text_tower import TextTower

        tower = TextTower.from_models(md)
        if tower.dim != SIGLIP_EMBED_DIM:
            raise WhereinError(f"text embedding has {tower.dim} dims")
        return f"[n,{tower.dim}], scale {tower.logit_scale:.2f}, bias {tower.logit_bias:.2f}"

    add("siglip2-text", "open_clip_config.json", f"open_clip SigLIP, [n,{SIGLIP_EMBED_DIM}]", text)

    from wherein.indexer.models.text_tower_litert import (
        TEXT_GRAPH,
        LiteRTTextTower,
        has_litert_text,
    )

    if has_litert_text(md.root):  # a converted, torch-free text tower

        def litert_text():
            tower = LiteRTTextTower.from_models(md)
            if tower.dim != SIGLIP_EMBED_DIM:
                raise WhereinError(f"text embedding has {tower.dim} dims")
            return f"[n,{tower.dim}], scale {tower.logit_scale:.2f}, bias {tower.logit_bias:.2f}"

        add("siglip2-text", TEXT_GRAPH, f"LiteRT tokens -> [1,{SIGLIP_EMBED_DIM}]", litert_text)

    for g in CLIPSEG.graphs:

        def graph(g=g):
            path = md.require(CLIPSEG) / g.filename
            LiteRTGraph(path, 1).check(g)
            return "matches"

        add(CLIPSEG.key, g.filename, _io(g), graph)
    for a in CLIPSEG.assets:

        def asset(a=a):
            path = md.require(CLIPSEG) / a.filename
            if not path.is_file():
                raise WhereinError("missing")
            size = path.stat().st_size
            if a.size_bytes is not None and size != a.size_bytes:
                raise WhereinError(f"{size:,} bytes")
            return f"{size:,} bytes"

        expected = f"{a.size_bytes:,} bytes" if a.size_bytes else "present"
        add(CLIPSEG.key, a.filename, expected, asset)
    from wherein.indexer.models.optimize.report import NOT_USED, optimized_rows

    rows += optimized_rows(md)  # verification figures of optimized graphs (models optimize)
    if md.is_standin:
        rows.append(
            {
                "model": "note",
                "file": "STANDIN.json",
                "expected": "-",
                "found": "stand-in models (colour-only)",
                "status": "ok",
            }
        )
    return rows, all(r["status"] in ("ok", NOT_USED) for r in rows)
