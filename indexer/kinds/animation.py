"""Moving pictures: animated GIF, WebP and PNG (APNG), whose frames are items at times.

By content: a GIF, WebP or PNG whose container holds more than one frame (Pillow's
``is_animated``: a GIF's second image, a WebP's ANIM chunk, an APNG's acTL); a still one
is left to the photo kind, whatever its extension. Each frame shows for its own duration
(a GIF frame of 0 or 10 ms shows for 100 ms, as browsers do), so frame i's time is the sum
of the durations before it. Frames are sampled as a video's are (indexer/video/sample.py's
Schedule: at least every --frame-every seconds and at scene cuts, at most --max-frames,
over the whole length), and their hits fold into one per file with its moments.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import numpy as np
from PIL import Image, ImageSequence

from wherein.indexer.imaging import MAX_PIXELS, to_rgb
from wherein.indexer.kinds.base import FrameSource, MediaKind, Source
from wherein.indexer.regular import NotRegular, open_regular_file
from wherein.indexer.video.frames import (
    LONG_SIDE,
    SCENE_CUT,
    Frame,
    Schedule,
    VideoError,
    VideoInfo,
    image_signature,
    scene_diff,
)

if TYPE_CHECKING:
    from wherein.indexer.imaging import Locator

_MAGIC = (b"GIF87a", b"GIF89a", b"\x89PNG\r\n\x1a\n")
_SHORTEST = 0.02  # seconds: a frame shorter than this shows for _DEFAULT (browsers' rule)
_DEFAULT = 0.1


def _candidate(head: bytes) -> bool:
    return head.startswith(_MAGIC) or (head[:4] == b"RIFF" and head[8:12] == b"WEBP")


@contextmanager
def _opened(path: Source) -> Iterator[Image.Image]:
    """The file opened by Pillow; any failure is a VideoError with the reason."""
    try:
        # Pillow reads from the descriptor checked, never from the path again (a FIFO swapped
        # in would block it); bytes in memory (a tar member) as they are.
        with _file(path) as file, Image.open(file) as img:
            if img.width * img.height > MAX_PIXELS:
                raise VideoError(f"decompression bomb: {img.width}x{img.height} pixels")
            yield img
    except VideoError:
        raise
    except NotRegular as exc:
        raise VideoError(str(exc.strerror)) from None
    except Exception as exc:  # noqa: BLE001 - decoder plugins raise many types
        raise VideoError(f"unreadable animation ({type(exc).__name__}: {exc})") from None


def _file(path: Source) -> AbstractContextManager[BinaryIO]:
    if isinstance(path, str | Path):
        return open_regular_file(path)
    return nullcontext(path)


def _frames(img: Image.Image) -> Iterator[tuple[float, float, Image.Image]]:
    """(start, duration, frame as RGB) of each frame, in order."""
    t = 0.0
    for frame in ImageSequence.Iterator(img):
        rgb = to_rgb(frame.convert("RGBA"))  # loads it: a WebP frame's duration comes then
        d = _duration(frame)
        yield t, d, rgb
        t += d


def _duration(frame: Image.Image) -> float:
    d = float(frame.info.get("duration") or 0) / 1000.0
    return d if d >= _SHORTEST else _DEFAULT


def _timing(img: Image.Image) -> list[float]:
    """Each frame's duration in seconds (reads headers, decodes what the format needs)."""
    out = []
    for frame in ImageSequence.Iterator(img):
        frame.load()
        out.append(_duration(frame))
    return out


class _Sampling:
    """An animation's sampled frames (see base.FrameSource), reduced to LONG_SIDE."""

    def __init__(self, path: Source, every: float, max_frames: int) -> None:
        self.path, self.every, self.max_frames = path, every, max_frames
        self.damage: str | None = None

    def __iter__(self) -> Iterator[Frame]:
        with _opened(self.path) as img:
            duration = sum(_timing(img))
            grid = duration / self.max_frames if duration / self.every > self.max_frames else 0.0
            schedule = Schedule(max(self.every, grid), grid, self.max_frames)
            last = None
            t = 0.0
            try:
                for t, _, rgb in _frames(img):
                    sig = image_signature(rgb)
                    scene = last is not None and scene_diff(sig, last) > SCENE_CUT
                    last = sig
                    for when, picked, reason in schedule.offer(t, rgb, scene):
                        yield Frame(when, _reduced(picked), reason)
                    if schedule.full:
                        return
            except VideoError:
                raise
            except Exception as exc:  # noqa: BLE001 - a broken frame ends the sampling
                if not schedule.taken:
                    raise VideoError(f"no decodable frame ({type(exc).__name__})") from None
                self.damage = f"corrupt frame after {t:.1f} s; the rest is skipped"


def _reduced(image: Image.Image) -> np.ndarray:
    scale = min(1.0, LONG_SIDE / max(image.size))
    if scale < 1.0:
        size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
        image = image.resize(size, Image.Resampling.BOX)
    return np.asarray(image, dtype=np.uint8)


class Animation(MediaKind):
    name = "animation"
    item = "frame"
    timed = True
    plays = False  # shown frame by frame: the page's images are the frame at a moment
    in_memory = True  # Pillow reads the bytes of a tar member as well as a file
    extensions = frozenset([".apng"])  # .gif/.webp/.png name photos until content says more

    def sniff(self, head: bytes, path: Source | None) -> bool:
        if path is None or not _candidate(head):
            return False
        try:
            with Image.open(path) as img:
                return bool(getattr(img, "is_animated", False))
        except Exception:  # noqa: BLE001 - not readable as one: the photo kind says why
            return False

    def probe(self, path: Source) -> VideoInfo:
        with _opened(path) as img:
            size, fmt = img.size, (img.format or "").lower()
            try:
                durations = _timing(img)
            except Exception as exc:  # noqa: BLE001
                raise VideoError(f"unreadable animation ({type(exc).__name__})") from None
        duration = sum(durations)
        codec = "apng" if fmt == "png" else fmt
        return VideoInfo(duration, len(durations) / duration, *size, codec, 0, container=fmt)

    def sample(self, path: Source, every: float, max_frames: int) -> FrameSource:
        return _Sampling(path, every, max_frames)

    def image_at(self, path: Source, at: Locator) -> Image.Image:
        t = at.t or 0.0
        shown: Image.Image | None = None
        end = 0.0
        with _opened(path) as img:
            for start, d, rgb in _frames(img):
                if start > t + 1e-6:
                    break
                shown, end = rgb, start + d
        if shown is None or t < 0 or t > end + 1e-6:
            raise VideoError(f"time {t:g} s is outside the animation (0 to {end:.1f} s)")
        if at.box is not None:
            x0, y0, x1, y1 = (round(v) for v in at.box)
            return shown.crop((x0, y0, x1, y1))
        return shown


KIND = Animation()
