"""A small sample collection for `wherein demo`: coloured shapes in many formats, plus bad files.

The stand-in models only know colours, so the sample is built from the stand-in
palette; the real models find the same shapes ("a red circle") too.
"""

from __future__ import annotations

from pathlib import Path

from PIL import Image, ImageDraw

from wherein.indexer.models.standins.palette import rgb255

BACKGROUND = (247, 247, 247)
SHAPES = [
    ("red", "circle", (640, 480), "jpg"),
    ("red", "square", (500, 500), "png"),
    ("blue", "square", (800, 450), "webp"),
    ("blue", "circle", (480, 640), "jpg"),
    ("green", "triangle", (600, 400), "png"),
    ("yellow", "circle", (400, 400), "gif"),
    ("purple", "square", (640, 360), "tiff"),
    ("orange", "triangle", (512, 384), "bmp"),
]


def _draw(colour: str, shape: str, size: tuple[int, int]) -> Image.Image:
    w, h = size
    img = Image.new("RGB", size, BACKGROUND)
    d = ImageDraw.Draw(img)
    box = (w * 0.12, h * 0.12, w * 0.88, h * 0.88)
    fill = rgb255(colour)
    if shape == "circle":
        d.ellipse(box, fill=fill)
    elif shape == "square":
        d.rectangle(box, fill=fill)
    else:
        d.polygon([(w * 0.5, h * 0.06), (w * 0.94, h * 0.94), (w * 0.06, h * 0.94)], fill=fill)
    return img


def write_sample(root: Path) -> list[Path]:
    """Write the sample photos (and two broken files the indexer must skip) under root."""
    written = []
    for i, (colour, shape, size, ext) in enumerate(SHAPES):
        sub = root / ("holiday" if i % 2 else "garden")
        sub.mkdir(parents=True, exist_ok=True)
        p = sub / f"{colour}_{shape}.{ext}"
        _draw(colour, shape, size).save(p)
        written.append(p)
    broken = root / "broken"
    broken.mkdir(parents=True, exist_ok=True)
    (broken / "truncated.jpg").write_bytes(written[0].read_bytes()[:2000])
    (broken / "not_a_photo.png").write_text("this file only pretends to be an image\n")
    return written
