"""The index on disk: catalog, vectors, atomic writes.

sqlite_utils (used by the catalog and its migrations) imports pandas when it is
installed, ~1 s of a search's start, only to map ``pd.Timestamp`` when it infers a
column type, which wherein never asks of it. It is first imported here, with pandas
blocked for that one import unless pandas is already loaded, so opening an index
never loads pandas; pandas stays importable for anything else.
"""

import sys


def _import_sqlite_utils_without_pandas() -> None:
    if "sqlite_utils" in sys.modules or "pandas" in sys.modules:
        return
    sys.modules["pandas"] = None  # type: ignore[assignment]  # `import pandas` -> ImportError
    try:
        import sqlite_utils  # noqa: F401
    finally:
        if "pandas" in sys.modules and sys.modules["pandas"] is None:
            del sys.modules["pandas"]


_import_sqlite_utils_without_pandas()
