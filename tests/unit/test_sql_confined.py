"""The store is the only place that speaks SQL.

Outside indexer/store/ (the catalog's table modules and migrations.py) no package code
may hold SQL text, run statements on a connection or open one: callers use Catalog's
named methods, so a schema change (a migration) stays inside the store. Tests and bench
scripts may read or write a catalog file directly: they check what is stored, or build
the first release's layout.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STORE = ROOT / "indexer" / "store"
PATTERNS = {
    "SQL text": re.compile(
        r"\b(SELECT\s+[\w*(].*\bFROM|INSERT\s+(OR\s+\w+\s+)?INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM"
        r"|CREATE\s+(TABLE|(UNIQUE\s+)?INDEX)|DROP\s+TABLE|ALTER\s+TABLE|PRAGMA\s+\w+)\b"
    ),
    "a statement run": re.compile(r"\.(execute|executemany|executescript)\("),
    "a connection": re.compile(r"sqlite3\.connect|sqlite_utils\.|\.conn\b|\._conn\b"),
}


def confined(path: Path) -> bool:
    """Whether this file may speak SQL: it is a module of the store (at any depth)."""
    return path.resolve().is_relative_to(STORE)


def offences(text: str) -> list[tuple[int, str]]:
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        for what, pattern in PATTERNS.items():
            if pattern.search(line):
                found.append((n, what))
    return found


def test_patterns_catch_what_they_are_for():
    assert offences('rows = cat.conn.execute("SELECT id FROM images")') == [
        (1, "SQL text"),
        (1, "a statement run"),
        (1, "a connection"),
    ]
    assert offences('"INSERT OR REPLACE INTO skipped(path) VALUES (?)"') == [(1, "SQL text")]
    assert offences("sqlite3.connect(db)")
    assert offences("select the images from the folder") == []  # prose is fine
    assert offences("except sqlite3.Error:") == []  # naming an error type is fine


def test_the_store_is_what_may_speak_sql():
    # Every table module of the catalog speaks SQL, and the check lets each of them.
    speaking = [p for p in sorted(STORE.rglob("*.py")) if offences(p.read_text())]
    assert {p.name for p in speaking} >= {"catalog.py", "files.py", "items.py", "migrations.py"}
    assert all(confined(p) for p in speaking)
    # Next to the store, or named like it, is outside it.
    for outside in ("indexer/ingest/commit.py", "indexer/store.py", "indexer/storex/a.py"):
        assert not confined(ROOT / outside), outside
    assert not confined(STORE / ".." / "ingest" / "commit.py")


def test_no_sql_outside_the_store():
    bad = []
    for top in ("indexer", "search", "schemas"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if confined(path):
                continue
            for line, what in offences(path.read_text()):
                bad.append(f"{path.relative_to(ROOT)}:{line}: {what}")
    assert not bad, "use a Catalog method instead:\n" + "\n".join(bad)
