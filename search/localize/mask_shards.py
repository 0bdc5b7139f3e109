"""The work folder of a sharded mask export: the job, one file per shard of images, the merge.

    DEST.work/
      job.json            what the shards hold: prompt, format, categories, models, shard
                          size, and the count and digest of the items (id, path, category)
      shard-00000.jsonl   one line per image of the shard, in job order

A shard file is written whole to a temporary name and renamed, so its presence
means it is complete: a killed run leaves whole shards behind, and the next run
with the same job writes only the missing ones. A job.json for another job (the
selection, the prompt or the models changed) makes the shards worthless: they are
removed and the job starts over. The merge adds the pieces to one LabelWriter in
job order, so the export is the one an uninterrupted, unsharded run writes
(annotation ids count in that order), however the shards were spread over workers
and runs.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wherein.indexer.store.atomic import write_atomic
from wherein.search.export.errors import LabelExportError
from wherein.search.export.pieces import Piece

JOB = "job.json"
WORK_SUFFIX = ".work"
VERSION = 1


@dataclass(frozen=True)
class Item:
    """One image to mask: its catalog id, path and the category its mask is exported as; a
    video's frame: its item id, the video's path and the moment (seconds)."""

    id: int
    path: str
    category: str
    time: float | None = None
    name: str | None = None  # a frame's name in the export (FrameNames, on the driver)
    region: list[float] | None = None  # a photo hit's best region: the first crop, exported


@dataclass
class Outcome:
    """One image's result: the hit's mask fields and its export piece, or why it failed."""

    id: int
    values: dict[str, Any] | None  # bbox, mask_area, mask_score; None when not decodable
    piece: Piece | None
    error: str | None = None


@dataclass(frozen=True)
class MaskJob:
    prompt: str
    fmt: str
    categories: list[str]  # the export's categories, in id order
    items: list[Item]
    shard_size: int
    models: str  # identity of the mask model: a job on other graphs is another job

    @property
    def shards(self) -> int:
        return (len(self.items) + self.shard_size - 1) // self.shard_size

    def shard(self, i: int) -> list[Item]:
        return self.items[i * self.shard_size : (i + 1) * self.shard_size]

    def digest(self) -> str:
        h = hashlib.sha256()
        head = [self.prompt, self.fmt, self.categories, self.shard_size, self.models]
        h.update(json.dumps(head).encode())
        for it in self.items:  # paths as bytes: a non-UTF-8 name hashes like any other
            h.update(f"\n{it.id}\0".encode() + os.fsencode(it.path) + b"\0")
            h.update(it.category.encode())
            if it.time is not None:  # photos hash as before: a started job resumes
                h.update(f"@{it.time!r}\0{it.name}".encode())
            if it.region is not None:  # its pieces carry it (and it is the first crop)
                h.update(f"#{[float(v) for v in it.region]!r}".encode())
        return h.hexdigest()

    def header(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "prompt": self.prompt,
            "format": self.fmt,
            "categories": self.categories,
            "models": self.models,
            "shard_size": self.shard_size,
            "items": len(self.items),
            "digest": self.digest(),
        }


def work_path(dest: str | Path) -> Path:
    """DEST.work beside the export: on the export's file system, so the merge renames."""
    dest = Path(dest).expanduser().absolute()
    return dest.with_name(dest.name + WORK_SUFFIX)


def shard_file(work: Path, i: int) -> Path:
    return work / f"shard-{i:05d}.jsonl"


@dataclass
class WorkFolder:
    path: Path
    job: MaskJob
    restarted: bool = False  # a job.json for another job was found and its shards dropped
    written: list[int] = field(default_factory=list)

    @classmethod
    def open(cls, path: Path, job: MaskJob) -> WorkFolder:
        """The folder for job: reused when it holds this job, else made (or emptied) for it."""
        folder = cls(Path(path), job)
        side = folder.path / JOB
        header = job.header()
        if side.is_file():
            try:
                found = json.loads(side.read_text())
            except (OSError, ValueError):
                found = None
            if found == header:
                return folder
            folder.restarted = True
            shutil.rmtree(folder.path)
        elif folder.path.exists() and (not folder.path.is_dir() or any(folder.path.iterdir())):
            raise LabelExportError(
                f"{folder.path}: exists and is not a wherein work folder (no {JOB}); "
                "move it away, the export keeps its work there"
            )
        folder.path.mkdir(parents=True, exist_ok=True)
        write_atomic(side, json.dumps(header, indent=2).encode())
        return folder

    def done(self) -> list[int]:
        return [i for i in range(self.job.shards) if shard_file(self.path, i).is_file()]

    def pending(self) -> list[int]:
        return [i for i in range(self.job.shards) if not shard_file(self.path, i).is_file()]

    def write(self, i: int, outcomes: Sequence[Outcome]) -> None:
        """Shard i, whole or not at all; outcomes in any order (written in job order)."""
        want = [it.id for it in self.job.shard(i)]
        by_id = {o.id: o for o in outcomes}
        if sorted(by_id) != sorted(want) or len(outcomes) != len(want):
            raise LabelExportError(f"shard {i}: got results for other images than planned")
        lines = [json.dumps(_to_json(by_id[k]), ensure_ascii=True) for k in want]
        write_atomic(shard_file(self.path, i), ("\n".join(lines) + "\n").encode())
        self.written.append(i)

    def outcomes(self, keep_pieces: bool = True) -> Iterator[Outcome]:
        """Every image's outcome in job order (shard by shard: memory is one shard's pieces)."""
        for i in range(self.job.shards):
            path = shard_file(self.path, i)
            try:
                text = path.read_text()
            except FileNotFoundError:
                raise LabelExportError(f"{path}: shard missing; run again to finish it") from None
            for line in text.splitlines():
                yield _from_json(json.loads(line), keep_pieces)

    def merge(self, writer_add: Callable[[Piece], None]) -> int:
        """Hand every piece to the export writer in job order; returns how many."""
        n = 0
        for o in self.outcomes():
            if o.piece is not None:
                writer_add(o.piece)
                n += 1
        return n

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _to_json(o: Outcome) -> dict[str, Any]:
    piece = None
    if o.piece is not None:
        piece = {
            "record": o.piece.record,
            "files": {k: base64.b64encode(v).decode("ascii") for k, v in o.piece.files.items()},
            "links": o.piece.links,
        }
    return {"id": o.id, "values": o.values, "error": o.error, "piece": piece}


def _from_json(d: dict[str, Any], keep_pieces: bool) -> Outcome:
    piece = None
    p = d["piece"]
    if p is not None and keep_pieces:
        files = {k: base64.b64decode(v) for k, v in p["files"].items()}
        piece = Piece(d["id"], p["record"], files, p["links"])
    return Outcome(d["id"], d["values"], piece, d["error"])
