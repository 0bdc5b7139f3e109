"""A video's frames through the ingest pipeline: sampled in chunks on the decode pool.

A video's file row is committed first (``videos.complete = 0``); its frames follow as
chunk steps (``FrameChunk``), each chunk decoded by one task on the shared decode pool
(never a whole video: memory holds a chunk or two per video, and photo loads queue between
the chunks, so a long video never stalls the photos behind it). The pipeline commits the
chunks with the other steps; the last chunk sets ``complete = 1`` and the damage, if any.

Sampling is deterministic (the same file and settings give the same frame times), so a run
stopped mid-video loses at most the chunks it had not committed: the next run samples the
video again and embeds only the frames whose time is not stored yet (``VideoJob.have``).
"""

from __future__ import annotations

import contextlib
import io
from collections import deque
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

import numpy as np

from wherein.indexer.imaging import model_input
from wherein.indexer.ingest.pipeline import Step
from wherein.indexer.kinds.base import FrameSource, MediaKind
from wherein.indexer.video.frames import EVERY, MAX_FRAMES, Frame, VideoError
from wherein.schemas.models import ImageInput

CHUNK = 16  # frames per decode task: ~10 MB of 224-px model input
MAX_ACTIVE = 2  # videos decoding at once (each holds a chunk or two)


def time_key(t: float) -> float:
    """A frame time as stored and compared: pts times are exact, their float sums are not."""
    return round(t, 6)


@dataclass(frozen=True)
class FrameSettings:
    every: float = EVERY  # --frame-every
    max_frames: int = MAX_FRAMES  # --max-frames
    chunk: int = CHUNK


@dataclass
class VideoJob:
    """One file of a timed kind (a video) being sampled: its file (row id set once
    committed), its kind (which samples it) and the frame times already stored (a resumed
    one)."""

    path: str
    size: int
    mtime_ns: int
    kind: MediaKind
    file_id: int | None = None
    data: bytes | None = None  # its bytes, sampled in memory where there is no file (a tar member)
    have: set[float] = field(default_factory=set)
    frames: Iterator[Frame] | None = None
    sampling: FrameSource | None = None
    embedded: int = 0  # frames this run


@dataclass
class FrameChunk:
    """Some frames of one video (times, in order); last: the video's sampling ended here
    (damage: why the rest of the stream was skipped; error: it gave no frame at all)."""

    job: VideoJob
    times: list[float]
    last: bool = False
    damage: str | None = None
    error: str | None = None


def _next_chunk(job: VideoJob, spec: ImageInput, size: int) -> tuple[FrameChunk, list]:
    """Decode up to `size` new frames of job (in a decode thread)."""
    assert job.frames is not None and job.sampling is not None
    times: list[float] = []
    pixels: list[np.ndarray] = []
    try:
        for frame in job.frames:
            t = time_key(frame.time)
            if t in job.have:  # committed by an earlier run
                continue
            times.append(t)
            pixels.append(model_input(frame.image(), spec))
            if len(times) >= size:
                return FrameChunk(job, times), pixels
    except VideoError as exc:
        return FrameChunk(job, times, last=True, error=str(exc)), pixels
    except Exception as exc:  # noqa: BLE001 - one broken decoder must never stop a run
        why = f"decoder failed ({type(exc).__name__}: {exc}); the rest is skipped"
        if not (times or job.have or job.embedded):
            return FrameChunk(job, times, last=True, error=why), pixels
        return FrameChunk(job, times, last=True, damage=why), pixels
    return FrameChunk(job, times, last=True, damage=job.sampling.damage), pixels


def begin(job: VideoJob, settings: FrameSettings) -> None:
    """Start sampling job's file as its kind and settings say (its frames are decoded as they
    are read)."""
    source = job.path if job.data is None else io.BytesIO(job.data)
    job.sampling = job.kind.sample(source, settings.every, settings.max_frames)
    job.frames = iter(job.sampling)


def chunks(
    job: VideoJob, spec: ImageInput, settings: FrameSettings
) -> Iterator[tuple[FrameChunk, list[np.ndarray]]]:
    """A whole video's frames, chunk by chunk, in this thread (one task per video:
    `wherein embed --engine ray`): the same frames and pixels as the FrameFeed gives."""
    begin(job, settings)
    try:
        while True:
            chunk, pixels = _next_chunk(job, spec, settings.chunk)
            job.embedded += len(chunk.times)
            yield chunk, pixels
            if chunk.last:
                return
    finally:
        _close(job)


class FrameFeed:
    """The pipeline's Side for videos: one chunk task in flight per active video."""

    def __init__(
        self,
        pool: ThreadPoolExecutor,
        spec: ImageInput,
        settings: FrameSettings,
        max_active: int = MAX_ACTIVE,
    ) -> None:
        self.pool, self.spec, self.settings, self.max_active = pool, spec, settings, max_active
        self.active: deque[tuple[VideoJob, Future]] = deque()

    def start(self, job: VideoJob) -> None:
        begin(job, self.settings)
        self.active.append((job, self._submit(job)))

    def _submit(self, job: VideoJob) -> Future:
        return self.pool.submit(_next_chunk, job, self.spec, self.settings.chunk)

    @property
    def busy(self) -> bool:
        return bool(self.active)

    @property
    def saturated(self) -> bool:
        return len(self.active) > self.max_active

    def ready(self, block: bool) -> list[Step]:  # Step[FrameChunk], in the run's Step type
        if block and self.active:
            wait([f for _, f in self.active], return_when=FIRST_COMPLETED)
        out: list[Step] = []
        still: deque[tuple[VideoJob, Future]] = deque()
        for job, fut in self.active:
            if not fut.done():
                still.append((job, fut))
                continue
            chunk, pixels = fut.result()
            out.append(Step(chunk, pixels or None))
            if not chunk.last:
                still.append((job, self._submit(job)))
        self.active = still
        return out

    def close(self) -> None:
        """Stop: the decoders of videos left unfinished are closed (their files too)."""
        for job, fut in self.active:
            fut.cancel()
            if fut.done() or fut.cancelled():
                _close(job)
        self.active.clear()


def _close(job: VideoJob) -> None:
    close = getattr(job.frames, "close", None)
    if close is not None:
        with contextlib.suppress(ValueError):  # still running in a thread: it ends with the pool
            close()
