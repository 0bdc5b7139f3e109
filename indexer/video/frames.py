"""What every timed kind's sampling shares, without PyAV: the errors and facts of a file
of frames, a sampled frame, the schedule that picks samples, and scene-cut signatures.

Videos (probe.py, sample.py: PyAV) and animations (kinds/animation.py: Pillow) both use
these. They live apart from PyAV's modules so that naming them (the media kinds' registry,
every walk, the web app) never loads FFmpeg's libraries into a process that reads no video.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image

EVERY = 2.0  # seconds between samples at most
MAX_FRAMES = 600  # per video; a longer video is sampled more sparsely, over its whole length
LONG_SIDE = 448  # twice the 224-px tower's input: the 352-px mask input still resizes down
SCENE_CUT = 0.12  # mean absolute difference of 16x16 thumbnails (0..1) that counts as a cut
SCENE_GAP = 0.25  # seconds: flicker and flashes must not flood the samples
_SIG = 16
_EPS = 1e-3  # seconds: pts are exact rationals, but their float times are not


class VideoError(Exception):
    """The file is not a video wherein can read; the message is the recorded reason."""


@dataclass(frozen=True)
class VideoInfo:
    duration: float  # seconds; 0.0 when the container does not say
    fps: float  # average frame rate; 0.0 when unknown
    width: int  # as a player shows it (rotation applied)
    height: int
    codec: str
    rotation: int  # degrees counter-clockwise a player turns the stored frames (0/90/180/270)
    taken: str | None = None  # "YYYY-MM-DD HH:MM:SS" as photometa's taken
    taken_offset: str | None = None  # "+HH:MM"; "+00:00" for the container's UTC creation_time
    lat: float | None = None
    lon: float | None = None
    container: str = ""  # by content: "mp4", "mov", "webm" (an animation's: "gif", "png")


@dataclass
class Frame:
    time: float  # seconds from the start of the video stream
    array: np.ndarray  # [H, W, 3] uint8 RGB, as displayed
    reason: str  # "first", "interval" or "scene"

    def image(self) -> Image.Image:
        return Image.fromarray(self.array, "RGB")


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


def image_signature(image: Image.Image) -> np.ndarray:
    """What scene_diff compares, of a decoded RGB image (an animation's frame)."""
    small = image.convert("RGB").resize((_SIG, _SIG), Image.Resampling.BOX)
    return np.asarray(small, dtype=np.int16)


def scene_diff(a: np.ndarray, b: np.ndarray) -> float:
    """How far apart two frames' signatures are (0..1); above SCENE_CUT is a cut."""
    return float(np.abs(a - b).mean()) / 255.0
