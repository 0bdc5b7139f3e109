"""The items table and the embeddings table: what each file yields (a photo: one item of
kind 'image'; room for a video's frames and a photo's regions), each item with at most
one vector. FAISS ids are item ids: these are the methods that write and read vectors.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from wherein.indexer.store import migrations
from wherein.indexer.store.base import _chunks, _key, _marks, _path, vector_to_blob
from wherein.indexer.store.files import FilesTable


class ItemsTable(FilesTable):
    def count_embedded(self) -> int:
        """Items with a vector (what FAISS holds)."""
        return self._conn.execute("SELECT count(*) FROM embeddings").fetchone()[0]

    def has_items(self) -> bool:
        """Whether the catalog stores items (schema 4), not a read-only older one seen
        through views."""
        return migrations.has_items(self._db)

    def count_items(self, kind: str | None = None) -> int:
        """Items (of this kind), embedded or not."""
        if kind is None:
            return self._conn.execute("SELECT count(*) FROM items").fetchone()[0]
        return self._conn.execute("SELECT count(*) FROM items WHERE kind = ?", (kind,)).fetchone()[
            0
        ]

    def embedded_ids(self, kind: str | None = None, file_kind: str | None = None) -> np.ndarray:
        """Ids of the items with a vector, ascending (what FAISS must hold); with kind
        ('image', 'frame'), only the items of that kind; with file_kind (a media kind's
        name, indexer/kinds), only the items of files of that kind."""
        if file_kind is not None:
            rows = self._conn.execute(
                "SELECT e.item_id FROM embeddings e JOIN items it ON it.id = e.item_id "
                f"JOIN images i ON i.id = it.image_id WHERE {self._kind} = ? ORDER BY e.item_id",
                (file_kind,),
            ).fetchall()
        elif kind is None:
            rows = self._conn.execute("SELECT item_id FROM embeddings ORDER BY item_id").fetchall()
        else:
            rows = self._conn.execute(
                "SELECT e.item_id FROM embeddings e JOIN items it ON it.id = e.item_id "
                "WHERE it.kind = ? ORDER BY e.item_id",
                (kind,),
            ).fetchall()
        return np.array([r[0] for r in rows], dtype=np.int64)

    def item_files(self, ids: Iterable[int]) -> dict[int, int]:
        """item id -> its file's id, for the item ids in the catalog."""
        out: dict[int, int] = {}
        for chunk in _chunks(ids):
            rows = self._conn.execute(
                f"SELECT id, image_id FROM items WHERE id IN ({_marks(chunk)})", chunk
            )
            out.update((int(i), int(f)) for i, f in rows)
        return out

    def item_owners(self, ids: Iterable[int]) -> dict[int, tuple[int, str | None]]:
        """item id -> (its file's id, the kind a hit on it shows: the file's media kind, else
        the item's), for the item ids whose file is in the catalog: what a search folds by,
        without the rows a hit shows (hit_rows)."""
        out: dict[int, tuple[int, str | None]] = {}
        for chunk in _chunks(ids):
            rows = self._conn.execute(
                f"SELECT it.id, it.image_id, {self._kind}, it.kind FROM items it "
                f"JOIN images i ON i.id = it.image_id WHERE it.id IN ({_marks(chunk)})",
                chunk,
            ).fetchall()
            out.update((int(i), (int(f), file_kind or kind)) for i, f, file_kind, kind in rows)
        return out

    def embedded_frames(self, file_ids: Iterable[int]) -> dict[int, list[tuple[int, float]]]:
        """file id -> (item id, t) of its embedded 'frame' items, by time (then id); files
        without one are left out."""
        out: dict[int, list[tuple[int, float]]] = {}
        for chunk in _chunks(file_ids):
            rows = self._conn.execute(
                "SELECT it.image_id, it.id, it.t FROM items it JOIN embeddings e ON "
                f"e.item_id = it.id WHERE it.kind = 'frame' AND it.image_id IN ({_marks(chunk)}) "
                "ORDER BY it.image_id, it.t, it.id",
                chunk,
            )
            for file_id, item_id, t in rows:
                out.setdefault(int(file_id), []).append((int(item_id), float(t or 0.0)))
        return out

    def embedded_paths(self, under: Sequence[str] | None = None) -> list[tuple[int, str]]:
        """(item id, path of its file) of every embedded item; with ``under`` (absolute
        folders), only those whose file is one of them or below one of them."""
        where, args = self._under("i.path", under)
        sql = (
            "SELECT it.id, i.path FROM images i JOIN items it ON it.image_id = i.id "
            f"JOIN embeddings e ON e.item_id = it.id{where}"
        )
        return [(int(i), _path(p)) for i, p in self._conn.execute(sql, args)]

    def vectors_for(self, ids: Iterable[int]) -> tuple[np.ndarray, np.ndarray]:
        """(item ids, vectors [n, d]) for those item ids that have an embedding."""
        got_ids: list[int] = []
        blobs: list[bytes] = []
        for chunk in _chunks(ids):
            # fetchall: the rows at once, not one by one through the cursor's damage naming
            # (a search reads its 200 candidates' vectors here).
            rows = self._conn.execute(
                f"SELECT item_id, vector FROM embeddings WHERE item_id IN ({_marks(chunk)})",
                chunk,
            ).fetchall()
            got_ids.extend(r[0] for r in rows)
            blobs.extend(r[1] for r in rows)
        if not blobs:
            return np.zeros(0, dtype=np.int64), np.zeros((0, 0), dtype=np.float32)
        return np.array(got_ids, dtype=np.int64), self._from_file(got_ids, blobs)

    def iter_vectors(self, batch: int = 4096) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """All embeddings in item id order, batch by batch (never all in memory at once)."""
        last = -1
        while True:
            rows = self._conn.execute(
                "SELECT item_id, vector FROM embeddings WHERE item_id > ? ORDER BY item_id LIMIT ?",
                (last, batch),
            ).fetchall()
            if not rows:
                return
            last = rows[-1][0]
            ids = [r[0] for r in rows]
            yield (
                np.array(ids, dtype=np.int64),
                self._from_file(ids, [r[1] for r in rows], span=True),
            )

    def file_vectors(self, file_ids: Iterable[int]) -> dict[int, np.ndarray]:
        """file id -> the vector of its 'image' item, for the files that have one (what a
        copy of the same bytes reuses instead of embedding them again)."""
        item_of: dict[int, int] = {}
        for chunk in _chunks(file_ids):
            for item_id, file_id in self._conn.execute(
                f"SELECT id, image_id FROM items WHERE kind = 'image' AND image_id IN "
                f"({_marks(chunk)})",
                chunk,
            ):
                item_of[int(item_id)] = int(file_id)
        ids, vecs = self.vectors_for(item_of)
        return {item_of[int(i)]: v for i, v in zip(ids, vecs, strict=True)}

    # -- writes (call inside transaction()) --------------------------------
    def insert_image(
        self,
        record: dict,
        vector: np.ndarray | None,
        items: Sequence[tuple[str, float | None, Sequence[float] | None, np.ndarray | None]]
        | None = None,
    ) -> int:
        """A new file row (record: path, size, mtime_ns, sha256, width, height, format,
        indexed_at, model_id, and optionally ctime_ns, inode and kind: the file's media kind,
        'photo' when not given), its one 'image' item and that
        item's embedding (vector; None: not embedded yet); clears a skip of that path.
        Returns the id (the file's and its first item's). items, when given, are what the
        file yields instead of the one whole image: (kind, t, box or None, vector) each, ids
        in that order (empty: none yet, a video's frames come later)."""
        key = _key(record["path"])
        file_id = self.next_id()
        self._conn.execute(
            "INSERT INTO images(id, path, size, mtime_ns, sha256, width, height, format, "
            "indexed_at, model_id, ctime_ns, inode, kind) VALUES (:id, :key, :size, :mtime_ns, "
            ":sha256, :width, :height, :format, :indexed_at, :model_id, :ctime_ns, :inode, :kind)",
            {
                "ctime_ns": None,
                "inode": None,
                "kind": "photo",
                **record,
                "key": key,
                "id": file_id,
            },
        )
        located = list(items) if items is not None else [("image", None, None, vector)]
        for n, (kind, t, box, vec) in enumerate(located):
            item_id = file_id + n  # next_id: no id at or past file_id was ever used
            x0, y0, x1, y1 = box if box is not None else (None, None, None, None)
            self._conn.execute(
                "INSERT INTO items(id, image_id, kind, t, x0, y0, x1, y1) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (item_id, file_id, kind, t, x0, y0, x1, y1),
            )
            if vec is not None:
                self._conn.execute(
                    "INSERT INTO embeddings(item_id, vector) VALUES (?, ?)",
                    (item_id, vector_to_blob(vec)),
                )
        self._conn.execute("DELETE FROM skipped WHERE path = ?", (key,))
        return file_id

    def insert_images(self, records: Sequence[dict], vectors: np.ndarray) -> None:
        """Rows with the ids given (``id`` in each record: the file's and its one 'image'
        item's) and their embeddings, in bulk."""
        self._insert_file_rows(records)
        self._conn.executemany(
            "INSERT INTO items(id, image_id, kind) VALUES (?, ?, 'image')",
            ((int(r["id"]), int(r["id"])) for r in records),
        )
        self._put_vectors([int(r["id"]) for r in records], vectors)

    def insert_items(
        self,
        rows: Sequence[tuple[int, int, str, float | None]],
        vectors: np.ndarray,
        boxes: Sequence[Sequence[float] | None] | None = None,
    ) -> None:
        """Items with the ids given, (id, file id, kind, t) each, of files already in (a
        video's frames, a photo's regions: boxes, each region's, None for a frame), and
        their embeddings, in bulk."""
        where = boxes if boxes is not None else [None] * len(rows)
        self._conn.executemany(
            "INSERT INTO items(id, image_id, kind, t, x0, y0, x1, y1) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                (int(i), int(f), k, None if t is None else float(t), *_corners(box))
                for (i, f, k, t), box in zip(rows, where, strict=True)
            ),
        )
        self._put_vectors([int(r[0]) for r in rows], vectors)

    def _insert_file_rows(self, records: Sequence[dict], default_kind: str = "photo") -> None:
        """File rows with the ids given (``id`` in each record), no items: bulk inserts'
        first step, for photos and videos alike (a record's ``kind``, else default_kind)."""
        self._conn.executemany(
            "INSERT INTO images(id, path, size, mtime_ns, sha256, width, height, format, "
            "indexed_at, model_id, kind) VALUES (:id, :key, :size, :mtime_ns, :sha256, :width, "
            ":height, :format, :indexed_at, :model_id, :kind)",
            ({"kind": default_kind, **r, "key": _key(r["path"])} for r in records),
        )

    def _put_vectors(self, ids: list[int], vectors: np.ndarray) -> None:
        if self._vfile is not None:
            # Rows first: an id clash fails here, before the file row of a committed id is touched.
            self._conn.executemany(
                "INSERT INTO embeddings(item_id, vector) VALUES (?, ?)", ((i, b"") for i in ids)
            )
            self._vfile.write(np.array(ids, np.int64), vectors)
            return
        self._conn.executemany(
            "INSERT INTO embeddings(item_id, vector) VALUES (?, ?)",
            ((i, vector_to_blob(v)) for i, v in zip(ids, vectors, strict=True)),
        )

    def set_embedding(self, item_id: int, vector: np.ndarray) -> None:
        self._doom([item_id])  # a float32 blob from now on: a file row it had is dead
        self._conn.execute(
            "INSERT INTO embeddings(item_id, vector) VALUES (?, ?) "
            "ON CONFLICT(item_id) DO UPDATE SET vector = excluded.vector",
            (item_id, vector_to_blob(vector)),
        )

    def clear_embeddings(self) -> int:
        self._dying_all = True
        return self._conn.execute("DELETE FROM embeddings").rowcount


def _corners(box: Sequence[float] | None) -> tuple[float | None, ...]:
    """A box's x0, y0, x1, y1 as the items table stores them (None: no box)."""
    return (None,) * 4 if box is None else tuple(float(v) for v in box)
