"""`wherein models check`: load every model and verify its contract, one row per file.

The embedding family checks its own files (its registry entry's `check`); CLIPSeg's graphs
and assets, and the optimized graphs' figures, follow.
"""

from __future__ import annotations

from pathlib import Path

from wherein.indexer.models.family import CheckRows
from wherein.indexer.models.litert_graph import LiteRTGraph
from wherein.indexer.models.modeldir import ModelDir
from wherein.indexer.models.registry import entry_for
from wherein.schemas.errors import WhereinError
from wherein.schemas.models import CLIPSEG, MODEL_MARKER, GraphSpec


def _io(spec: GraphSpec) -> str:
    ins = ", ".join(t.describe() for t in spec.inputs)
    outs = ", ".join(t.describe() for t in spec.outputs)
    return f"{ins} -> {outs}"


def check_models(root: Path) -> tuple[list[dict], bool]:
    md = ModelDir(Path(root))
    rows = CheckRows()
    try:
        family = entry_for(md)
    except WhereinError as exc:  # an unknown family: one row, then CLIPSeg's as usual
        message = str(exc)

        def unknown() -> str:
            raise WhereinError(message)

        rows.add("model", MODEL_MARKER, "a registered model family", unknown)
    else:
        family.check(md, family, rows)

    for g in CLIPSEG.graphs:

        def graph(g=g):
            path = md.require(CLIPSEG) / g.filename
            LiteRTGraph(path, 1).check(g)
            return "matches"

        rows.add(CLIPSEG.key, g.filename, _io(g), graph)
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
        rows.add(CLIPSEG.key, a.filename, expected, asset)
    from wherein.indexer.models.optimize.report import NOT_USED, optimized_rows

    out = rows.rows + optimized_rows(md)  # verification figures of optimized graphs
    if md.is_standin:
        out.append(
            {
                "model": "note",
                "file": "STANDIN.json",
                "expected": "-",
                "found": "stand-in models (colour-only)",
                "status": "ok",
            }
        )
    return out, all(r["status"] in ("ok", NOT_USED) for r in out)
