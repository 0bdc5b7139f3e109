"""Frames from a video: at least every few seconds and at scene cuts, at reduced size.

Sampling decodes only what it needs. Where the keyframes lie closer together than
`every` (phones write one a second or so), the decoder skips every other frame
(``skip_frame = "NONKEY"``): a fraction of the work. Otherwise every frame is decoded
and the sampler picks. Frames come out one at a time (a generator: memory stays bounded
by one frame), as a player shows them (rotation applied), 8-bit RGB, with their time in
seconds from the stream's own timestamps (so variable frame rates are right).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import av
import numpy as np

from wherein.indexer.video.frames import (
    _EPS,
    _SIG,
    EVERY,
    LONG_SIDE,
    MAX_FRAMES,
    SCENE_CUT,
    Frame,
    Schedule,
    VideoError,
    scene_diff,
)
from wherein.indexer.video.probe import _reason, duration_of, open_video, time_base

if TYPE_CHECKING:
    from av.video.frame import VideoFrame
    from av.video.stream import VideoStream


class Sampling:
    """Iterate for the sampled frames; afterwards `damage` says why the rest of the video was
    skipped (None when the whole stream decoded), `decoded` counts the decoded frames,
    `packets` the packets given to the decoder, and `keyframes_only` says which way it decoded."""

    def __init__(
        self,
        path: str | Path,
        every: float = EVERY,
        max_frames: int = MAX_FRAMES,
        long_side: int = LONG_SIDE,
        scene_cut: float = SCENE_CUT,
    ) -> None:
        if every <= 0 or max_frames < 1:
            raise ValueError("every must be > 0 and max_frames >= 1")
        self.path, self.every, self.max_frames = Path(path), every, max_frames
        self.long_side, self.scene_cut = long_side, scene_cut
        self.damage: str | None = None
        self.decoded = 0
        self.packets = 0  # handed to the decoder
        self.keyframes_only = False
        self.duration = 0.0

    def __iter__(self) -> Iterator[Frame]:
        keys = keyframe_times(self.path)
        with open_video(self.path) as (container, stream):
            yield from self._run(container, stream, keys)

    def _run(self, container, stream: VideoStream, keys: list[float]) -> Iterator[Frame]:
        self.duration = duration = duration_of(container, stream)
        # A long video: the samples spread evenly over it (a grid of max_frames slots).
        grid = duration / self.max_frames if duration / self.every > self.max_frames else 0.0
        every = max(self.every, grid)
        gaps = np.diff(keys) if len(keys) > 1 else np.array([np.inf])
        self.keyframes_only = bool(gaps.max() <= every + _EPS)
        ctx = stream.codec_context
        if self.keyframes_only:
            ctx.skip_frame = "NONKEY"
        stream.thread_type = "AUTO"
        start = float(stream.start_time * time_base(stream)) if stream.start_time else 0.0
        fps = float(stream.average_rate or stream.guessed_rate or 30)
        schedule = Schedule(every, grid, self.max_frames)
        t, last_sig = 0.0, None
        try:
            for frame in self._decoded(container, stream):
                if frame.pts is None or frame.time is None:
                    continue
                if frame.is_corrupt:
                    self.damage = (
                        f"corrupt frame at {frame.time - start:.1f} s; the rest is skipped"
                    )
                    break
                self.decoded += 1
                t = frame.time - start
                sig = _signature(frame)
                scene = last_sig is not None and scene_diff(sig, last_sig) > self.scene_cut
                last_sig = sig
                for when, picked, reason in schedule.offer(t, frame, scene):
                    yield Frame(when, self._pixels(picked), reason)
                if schedule.full:
                    return
        except (av.FFmpegError, OSError, ValueError) as exc:
            if not schedule.taken:  # nothing to index: the file is a skip, as probe says
                raise VideoError(f"no decodable video frame ({_reason(exc)})") from None
            self.damage = f"corrupt stream after {t:.1f} s ({_reason(exc)}); the rest is skipped"
            return
        if not schedule.taken:
            raise VideoError(self.damage or "no decodable video frame")
        tail = float(gaps.max()) if self.keyframes_only else 1 / fps
        if self.damage is None and duration and t < duration - tail - max(1 / fps, 0.5):
            self.damage = f"stream ends at {t:.1f} s of {duration:.1f} s (truncated file?)"

    def _decoded(self, container, stream: VideoStream) -> Iterator[VideoFrame]:
        for packet in container.demux(stream):
            # The decoder would drop them (skip_frame) but still take them in, one by one.
            if self.keyframes_only and packet.size and not packet.is_keyframe:
                continue
            self.packets += 1
            yield from packet.decode()

    def _pixels(self, frame: VideoFrame) -> np.ndarray:
        w, h = display_size(frame)
        scale = min(1.0, self.long_side / max(w, h))
        return _rgb(frame, max(1, round(w * scale)), max(1, round(h * scale)))


def sample(path: str | Path, **kw) -> Sampling:
    """The frames to index from one video (see Sampling); raises VideoError on iteration when
    the file is no readable video."""
    return Sampling(path, **kw)


def keyframe_times(path: str | Path) -> list[float]:
    """Keyframe times (seconds, stream clock) from the container's index when it has every
    packet in it (mp4, mov), else from one demux pass (Matroska reads its cues lazily)."""
    with open_video(path) as (container, stream):
        entries = stream.index_entries
        tb = float(time_base(stream))
        if len(entries) > 1 and any(not e.is_keyframe for e in entries):
            return sorted(e.timestamp * tb for e in entries if e.is_keyframe)
        times = []
        try:
            for packet in container.demux(stream):
                if packet.is_keyframe and packet.pts is not None:
                    times.append(packet.pts * tb)
        except (av.FFmpegError, OSError, ValueError):
            pass  # the sampling pass meets the damage again and reports it
        return sorted(times)


def frame_at(path: str | Path, time: float) -> Frame:
    """The frame a player shows at `time` seconds, full size (for masks)."""
    with open_video(path) as (container, stream):
        duration = duration_of(container, stream)
        if time < 0 or (duration and time > duration):
            raise VideoError(f"time {time:g} s is outside the video (0 to {duration:.1f} s)")
        stream.thread_type = "AUTO"
        tb = time_base(stream)
        start = stream.start_time or 0
        offset = float(start * tb)
        container.seek(start + int(time / tb), stream=stream, backward=True)
        best: VideoFrame | None = None
        try:
            for frame in container.decode(stream):
                if frame.time is None:
                    continue
                if best is not None and frame.time - offset > time + _EPS:
                    break
                best = frame
        except (av.FFmpegError, OSError, ValueError) as exc:
            if best is None:
                raise VideoError(f"no decodable frame at {time:g} s ({_reason(exc)})") from None
        if best is None:
            raise VideoError(f"no decodable frame at {time:g} s")
        t = best.time - offset
        return Frame(t, _rgb(best, *display_size(best)), "time")


def display_size(frame: VideoFrame) -> tuple[int, int]:
    """(width, height) of the stored picture with its pixel aspect applied (not yet rotated)."""
    w, h = frame.width, frame.height
    sar = frame.sample_aspect_ratio if hasattr(frame, "sample_aspect_ratio") else None
    if sar and sar != 1:
        w = round(w * float(sar))
    return w, h


def _rgb(frame: VideoFrame, w: int, h: int) -> np.ndarray:
    """8-bit RGB at w x h (storage orientation), then turned as the display matrix says.

    swscale converts 10-bit and full-range sources to 8-bit RGB with the frame's own matrix.
    """
    arr = frame.reformat(width=w, height=h, format="rgb24", interpolation="AREA").to_ndarray()
    turns = int(round(frame.rotation / 90)) % 4  # counter-clockwise, as np.rot90 turns
    return np.ascontiguousarray(np.rot90(arr, turns)) if turns else arr


def _signature(frame: VideoFrame) -> np.ndarray:
    small = frame.reformat(width=_SIG, height=_SIG, format="rgb24", interpolation="AREA")
    return small.to_ndarray().astype(np.int16)
