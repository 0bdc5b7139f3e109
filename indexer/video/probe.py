"""What a video is: duration, rate, displayed size, codec, rotation, when and where.

Read by PyAV from the container's header, plus one decoded frame: it proves the video
stream decodes and carries the display matrix (rotation) as FFmpeg exports it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

import av

from wherein.indexer.regular import NotRegular, open_regular_file
from wherein.indexer.video.detect import HEAD_BYTES, sniff
from wherein.indexer.video.frames import VideoError, VideoInfo

if TYPE_CHECKING:
    from av.container import InputContainer
    from av.video.stream import VideoStream


@contextmanager
def open_video(path: str | Path) -> Iterator[tuple[InputContainer, VideoStream]]:
    """The container and its first video stream (both closed on leaving), or a VideoError
    saying why not."""
    with _open_video(path) as (container, stream, _):
        yield container, stream


@contextmanager
def _open_video(path: str | Path) -> Iterator[tuple[InputContainer, VideoStream, str]]:
    """open_video's, and the container's name by content: what its first bytes announce
    (detect.sniff: "mp4", "mov", "webm"), else FFmpeg's demuxer's first name."""
    p = Path(path)
    try:
        # Opened here, not by FFmpeg from the path: the descriptor checked is the one read,
        # so a FIFO or a /dev/zero link swapped in after any earlier look is never read.
        file = open_regular_file(p)
    except NotRegular as exc:
        raise VideoError(str(exc.strerror)) from None
    except OSError as exc:
        raise VideoError(f"unreadable video ({_reason(exc)})") from None
    with file:
        if os.fstat(file.fileno()).st_size == 0:
            raise VideoError("empty file")
        file.name = os.fspath(p)  # FFmpeg's format hint, and its messages
        head = os.pread(file.fileno(), HEAD_BYTES, 0)
        try:
            container = av.open(file, mode="r")
        except (av.FFmpegError, OSError, ValueError) as exc:
            # FFmpeg's reason in a word ("moov atom not found" is only logged; the error
            # says "Invalid data found when processing input").
            raise VideoError(f"unreadable video ({_reason(exc)})") from None
        with container:
            if not container.streams.video:
                kind = "audio only" if container.streams.audio else "no streams"
                raise VideoError(f"no video stream ({kind})")
            name = sniff(head) or container.format.name.split(",")[0]
            yield container, container.streams.video[0], name


def _reason(exc: BaseException) -> str:
    msg = getattr(exc, "strerror", None) or str(exc)
    return str(msg).strip().rstrip(".") or type(exc).__name__


def probe(path: str | Path) -> VideoInfo:
    with _open_video(path) as (container, stream, container_name):
        try:
            first = next(container.decode(stream), None)
        except (av.FFmpegError, OSError, ValueError) as exc:
            raise VideoError(f"no decodable video frame ({_reason(exc)})") from None
        if first is None:
            raise VideoError("no decodable video frame")
        rotation = int(round(first.rotation)) % 360
        width, height = first.width, first.height
        if rotation in (90, 270):
            width, height = height, width
        meta = {**stream.metadata, **container.metadata}  # the container's tags win
        taken, offset = _taken(meta)
        lat, lon = _location(meta)
        return VideoInfo(
            duration=duration_of(container, stream),
            fps=float(stream.average_rate or stream.guessed_rate or 0.0),
            width=width,
            height=height,
            codec=stream.codec_context.name,
            rotation=rotation,
            taken=taken,
            taken_offset=offset,
            lat=lat,
            lon=lon,
            container=container_name,
        )


def time_base(stream: VideoStream) -> Fraction:
    # Demuxers always set one; None is only the type's default before opening.
    return stream.time_base or Fraction(1, 90000)


def duration_of(container: InputContainer, stream: VideoStream) -> float:
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    if container.duration is not None:
        return container.duration / av.time_base
    return 0.0


# Apple's creationdate keeps the local wall clock and its offset; creation_time is UTC.
_LOCAL = re.compile(r"^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})(?:\.\d+)?([+-]\d{2}):?(\d{2})$")


def _taken(meta: dict[str, Any]) -> tuple[str | None, str | None]:
    local = str(meta.get("com.apple.quicktime.creationdate", "")).strip()
    m = _LOCAL.match(local)
    if m:
        return f"{m.group(1)} {m.group(2)}", f"{m.group(3)}:{m.group(4)}"
    created = str(meta.get("creation_time", "")).strip()
    try:
        when = datetime.fromisoformat(created.replace("Z", "+00:00"))
    except ValueError:
        return None, None
    if when.tzinfo is not None:
        when = when.astimezone(UTC)
    if when.year < 1971:  # 1970/1904 epochs: cameras whose clock was never set
        return None, None
    return when.strftime("%Y-%m-%d %H:%M:%S"), "+00:00"


def _location(meta: dict[str, Any]) -> tuple[float | None, float | None]:
    for key in ("com.apple.quicktime.location.ISO6709", "location", "location-eng"):
        if key in meta:
            found = parse_iso6709(str(meta[key]))
            if found is not None:
                return found
    return None, None


_ISO6709 = re.compile(r"^\s*([+-]\d+(?:\.\d*)?)([+-]\d+(?:\.\d*)?)")


def parse_iso6709(text: str) -> tuple[float, float] | None:
    """(lat, lon) in degrees from an ISO 6709 string ("+48.8584+002.2945+035.0/"), or None.

    The integer digits say the form: ±DD[.d] / ±DDDMM[.d] / ±DDMMSS[.d] for latitude
    (2/4/6 digits), one more for longitude.
    """
    m = _ISO6709.match(text)
    if not m:
        return None
    lat, lon = _angle(m.group(1), 2), _angle(m.group(2), 3)
    if lat is None or lon is None or not (-90 <= lat <= 90 and -180 <= lon <= 180):
        return None
    if lat == 0 and lon == 0:  # what receivers without a fix write
        return None
    return round(lat, 7), round(lon, 7)


def _angle(text: str, deg_digits: int) -> float | None:
    sign = -1.0 if text[0] == "-" else 1.0
    whole, _, frac = text[1:].partition(".")
    n = len(whole) - deg_digits
    if n not in (0, 2, 4):
        return None
    value = float(whole[:deg_digits])
    if n >= 2:
        value += float(whole[deg_digits : deg_digits + 2] + ("." + frac if n == 2 else "")) / 60
    if n == 4:
        value += float(whole[deg_digits + 2 :] + "." + (frac or "0")) / 3600
    if n == 0 and frac:
        value += float("0." + frac)
    return sign * value
