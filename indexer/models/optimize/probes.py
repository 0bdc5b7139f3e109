"""Images of known content: coloured shapes on a plain background, stored as real files.

The self-test and the bundled verification sample both use them. Each probe is
drawn in viewing orientation (what a user sees) and stored the way cameras store
photos: some as JPEGs whose pixels lie rotated with an EXIF orientation tag, at
sizes from a thumbnail to a camera frame (so `Image.draft` and EXIF rotation are
exercised). The truth mask is the drawn shape in viewing orientation.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

from wherein.indexer.models.standins.palette import rgb255

BACKGROUND = (247, 247, 247)
# Wrong captions differ from the true one in colour only: a wiring test, and the
# stand-ins (which only know colours) must pass it too. White and black are left
# out: the background is near-white.
CHROMATIC = ("red", "green", "blue", "yellow", "orange", "purple")
# Pixels a viewer sees are the stored pixels after this transpose (PIL ImageOps.exif_transpose).
_VIEW = {
    1: None,
    3: Image.Transpose.ROTATE_180,
    6: Image.Transpose.ROTATE_270,
    8: Image.Transpose.ROTATE_90,
}
_STORE = {  # the inverse: what to store so that the viewer shows the drawn image
    1: None,
    3: Image.Transpose.ROTATE_180,
    6: Image.Transpose.ROTATE_90,
    8: Image.Transpose.ROTATE_270,
}


@dataclass(frozen=True)
class Probe:
    colour: str
    shape: str  # square | circle | triangle
    size: tuple[int, int]  # viewing (width, height)
    box: tuple[float, float, float, float]  # fractional, viewing orientation
    fmt: str = "JPEG"
    orientation: int = 1  # EXIF orientation of the stored file

    @property
    def caption(self) -> str:
        return caption(self.colour, self.shape)

    @property
    def name(self) -> str:
        rot = f", EXIF {self.orientation}" if self.orientation != 1 else ""
        return f"{self.caption} ({self.size[0]}x{self.size[1]} {self.fmt}{rot})"

    def wrong_captions(self) -> list[str]:
        return [caption(c, self.shape) for c in CHROMATIC if c != self.colour]

    def draw(self) -> Image.Image:
        """The image a viewer sees."""
        return draw(self.colour, self.shape, self.size, self.box)

    def truth(self) -> np.ndarray:
        """bool [H, W]: the drawn shape, viewing orientation."""
        mask = Image.new("L", self.size, 0)
        _paint(ImageDraw.Draw(mask), self.shape, self.size, self.box, 255)
        return np.asarray(mask) > 127

    def file_bytes(self) -> bytes:
        """The stored file: pixels turned so that the EXIF tag turns them back."""
        img = self.draw()
        turn = _STORE[self.orientation]
        if turn is not None:
            img = img.transpose(turn)
        buf = io.BytesIO()
        kwargs: dict = {"quality": 92} if self.fmt == "JPEG" else {}
        if self.fmt == "WEBP":
            kwargs = {"lossless": True}
        if self.orientation != 1:
            exif = Image.Exif()
            exif[0x0112] = self.orientation
            kwargs["exif"] = exif.tobytes()
        img.save(buf, format=self.fmt, **kwargs)
        return buf.getvalue()


def caption(colour: str, shape: str) -> str:
    return f"{'an' if colour[0] in 'aeiou' else 'a'} {colour} {shape}"


def _paint(d: ImageDraw.ImageDraw, shape: str, size, box, fill) -> None:
    w, h = size
    x0, y0, x1, y1 = box[0] * w, box[1] * h, box[2] * w, box[3] * h
    if shape == "circle":
        d.ellipse((x0, y0, x1, y1), fill=fill)
    elif shape == "square":
        d.rectangle((x0, y0, x1, y1), fill=fill)
    elif shape == "triangle":
        d.polygon([((x0 + x1) / 2, y0), (x1, y1), (x0, y1)], fill=fill)
    else:
        raise ValueError(shape)


def draw(colour: str, shape: str, size: tuple[int, int], box) -> Image.Image:
    img = Image.new("RGB", size, BACKGROUND)
    _paint(ImageDraw.Draw(img), shape, size, box, rgb255(colour))
    return img


# Off-centre shapes: a rotation error moves the shape, so a mask in the wrong
# orientation misses it.
SELF_TEST = (
    Probe("red", "square", (640, 480), (0.08, 0.12, 0.62, 0.80)),
    Probe("blue", "circle", (480, 640), (0.15, 0.30, 0.92, 0.88), "PNG"),
    Probe("green", "triangle", (800, 450), (0.05, 0.08, 0.60, 0.92), "JPEG", 6),
    Probe("yellow", "square", (400, 400), (0.35, 0.30, 0.95, 0.90), "JPEG", 8),
    Probe("purple", "circle", (1024, 768), (0.40, 0.10, 0.95, 0.85), "WEBP"),
    Probe("orange", "triangle", (3024, 2016), (0.10, 0.15, 0.65, 0.95), "JPEG", 3),
)


def variety(n: int, seed: int = 0) -> list[Probe]:
    """n varied probes (colour, shape, size, place): a verification sample of known content."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        w, h = (int(v) for v in rng.choice([(640, 480), (480, 640), (800, 800), (1200, 675)]))
        x0, y0 = rng.uniform(0.02, 0.45, 2)
        x1, y1 = x0 + rng.uniform(0.3, 0.53), y0 + rng.uniform(0.3, 0.53)
        out.append(
            Probe(
                CHROMATIC[i % len(CHROMATIC)],
                ("square", "circle", "triangle")[(i // len(CHROMATIC)) % 3],
                (w, h),
                (float(x0), float(y0), float(min(x1, 0.98)), float(min(y1, 0.98))),
                "JPEG",
                (1, 6, 8, 3)[i % 4],
            )
        )
    return out
