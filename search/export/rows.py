"""Hits as table bytes: csv, jsonl, parquet (the table formats' encoders).

The rows are ``Hit.to_dict()``, the objects `--json` prints: core fields in
schema order, then mask fields and command-specific extras. CSV is exactly what
`--csv` prints (nested values such as ``bbox`` or ``labels`` as JSON text), JSON
lines exactly what `--nl` prints. Parquet keeps nested values as structs; it needs
pyarrow, which comes with the ``wherein[scale]`` extra.
"""

from __future__ import annotations

from collections.abc import Sequence

from wherein.schemas.records import Hit
from wherein.search import output
from wherein.search.export.errors import ExportError
from wherein.search.export.ours import PARQUET_MARK

PYARROW_MISSING = "parquet export needs pyarrow: install it with `pip install 'wherein[scale]'`"


def csv_bytes(hits: Sequence[Hit]) -> bytes:
    return output.to_csv(hits).encode()


def jsonl_bytes(hits: Sequence[Hit]) -> bytes:
    return output.render(hits, "nl").encode()


def pyarrow():
    """(pyarrow, pyarrow.parquet), or the one-line error that says how to install them."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ExportError(PYARROW_MISSING) from None
    return pa, pq


def parquet_bytes(hits: Sequence[Hit]) -> bytes:
    pa, pq = pyarrow()
    rows = [h.to_dict() for h in hits]
    cols = output.csv_columns(hits)
    # Column by column: from_pylist would take its schema from the first row only,
    # dropping fields (masks, extras) that the first hit happens not to have.
    table = pa.table({c: pa.array([r.get(c) for r in rows]) for c in cols})
    sink = pa.BufferOutputStream()
    # The mark that lets a later export replace this file (ours.py).
    table = table.replace_schema_metadata({PARQUET_MARK: b"hits"})
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()
