"""Write routed files to the catalog: one SQLite transaction per batch.

A batch lands whole or not at all (crash, Ctrl-C, error), and an image's row
and its vector are always written together. The vector generation is bumped
whenever a row with a vector appears or disappears, so FAISS is brought in line
at the end of the run or on the next open.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from wherein.indexer.imaging import Prepared
from wherein.indexer.ingest.pipeline import Step
from wherein.indexer.ingest.plan import Decision, Kind, Plan, Work
from wherein.indexer.ingest.read import Unsettled
from wherein.indexer.ingest.videos import FrameChunk, VideoJob
from wherein.indexer.store.catalog import Catalog
from wherein.indexer.video.frames import VideoInfo


@dataclass(frozen=True)
class Routed:
    """One read file and what the plan decided for it; job: the video whose frames follow
    as FrameChunk steps (its row is written here, its frames with them)."""

    work: Work
    read: Prepared | Unsettled
    decision: Decision
    job: VideoJob | None = None


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def record(path: str, p: Prepared, model_id: str, now: str) -> dict:
    return {
        "path": path,
        "size": p.size,
        "mtime_ns": p.mtime_ns,
        "sha256": p.sha256,
        "width": p.width,
        "height": p.height,
        "format": p.format or Path(path).suffix.lower().lstrip("."),
        "indexed_at": now,
        "model_id": model_id,
        "ctime_ns": _identity(p)[0],
        "inode": _identity(p)[1],
        "kind": p.kind,
    }


def _identity(p: Prepared) -> tuple[int | None, int | None]:
    """(ctime_ns, inode) of the file state read, None where not known."""
    return p.ctime_ns or None, p.inode or None


def photo_row(file_id: int, p: Prepared) -> dict | None:
    """The photos row for an image committed from p, when its EXIF was read with its bytes."""
    if p.photo is None:
        return None
    return {"image_id": file_id, "size": p.size, "mtime_ns": p.mtime_ns, **p.photo.as_dict()}


def video_row(info: VideoInfo) -> dict:
    """The videos columns a probe gives (frames, complete and damage come with the frames)."""
    return {
        "duration": info.duration,
        "fps": info.fps,
        "codec": info.codec,
        "rotation": info.rotation,
    }


def located(p: Prepared, vector):
    """insert_image's (vector, items): a photo's one vector, or each item's (several)."""
    if vector is None or vector.ndim == 1:
        return vector, None
    items = [(loc.kind, loc.t, loc.box, v) for (loc, _), v in zip(p.items, vector, strict=True)]
    return None, items


def commit_batch(cat: Catalog, all_steps: Sequence[Step], model_id: str) -> int:
    """Returns how many photo-metadata rows it stored with the images. all_steps: Routed
    files and FrameChunk frames of videos whose rows this or an earlier batch wrote."""
    steps: list[Step[Routed]] = [s for s in all_steps if isinstance(s.item, Routed)]
    # Donors are never written by this run before the end (plan.py), so reading
    # their vectors before the transaction is safe.
    copies = [s.item.decision for s in steps if s.item.decision.kind is Kind.COPY]
    donors = [d.named_row for d in copies if d.row is not None]
    donor_vector = cat.file_vectors(donors) if donors else {}
    donor_frames = cat.video_items(donors) if donors else {}  # a copy of a video
    twin_vector = _twin_vectors(cat, steps) if len(donors) < len(copies) else {}
    now = now_iso()
    photos: list[dict] = []
    with cat.transaction():
        changed = False
        for s in all_steps:
            if isinstance(s.item, FrameChunk):
                _commit_frames(cat, s.item, s.vector, now)
                changed = True
                continue
            assert isinstance(s.item, Routed)
            work, p, d = s.item.work, s.item.read, s.item.decision
            if d.kind is Kind.LATER or isinstance(p, Unsettled):
                continue
            path, old = work.found.path, work.old
            if old is not None and d.kind not in (Kind.TOUCH, Kind.RESUME):  # row replaced
                cat.delete_images([old.id])
                changed = True
            file_id: int | None = None
            if d.kind in (Kind.TOUCH, Kind.RESUME):
                cat.touch(file_id := d.named_row, p.size, p.mtime_ns, *_identity(p))
            elif d.kind is Kind.MOVE:
                cat.relink(file_id := d.named_row, path, p.size, p.mtime_ns, *_identity(p))
            elif d.kind is Kind.SKIP:
                cat.record_skip(path, d.reason, p.size, p.mtime_ns, now)
            elif p.video is not None and d.kind is Kind.EMBED:
                file_id = cat.insert_video(record(path, p, model_id, now), video_row(p.video))
                assert s.item.job is not None
                s.item.job.file_id = file_id
                changed = True
            elif p.video is not None and d.row in donor_frames:
                file_id = cat.insert_image(
                    record(path, p, model_id, now), None, donor_frames[d.row]
                )
                cat.copy_video(d.named_row, file_id)
                changed = True
            else:
                if d.kind is Kind.EMBED:
                    vector = s.vector
                elif d.row is None:
                    vector = twin_vector[p.sha256]
                else:
                    vector = donor_vector[d.row]
                file_id = cat.insert_image(record(path, p, model_id, now), *located(p, vector))
                if d.kind is Kind.EMBED and p.tiling is not None and p.regions is not None:
                    cat.mark_tiled(file_id, p.tiling, p.regions)
                changed = True
            row = photo_row(file_id, p) if file_id is not None else None
            if row is not None:
                photos.append(row)
        if photos:
            cat.store_photos(photos)
        if changed:
            cat.bump_generation()
    return len(photos)


def _commit_frames(cat: Catalog, chunk: FrameChunk, vectors, now: str) -> None:
    job = chunk.job
    if chunk.error is not None:  # not one frame decoded: a skip, as a broken photo is
        cat.record_skip(job.path, chunk.error, job.size, job.mtime_ns, now)
        return
    assert job.file_id is not None, "a video's frames are committed after its row"
    frames = list(zip(chunk.times, vectors if vectors is not None else [], strict=True))
    cat.add_frames(job.file_id, frames, done=chunk.last, damage=chunk.damage)


def _twin_vectors(cat: Catalog, steps: Sequence[Step[Routed]]) -> dict:
    """sha256 -> vector for the copies of files embedded earlier in this run: from this
    batch's embedded steps, else from the row an earlier batch of the run committed."""
    out = {}
    for s in steps:
        d, p = s.item.decision, s.item.read
        if d.kind is Kind.EMBED and isinstance(p, Prepared):
            out[p.sha256] = s.vector
    for s in steps:
        d, p = s.item.decision, s.item.read
        if d.kind is not Kind.COPY or d.row is not None or not isinstance(p, Prepared):
            continue
        if p.sha256 not in out:  # its original went in with an earlier batch
            first = cat.embedded_with_hash(p.sha256)[0][0]
            out[p.sha256] = cat.file_vectors([first])[first]
    return out


def finish(cat: Catalog, plan: Plan, claimed: set[int]) -> int:
    """After every file is committed: delete the rows whose file is gone (not moved). Returns the count."""
    dead = plan.deleted(claimed)
    if not dead and not plan.forget_skips:
        return 0
    with cat.transaction():
        n = cat.delete_images(dead) if dead else 0
        cat.forget_skips(plan.forget_skips)
        if n:
            cat.bump_generation()
    return n
