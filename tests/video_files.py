"""Real videos for tests, written with PyAV (H.264 by default): small (96x64) coloured
segments at known times, so a sampled frame's time and colour can be checked against what
was drawn. Shared by the media-layer tests and the indexing tests."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np

RED, GREEN, BLUE = (220, 20, 20), (20, 200, 20), (20, 20, 220)
W, H = 96, 64


# What an iPhone writes in a .mov: local time with its offset, and an ISO 6709 position.
PHONE = {
    "com.apple.quicktime.creationdate": "2024-06-01T12:20:30+0200",
    "com.apple.quicktime.location.ISO6709": "+48.8584+002.2945+035.000/",
}


def solid(rgb) -> np.ndarray:
    return np.full((H, W, 3), rgb, np.uint8)


def write_video(
    path: Path,
    colour_at,  # seconds -> [H, W, 3] uint8
    seconds: float = 8.0,
    fps: int = 10,
    gop: int = 1000,
    codec: str = "libx264",
    pix_fmt: str = "yuv420p",
    pts_ms: list[int] | None = None,
    rotation: int = 0,
    metadata: dict[str, str] | None = None,
    fmt: str | None = None,
) -> Path:
    """A video whose frame at t shows colour_at(t); pts_ms gives a variable frame rate."""
    path.parent.mkdir(parents=True, exist_ok=True)
    options = {"movflags": "use_metadata_tags"} if path.suffix in (".mp4", ".mov") else {}
    with av.open(str(path), "w", format=fmt, options=options) as out:
        out.metadata.update(metadata or {})
        stream = out.add_stream(codec, rate=fps)
        stream.width, stream.height, stream.pix_fmt = W, H, pix_fmt
        stream.codec_context.gop_size = gop
        # Keyframes only where gop puts them: no extra ones at the test's colour changes.
        stream.codec_context.options = {"sc_threshold": "0"} if codec == "libx264" else {}
        if rotation:
            stream.set_display_rotation(rotation)
        if pts_ms is not None:
            stream.codec_context.time_base = Fraction(1, 1000)
            stamps = [(p, p / 1000) for p in pts_ms]
        else:
            stamps = [(i, i / fps) for i in range(round(seconds * fps))]
        for pts, t in stamps:
            frame = av.VideoFrame.from_ndarray(colour_at(t), format="rgb24")
            frame.pts = pts
            if pix_fmt != "yuv420p":
                frame = frame.reformat(format=pix_fmt)
                frame.pts = pts
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def segments(t: float) -> np.ndarray:  # red 0-4 s, blue 4-8 s, green 8-12 s
    return solid((RED, BLUE, GREEN)[min(int(t // 4), 2)])


def write_audio(path: Path, seconds: float = 1.0) -> Path:
    """An mp4 that holds sound only (a voice memo)."""
    with av.open(str(path), "w") as out:
        stream = out.add_stream("aac", rate=16000)
        for i in range(round(seconds * 16000 / 1024)):
            frame = av.AudioFrame.from_ndarray(
                np.zeros((1, 1024), np.float32), format="fltp", layout="mono"
            )
            frame.sample_rate, frame.pts = 16000, i * 1024
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path
