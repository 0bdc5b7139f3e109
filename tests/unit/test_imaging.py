"""Decoding the way a viewer shows a photo, and the model's input numbers, from drawn images."""

from __future__ import annotations

import hashlib
import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from wherein.indexer.imaging import (
    DecodeError,
    decode,
    model_input,
    prepare,
    siglip_input,
)
from wherein.schemas.models import SIGLIP2, ImageInput

# An upright picture that no flip or turn maps onto itself: a 3 x 2 grid of distinct colours.
COLOURS = [
    [(220, 30, 30), (30, 200, 30), (30, 30, 220)],
    [(230, 230, 40), (40, 220, 220), (200, 40, 200)],
]
BLOCK = 16


def upright() -> np.ndarray:
    return np.kron(np.array(COLOURS, dtype=np.uint8), np.ones((BLOCK, BLOCK, 1), dtype=np.uint8))


# How a camera stores the upright picture under each EXIF orientation (the tag says what a
# viewer must do to the stored pixels; here is the inverse, from the EXIF 2.3 definitions).
STORED = {
    1: lambda a: a,
    2: lambda a: a[:, ::-1],  # mirrored left-right
    3: lambda a: a[::-1, ::-1],  # turned 180
    4: lambda a: a[::-1],  # mirrored top-bottom
    5: lambda a: a.transpose(1, 0, 2),  # mirrored along the main diagonal
    6: lambda a: np.rot90(a, 1),  # the viewer turns it 90 clockwise
    7: lambda a: np.rot90(a, 2).transpose(1, 0, 2),  # mirrored along the other diagonal
    8: lambda a: np.rot90(a, -1),  # the viewer turns it 90 counter-clockwise
}


def encoded(img: Image.Image, fmt: str, **kwargs) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kwargs)
    return buf.getvalue()


def block_colours(img: Image.Image) -> np.ndarray:
    """The colour at the centre of each grid block."""
    a = np.asarray(img, dtype=np.int16)
    c = BLOCK // 2
    return a[c::BLOCK, c::BLOCK]


@pytest.mark.parametrize("orientation", range(1, 9))
@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_every_exif_orientation_decodes_upright(orientation, fmt):
    stored = Image.fromarray(np.ascontiguousarray(STORED[orientation](upright())))
    exif = Image.Exif()
    exif[0x0112] = orientation
    kwargs = {"quality": 95, "subsampling": 0} if fmt == "JPEG" else {}
    img, size = decode(encoded(stored, fmt, exif=exif, **kwargs))
    want = upright()
    assert img.mode == "RGB"
    assert img.size == size == (want.shape[1], want.shape[0])
    assert np.abs(block_colours(img) - np.array(COLOURS)).max() <= 6


def test_the_reported_size_is_the_full_upright_size_when_decoding_reduced():
    stored = Image.fromarray(np.ascontiguousarray(STORED[6](upright()))).resize((160, 480))
    exif = Image.Exif()
    exif[0x0112] = 6
    img, size = decode(encoded(stored, "JPEG", exif=exif, quality=90), draft_size=40)
    assert size == (480, 160)  # what a viewer shows, not the reduced decode
    assert img.width > img.height and img.width < 480  # upright, and decoded at a reduced scale


# -- modes -----------------------------------------------------------------------------------
def decoded_pixels(img: Image.Image, fmt: str = "PNG", **kwargs) -> np.ndarray:
    out, _ = decode(encoded(img, fmt, **kwargs))
    assert out.mode == "RGB"
    return np.asarray(out, dtype=np.int16)


def test_palette_transparency_shows_white():
    img = Image.new("P", (4, 2), 0)
    img.putpalette([0, 0, 0, 200, 20, 20] + [0] * (256 * 3 - 6))
    img.paste(1, (2, 0, 4, 2))
    img.info["transparency"] = 0  # palette entry 0 (black) is see-through
    px = decoded_pixels(img, transparency=0)
    assert (px[:, :2] == 255).all()  # not black
    assert (px[:, 2:] == (200, 20, 20)).all()


