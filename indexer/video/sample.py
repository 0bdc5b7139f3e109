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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import av
import numpy as np
from PIL import Image

from wherein.indexer.video.probe import VideoError, _reason, duration_of, open_video, time_base

if TYPE_CHECKING:
    from av.video.frame import VideoFrame
    from av.video.stream import VideoStream

EVERY = 2.0  # seconds between samples at most
MAX_FRAMES = 600  # per video; a longer video is sampled more sparsely, over its whole length
LONG_SIDE = 448  # twice the 224-px tower's input: the 352-px mask input still resizes down
SCENE_CUT = 0.12  # mean absolute difference of 16x16 thumbnails (0..1) that counts as a cut
SCENE_GAP = 0.25  # seconds: flicker and flashes must not flood the samples
_SIG = 16
_EPS = 1e-3  # seconds: pts are exact rationals, but their float times are not


@dataclass
class Frame:
    time: float  # seconds from the start of the video stream
    array: np.ndarray  # [H, W, 3] uint8 RGB, as displayed
    reason: str  # "first", "interval" or "scene"

    def image(self) -> Image.Image:
        return Image.fromarray(self.array, "RGB")


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


class Schedule:
    """Which decoded frames become samples, told one frame at a time (every timed kind's
    sampler: the same rules for a video's frames and an animation's).

    Without a grid a sample is due `every` seconds after the last one; on a long video's
    grid, at slot k * grid. The sample for a due time is the latest frame not after it: that
    frame is held (`pending`) until the next one shows it was the last, since the next
    frame's time is known only when it arrives (variable frame rates, skipped non-keyframes).
    A scene cut takes a sample at once (on a grid only when a slot is less than half a slot
    away, so cuts never add to the count).
    """

    def __init__(self, every: float, grid: float, max_frames: int) -> None:
        self.every, self.grid, self.max_frames = every, grid, max_frames
        self.taken, self.due, self.last = 0, 0.0, -np.inf
        self.pending: tuple[float, Any] | None = None

    @property
    def full(self) -> bool:
        return self.taken >= self.max_frames

    def offer(self, t: float, item: Any, scene: bool) -> list[tuple[float, Any, str]]:
        picks = []
        if self.taken and t > self.due + _EPS and self.pending is not None:
            picks.append(self._take(*self.pending, "interval"))
            if self.full:
                return picks
        if not self.taken:
            picks.append(self._take(t, item, "first"))
        elif t >= self.due - _EPS:  # at the due time, or no frame came nearer to it
            picks.append(self._take(t, item, "interval"))
        elif (
            scene and t - self.last >= SCENE_GAP and (not self.grid or self.due - t < self.grid / 2)
        ):
            picks.append(self._take(t, item, "scene"))
        else:
            self.pending = (t, item)
        return picks

    def _take(self, t: float, item: Any, reason: str) -> tuple[float, Any, str]:
        self.taken, self.last, self.pending = self.taken + 1, t, None
        self.due = self.taken * self.grid if self.grid else t + self.every
        return t, item, reason


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


def image_signature(image: Image.Image) -> np.ndarray:
    """What scene_diff compares, of a decoded RGB image (an animation's frame)."""
    small = image.convert("RGB").resize((_SIG, _SIG), Image.Resampling.BOX)
    return np.asarray(small, dtype=np.int16)


def scene_diff(a: np.ndarray, b: np.ndarray) -> float:
    """How far apart two frames' signatures are (0..1); above SCENE_CUT is a cut."""
    return float(np.abs(a - b).mean()) / 255.0
