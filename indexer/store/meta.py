"""The meta table: the catalog's settings (model, dim, vector file) and the vector
generation counter, each a JSON value under its key.
"""

from __future__ import annotations

import json
import sqlite3

from wherein.indexer.store.base import CatalogBase


class MetaTable(CatalogBase):
    def get_meta(self, key: str, default=None):
        try:
            row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        except sqlite3.OperationalError:
            return default
        return json.loads(row[0]) if row else default

    def set_meta(self, key: str, value) -> None:
        self._conn.execute(
            "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, json.dumps(value)),
        )

    @property
    def schema_version(self) -> int:
        return int(self.get_meta("schema_version", 0) or 0)

    @property
    def generation(self) -> int:
        return int(self.get_meta("generation", 0))

    @property
    def data_version(self) -> int:
        """SQLite's PRAGMA data_version: it changes whenever another connection commits, so
        while it holds, whatever this connection read is still what the catalog says."""
        return int(self._conn.execute("PRAGMA data_version").fetchone()[0])

    def bump_generation(self) -> int:
        gen = self.generation + 1
        self.set_meta("generation", gen)
        return gen