def test_alpha_is_composited_on_white():
    rgba = Image.new("RGBA", (3, 1))
    rgba.putdata([(255, 0, 0, 255), (255, 0, 0, 0), (0, 0, 255, 128)])
    px = decoded_pixels(rgba)[0]
    assert px[0].tolist() == [255, 0, 0]
    assert px[1].tolist() == [255, 255, 255]
    assert np.abs(px[2] - (127, 127, 255)).max() <= 1  # half blue over white

    la = Image.new("LA", (2, 1))
    la.putdata([(40, 255), (40, 0)])
    px = decoded_pixels(la)[0]
    assert px[0].tolist() == [40, 40, 40] and px[1].tolist() == [255, 255, 255]


def test_cmyk_becomes_rgb():
    img = Image.new("CMYK", (2, 1))
    img.putdata([(255, 0, 0, 0), (0, 0, 0, 255)])  # pure cyan, pure black
    px = decoded_pixels(img, "TIFF")[0]
    assert px[0].tolist() == [0, 255, 255] and px[1].tolist() == [0, 0, 0]


def test_16_bit_greyscale_spans_the_8_bit_range():
    deep = Image.fromarray(np.array([[0, 32768, 65535]], dtype=np.uint16))  # I;16
    assert deep.mode == "I;16"
    px = decoded_pixels(deep)[0]
    assert px[:, 0].tolist() == [0, 128, 255] and (px == px[:, :1]).all()  # grey, not tinted
    # 16-bit storage of 8-bit values (max <= 255) keeps them rather than going near-black.
    shallow = Image.fromarray(np.array([[0, 100, 200]], dtype=np.uint16))
    assert decoded_pixels(shallow)[0][:, 0].tolist() == [0, 100, 200]


def test_float_images_are_stretched_to_their_own_range():
    img = Image.fromarray(np.array([[-2.0, 0.0, 2.0]], dtype=np.float32))  # F
    assert img.mode == "F"
    px = decoded_pixels(img, "TIFF")[0]
    assert px[:, 0].tolist() == [0, 127, 255]
    flat = Image.fromarray(np.full((1, 2), 3.5, dtype=np.float32))
    assert (decoded_pixels(flat, "TIFF") == 0).all()  # no division by a zero range


@pytest.mark.parametrize("fmt", ["GIF", "WEBP", "TIFF"])
def test_a_stack_of_frames_shows_its_first(fmt):
    frames = [Image.new("RGB", (8, 8), c) for c in ((250, 0, 0), (0, 0, 250), (0, 250, 0))]
    kwargs = {"lossless": True} if fmt == "WEBP" else {}
    data = encoded(frames[0], fmt, save_all=True, append_images=frames[1:], **kwargs)
    assert Image.open(io.BytesIO(data)).n_frames == 3
    img, size = decode(data)
    assert size == (8, 8)
    assert np.abs(np.asarray(img, dtype=np.int16) - (250, 0, 0)).max() <= 8


def test_bilevel_and_grey_become_grey_rgb():
    bits = Image.new("1", (2, 1))
    bits.putdata([0, 1])
    assert decoded_pixels(bits)[0].tolist() == [[0, 0, 0], [255, 255, 255]]
    grey = Image.new("L", (1, 1), 90)
    assert decoded_pixels(grey)[0].tolist() == [[90, 90, 90]]


# -- what is not a usable image --------------------------------------------------------------
def png_header_only(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b"")


def photo_bytes(fmt: str) -> bytes:
    rng = np.random.default_rng(0)  # noise: every part of the file carries pixels
    return encoded(Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)), fmt)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty file"),
        (b"just some text, not a picture\n", "not an image"),
        (photo_bytes("JPEG")[:-600], "truncated"),
        (photo_bytes("PNG")[:-600], "truncated"),
        (png_header_only(20_000, 10_000), "decompression bomb"),
    ],
    ids=["empty", "text", "truncated-jpeg", "truncated-png", "bomb"],
)
def test_unusable_bytes_are_a_decode_error_with_a_short_reason(data, reason):
    with pytest.raises(DecodeError) as info:
        decode(data)
    message = str(info.value)
    assert message.startswith(reason) and "\n" not in message and len(message) < 200
    # The indexer's path records the same reason as a skip instead of raising.
    res = prepare(data, SIGLIP2.image)
    assert res.error == message and res.pixels is None and res.size == len(data)


def test_the_bomb_limit_holds_when_pillows_own_is_switched_off(monkeypatch):
    """Some libraries set Image.MAX_IMAGE_PIXELS = None on import; wherein still refuses."""
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)
    with pytest.raises(DecodeError, match="decompression bomb: 20000x10000 pixels"):
        decode(png_header_only(20_000, 10_000))


