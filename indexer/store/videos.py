"""The catalog's videos: a file whose items are frames ('frame' items at t seconds).

A mixin of ``Catalog`` (catalog.py, over base.CatalogBase; it derives from ItemsTable,
whose methods it calls, and PhotosTable derives from it for hit_rows' duration). A video's file row goes in first with no items and ``complete = 0``
(``insert_video``); its frames follow in chunks (``add_frames``), the last one setting
``complete = 1`` (and ``damage``, when the stream broke off), so a run stopped mid-video
leaves a row the next run finishes. A read-only catalog older than schema 6 has no videos
table: it holds no video, and these methods say so.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from wherein.indexer.store import migrations
from wherein.indexer.store.base import _chunks, _marks, _path, vector_to_blob
from wherein.indexer.store.items import ItemsTable

VIDEO_COLUMNS = ("duration", "fps", "codec", "rotation", "frames", "complete", "damage")


class VideosTable(ItemsTable):
    """The videos table and a video's frame items (see the module docstring)."""

    def has_videos(self) -> bool:
        """Whether the catalog has the videos table (schema 6)."""
        return self._migrated("videos", lambda: migrations.has_videos(self._db))

    def holds_videos(self) -> bool:
        """Whether any file is a video (a search of photos only need not fold frames)."""
        if not self.has_videos():
            return False
        return bool(self._conn.execute("SELECT EXISTS (SELECT 1 FROM videos)").fetchone()[0])

    # -- writes (inside transaction()) ------------------------------------------------
    def insert_video(self, record: dict, video: dict) -> int:
        """A video's file row (record as insert_image takes it) with no frames yet, and its
        videos row (duration, fps, codec, rotation) marked incomplete. Returns its id."""
        file_id = self.insert_image({"kind": "video", **record}, None, items=[])
        self._conn.execute(
            "INSERT INTO videos(image_id, duration, fps, codec, rotation, frames, complete) "
            "VALUES (?, ?, ?, ?, ?, 0, 0)",
            (file_id, video["duration"], video["fps"], video["codec"], video["rotation"]),
        )
        return file_id

    def insert_videos(self, records: Sequence[dict], videos: Sequence[dict]) -> None:
        """Videos' file rows with the ids given (records as insert_images takes them), with
        no items (insert_items adds their frames), and their videos rows: each video's
        (duration, fps, codec, rotation, frames, damage) as sampled to its end (complete,
        unless a video says ``complete: 0``, as a salvaged one that lost frames does)."""
        self._insert_file_rows(records, default_kind="video")
        self._conn.executemany(
            "INSERT INTO videos(image_id, duration, fps, codec, rotation, frames, complete, "
            "damage) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                (
                    int(r["id"]),
                    *(v[k] for k in ("duration", "fps", "codec", "rotation")),
                    v["frames"],
                    int(v.get("complete", 1)),
                    v["damage"],
                )
                for r, v in zip(records, videos, strict=True)
            ),
        )

    def add_frames(
        self,
        file_id: int,
        frames: Sequence[tuple[float, np.ndarray]],
        done: bool = False,
        damage: str | None = None,
    ) -> list[int]:
        """Frame items (t seconds, vector) of a video, with ids no file or item ever had;
        done: the video's last frames (complete = 1, and why the rest was skipped). Returns
        the new item ids."""
        start = self.next_id()
        ids = list(range(start, start + len(frames)))
        self._conn.executemany(
            "INSERT INTO items(id, image_id, kind, t) VALUES (?, ?, 'frame', ?)",
            [(i, file_id, float(t)) for i, (t, _) in zip(ids, frames, strict=True)],
        )
        self._conn.executemany(
            "INSERT INTO embeddings(item_id, vector) VALUES (?, ?)",
            [(i, vector_to_blob(v)) for i, (_, v) in zip(ids, frames, strict=True)],
        )
        self._conn.execute(
            "UPDATE videos SET frames = (SELECT count(*) FROM items WHERE image_id = ? AND "
            "kind = 'frame'), complete = max(complete, ?), damage = coalesce(?, damage) "
            "WHERE image_id = ?",
            (file_id, int(done), damage if done else None, file_id),
        )
        return ids

    def copy_video(self, donor: int, file_id: int) -> None:
        """The videos row of a byte-identical copy (its frames were copied with its row)."""
        cols = ", ".join(VIDEO_COLUMNS)
        self._conn.execute(
            f"INSERT INTO videos(image_id, {cols}) SELECT ?, {cols} FROM videos WHERE image_id = ?",
            (file_id, donor),
        )

    # -- reads ------------------------------------------------------------------------
    def frame_times(self, file_id: int) -> set[float]:
        """The t of every frame of this video stored so far."""
        rows = self._conn.execute(
            "SELECT t FROM items WHERE image_id = ? AND kind = 'frame'", (file_id,)
        )
        return {float(t) for (t,) in rows}

    def incomplete_videos(self, under: Sequence[str] | None = None) -> set[int]:
        """Ids of the videos whose frames are not all stored (a run stopped mid-video); with
        ``under``, only those in or below these absolute folders."""
        if not self.has_videos():
            return set()
        where, args = self._under("i.path", under)
        where = f"{where} AND" if where else " WHERE"
        rows = self._conn.execute(
            f"SELECT i.id FROM images i JOIN videos v ON v.image_id = i.id{where} v.complete = 0",
            args,
        )
        return {int(r[0]) for r in rows}

    def video_items(self, file_ids: Iterable[int]) -> dict[int, list]:
        """file id -> its frames as insert_image's items ('frame', t, None, vector), in time
        order, for the complete videos among these files (what a copy reuses)."""
        frames: dict[int, list[tuple[int, float]]] = {}
        if not self.has_videos():
            return {}
        for chunk in _chunks(file_ids):
            for item_id, file_id, t in self._conn.execute(
                "SELECT it.id, it.image_id, it.t FROM items it JOIN videos v ON "
                f"v.image_id = it.image_id WHERE v.complete = 1 AND it.kind = 'frame' AND "
                f"it.image_id IN ({_marks(chunk)}) ORDER BY it.t, it.id",
                chunk,
            ):
                frames.setdefault(int(file_id), []).append((int(item_id), float(t)))
        ids, vecs = self.vectors_for(i for f in frames.values() for i, _ in f)
        vector = {int(i): v for i, v in zip(ids, vecs, strict=True)}
        return {
            fid: [("frame", t, None, vector[i]) for i, t in f if i in vector]
            for fid, f in frames.items()
        }

    def video_rows(self, file_ids: Iterable[int]) -> dict[int, dict]:
        """file id -> its videos row (duration, fps, codec, rotation, frames, complete,
        damage), for the files among these that are videos."""
        out: dict[int, dict] = {}
        if not self.has_videos():
            return out
        cols = ", ".join(VIDEO_COLUMNS)
        for chunk in _chunks(file_ids):
            for r in self._conn.execute(
                f"SELECT image_id, {cols} FROM videos WHERE image_id IN ({_marks(chunk)})",
                chunk,
            ).fetchall():
                out[int(r[0])] = dict(zip(VIDEO_COLUMNS, r[1:], strict=True))
        return out

    def video_counts(self) -> dict[str, int]:
        """videos, frames (items), incomplete (a run stopped mid-video) and damaged ones."""
        frames = self._conn.execute("SELECT count(*) FROM items WHERE kind = 'frame'").fetchone()
        if not self.has_videos():
            return {"videos": 0, "frames": frames[0], "incomplete": 0, "damaged": 0}
        videos, incomplete, damaged = self._conn.execute(
            "SELECT count(*), coalesce(sum(complete = 0), 0), "
            "coalesce(sum(damage IS NOT NULL), 0) FROM videos"
        ).fetchone()
        return {
            "videos": videos,
            "frames": frames[0],
            "incomplete": incomplete,
            "damaged": damaged,
        }

    def kind_counts(self, rest: str | None = None) -> dict[str, dict[str, int]]:
        """Per media kind the catalog names (images.kind): its files; for a kind with
        videos rows (a timed kind: a video, an animation) also its frame items and the files
        a stopped run left incomplete. rest: the kind of every file without a videos row,
        when only one kind can be (the registry's one untimed kind, a photo): they are
        counted as the files less the timed ones, from the small videos table, instead of
        reading every row of images (about 10x the cost of counting them)."""
        out: dict[str, dict[str, int]] = {}
        timed = 0
        if self.has_videos():
            rows = self._conn.execute(
                f"SELECT {self._kind}, count(*), coalesce(sum(v.complete = 0), 0) "
                "FROM videos v JOIN images i ON i.id = v.image_id GROUP BY 1"
            )
            for k, n, incomplete in rows:
                out[str(k)] = {"files": n, "frames": 0, "incomplete": incomplete}
                timed += n
            frames = self._conn.execute(
                f"SELECT {self._kind}, count(*) FROM items it JOIN images i "
                "ON i.id = it.image_id WHERE it.kind = 'frame' GROUP BY 1"
            )
            for k, n in frames:
                out.setdefault(str(k), {"files": 0, "incomplete": 0})["frames"] = n
        if rest is not None:
            others = self._conn.execute("SELECT count(*) FROM images").fetchone()[0] - timed
            if others:
                out.setdefault(rest, {"files": 0})["files"] += others
            return out
        where = " WHERE i.id NOT IN (SELECT image_id FROM videos)" if self.has_videos() else ""
        for k, n in self._conn.execute(
            f"SELECT {self._kind}, count(*) FROM images i{where} GROUP BY 1"
        ):
            out.setdefault(str(k), {"files": 0})["files"] += n
        return out

    def video_damage(self) -> list[tuple[str, str]]:
        """(path, damage) of the files of a timed kind (videos, animations) whose stream
        broke off, by path."""
        if not self.has_videos():
            return []
        rows = self._conn.execute(
            "SELECT i.path, v.damage FROM videos v JOIN images i ON i.id = v.image_id "
            "WHERE v.damage IS NOT NULL ORDER BY i.path"
        )
        return [(_path(p), d) for p, d in rows]

    # -- health (status --check) -------------------------------------------------------
    def video_problems(self) -> tuple[int, int, int]:
        """(complete videos with no frame, frame items of files that are not videos,
        incomplete videos with no frame yet): the first two are damage, the last is what
        the next index run finishes (files_without_items counts those too)."""
        if not self.has_videos():
            orphans = self._conn.execute(
                "SELECT count(*) FROM items WHERE kind = 'frame'"
            ).fetchone()[0]
            return 0, orphans, 0
        bare = (
            "SELECT count(*) FROM videos v WHERE v.complete = ? AND NOT EXISTS "
            "(SELECT 1 FROM items it WHERE it.image_id = v.image_id)"
        )
        empty = self._conn.execute(bare, (1,)).fetchone()[0]
        waiting = self._conn.execute(bare, (0,)).fetchone()[0]
        strays = self._conn.execute(
            "SELECT count(*) FROM items it WHERE it.kind = 'frame' AND NOT EXISTS "
            "(SELECT 1 FROM videos v WHERE v.image_id = it.image_id)"
        ).fetchone()[0]
        return empty, strays, waiting