def test_prepare_hashes_the_bytes_and_sizes_the_upright_picture():
    exif = Image.Exif()
    exif[0x0112] = 8
    stored = Image.fromarray(np.ascontiguousarray(STORED[8](upright())))
    data = encoded(stored, "JPEG", exif=exif, quality=90)
    res = prepare(data, ImageInput(12, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)), mtime_ns=42)
    assert res.error == "" and res.sha256 == hashlib.sha256(data).hexdigest()
    assert (res.size, res.mtime_ns, res.width, res.height) == (len(data), 42, 48, 32)
    assert res.pixels is not None and res.pixels.shape == (3, 12, 12)


def test_a_missing_file_is_a_decode_error(tmp_path):
    with pytest.raises(DecodeError, match="unreadable"):
        decode(tmp_path / "nowhere.jpg")


# -- the model's input numbers ---------------------------------------------------------------
def gradient(w: int = 37, h: int = 23) -> Image.Image:
    yy, xx = np.mgrid[0:h, 0:w]
    a = np.stack([xx * 255 // (w - 1), yy * 255 // (h - 1), (xx + yy) % 256], axis=-1)
    return Image.fromarray(a.astype(np.uint8))


def test_siglip_input_is_x_times_2_over_255_minus_1_to_the_bit():
    img = gradient()
    x = siglip_input(img, size=16)
    resized = np.asarray(img.resize((16, 16), Image.Resampling.BICUBIC), dtype=np.float32)
    want = resized * np.float32(2 / 255) - np.float32(1)  # open_clip's recipe, in float32
    assert x.dtype == np.float32 and x.shape == (3, 16, 16) and x.flags.c_contiguous
    assert np.array_equal(x, want.transpose(2, 0, 1))
    ends = siglip_input(Image.new("RGB", (4, 4), (0, 255, 0)), size=4)
    assert (ends[0] == -1).all() and np.allclose(ends[1], 1, atol=1e-6)


def test_a_custom_input_uses_its_own_size_resampling_mean_and_std():
    spec = ImageInput(8, mean=(0.1, 0.2, 0.3), std=(0.5, 0.25, 0.2), resample="bilinear")
    img = gradient()
    x = model_input(img, spec)
    resized = np.asarray(img.resize((8, 8), Image.Resampling.BILINEAR), dtype=np.float64)
    want = (resized / 255 - np.array(spec.mean)) / np.array(spec.std)
    assert x.shape == (3, 8, 8)
    np.testing.assert_allclose(x, want.transpose(2, 0, 1), atol=1e-5)


def test_the_input_is_squashed_not_cropped():
    """A wide picture's left and right ends both reach the model."""
    wide = np.zeros((10, 40, 3), dtype=np.uint8)
    wide[:, :20] = (255, 0, 0)
    wide[:, 20:] = (0, 0, 255)
    spec = ImageInput(4, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0), resample="nearest")
    x = model_input(Image.fromarray(wide), spec)
    assert x[0].tolist() == [[1.0, 1.0, 0.0, 0.0]] * 4  # red: the left half
    assert x[2].tolist() == [[0.0, 0.0, 1.0, 1.0]] * 4  # blue: the right half


def test_a_heic_photo_decodes_through_pillow_heif_loaded_on_first_use(tmp_path):
    # pillow-heif (libheif, libde265, libx265) is loaded by the first HEIC opened, not at
    # import: a fresh interpreter, so that no earlier test has loaded it already.
    import subprocess
    import sys

    import pillow_heif

    path = tmp_path / "photo.heic"
    pillow_heif.from_pillow(Image.new("RGB", (64, 48), (220, 30, 30))).save(path, quality=90)
    probe = (
        "import sys\n"
        "from wherein.indexer.imaging import decode\n"
        "before = 'pillow_heif' in sys.modules\n"
        f"img, size = decode({str(path)!r})\n"
        "print(before, 'pillow_heif' in sys.modules, size, img.getpixel((32, 24)))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    before, after, *rest = out.stdout.split(" ", 2)
    assert (before, after) == ("False", "True")
    assert rest[0].startswith("(64, 48)")
    r, g, b = (int(v) for v in rest[0].split("(")[-1].rstrip(")\n").split(","))
    assert r > 180 and g < 80 and b < 80
