"""Decode any image a photo collection holds, the way a viewer shows it, and preprocess it.

Every failure becomes a DecodeError with a short reason; the indexer records it
as a skip and goes on.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image, ImageFile, ImageOps, UnidentifiedImageError

if TYPE_CHECKING:
    from wherein.indexer.photometa import PhotoMeta  # photometa imports this module
    from wherein.indexer.video.frames import VideoInfo

from wherein.indexer.regions import Tiling, region_inputs
from wherein.schemas.models import (
    CLIPSEG_IMAGE_SIZE,
    CLIPSEG_MEAN,
    CLIPSEG_STD,
    SIGLIP2,
    SIGLIP_IMAGE_SIZE,
    ImageInput,
)

# HEIC/HEIF through the maintained plugin, pillow-heif, loaded when the first such file is
# opened: loading it maps libheif, libde265 and libx265 (2.6-4.3 MB resident), which a
# server or an indexer that never meets a HEIC photo has no use for.
HEIF_FORMAT = "HEIF"  # pillow_heif.HeifImageFile.format: its opener replaces this one
HEIF_BRANDS = frozenset(  # pillow_heif's own test (as_plugin._is_supported_heif), repeated
    b.encode()
    for b in ("heic", "heix", "heim", "heis", "hevc", "hevx", "hevm", "hevs", "mif1", "msf1")
)


def _is_heif(prefix: bytes) -> bool:
    return prefix[4:8] == b"ftyp" and prefix[8:12] in HEIF_BRANDS


def _open_heif(fp, filename=None) -> ImageFile.ImageFile:
    """The first HEIF file: register pillow-heif (which takes this format's place) and open."""
    import pillow_heif

    pillow_heif.register_heif_opener()
    return pillow_heif.HeifImageFile(fp, filename)


if importlib.util.find_spec("pillow_heif") is not None:
    Image.register_open(HEIF_FORMAT, _open_heif, _is_heif)
    Image.register_extensions(HEIF_FORMAT, [".heic", ".heics", ".heif", ".heifs", ".hif"])
    Image.register_mime(HEIF_FORMAT, "image/heif")

# Truncated files must fail, not decode as half-grey images.
ImageFile.LOAD_TRUNCATED_IMAGES = False
# The one size rule (index, mask, web app): at most this many pixels are ever decoded, 537 MB
# as RGB. A JPEG decodes reduced (libjpeg scales 1/2, 1/4, 1/8) until it fits, so a 200-MP
# phone photo is read at 1/2 (50 MP); other formats decode whole and above it are refused
# as decompression bombs.
MAX_PIXELS = 178_956_970  # Pillow's own hard limit
# Pillow's check counts the declared size (not what a reduced JPEG decode reads), and below
# its error it warns through the warnings module, whose filters threads cannot set safely:
# decode() applies the rule above instead.
Image.MAX_IMAGE_PIXELS = None
JPEG_DRAFT = True  # decode JPEGs at reduced scale when >= 2x the model input (bench/bench_index.py)

IMAGE_EXTENSIONS = frozenset(
    [
        ".jpg",
        ".jpeg",
        ".jpe",
        ".jfif",
        ".png",
        ".webp",
        ".gif",
        ".tif",
        ".tiff",
        ".bmp",
        ".dib",
        ".heic",
        ".heif",
        ".avif",
        ".ppm",
        ".pgm",
        ".pbm",
        ".tga",
        ".jp2",
        ".j2k",
    ]
)


class DecodeError(Exception):
    """The file is not an image wherein can read; the message is the recorded reason."""


def is_image_name(path: str | Path) -> bool:
    return Path(path).suffix.lower() in IMAGE_EXTENSIONS


def open_image(source: str | Path | bytes, draft_size: int | None = None) -> Image.Image:
    """Decode to an RGB image in viewing orientation (EXIF applied)."""
    return decode(source, draft_size)[0]


_SWAPS_AXES = {5, 6, 7, 8}  # EXIF orientations that rotate by 90 degrees


def decode(
    source: str | Path | bytes, draft_size: int | None = None
) -> tuple[Image.Image, tuple[int, int]]:
    """Decode to an RGB image in viewing orientation, plus the full-size (width, height) a viewer shows.

    draft_size lets libjpeg decode at 1/2..1/8 scale when the result stays at
    least twice draft_size on each side (so the later resize still antialiases).
    """
    img, size, _ = decode_named(source, draft_size)
    return img, size


# Pillow's names that are another's for a user: a camera's MPO is a JPEG with a second picture.
_FORMAT_NAMES = {"mpo": "jpeg"}


def decode_named(
    source: str | Path | bytes, draft_size: int | None = None
) -> tuple[Image.Image, tuple[int, int], str]:
    """decode's answer and the format its content is in, as Pillow names it in lower case
    ("jpeg", "png", "webp"; "" when Pillow does not say): what the catalog records, never
    the name's extension."""
    data = source if isinstance(source, bytes) else None
    if data is not None and not data:
        raise DecodeError("empty file")
    try:
        img: Image.Image = Image.open(io.BytesIO(data) if data is not None else source)
        w, h = img.size
        fmt = (img.format or "").lower()
        if img.format == "JPEG":
            scale = jpeg_scale(w, h, draft_size)
            if scale > 1:
                img.draft("RGB", (w // scale, h // scale))
        dw, dh = img.size  # what load() will decode (reduced by draft)
        if dw * dh > MAX_PIXELS:
            raise DecodeError(
                f"decompression bomb: {w}x{h} pixels, over the {MAX_PIXELS:,} wherein decodes"
            )
        if img.getexif().get(0x0112) in _SWAPS_AXES:
            w, h = h, w
        img.seek(0)  # first frame of GIF/WebP/TIFF stacks
        img.load()
        # In place: a copy would double the memory of a photo that needs no turning.
        ImageOps.exif_transpose(img, in_place=True)
        return to_rgb(img), (w, h), _FORMAT_NAMES.get(fmt, fmt)
    except DecodeError:
        raise
    except UnidentifiedImageError:
        raise DecodeError("not an image (unrecognised format)") from None
    except Image.DecompressionBombError as exc:  # a plugin's own check
        raise DecodeError(f"decompression bomb: {exc}") from None
    except OSError as exc:
        msg = str(exc)
        if "truncated" in msg.lower() or "premature" in msg.lower():
            raise DecodeError(f"truncated image ({msg})") from None
        raise DecodeError(f"unreadable image ({msg})") from None
    except Exception as exc:  # noqa: BLE001 - decoder plugins raise struct.error, IndexError, ...
        # One malformed file must never stop a run: whatever a decoder raises is a skip reason.
        raise DecodeError(f"corrupt image ({type(exc).__name__}: {exc})") from None


def jpeg_scale(w: int, h: int, draft_size: int | None = None) -> int:
    """The libjpeg reduction (1, 2, 4 or 8) a w x h JPEG decodes at: the most that keeps both
    sides at least twice draft_size (Pillow's draft rule), and at least what fits MAX_PIXELS."""
    fits = next((s for s in (1, 2, 4) if -(-w // s) * -(-h // s) <= MAX_PIXELS), 8)
    wanted = 1
    if draft_size:
        room = min(w, h) // (2 * draft_size)
        wanted = next((s for s in (8, 4, 2) if room >= s), 1)
    return max(fits, wanted)


def to_rgb(img: Image.Image) -> Image.Image:
    """Any mode to 8-bit RGB; transparency composited on white (how a viewer shows it)."""
    if img.mode == "RGB":
        return img
    if img.mode in ("I;16", "I;16B", "I;16L", "I;16N", "I"):
        arr = np.asarray(img, dtype=np.float64)
        top = 65535.0 if arr.max() > 255 else 255.0
        img = Image.fromarray(np.clip(arr / top * 255.0 + 0.5, 0, 255).astype(np.uint8), "L")
    elif img.mode == "F":
        arr = np.asarray(img, dtype=np.float64)
        lo, hi = float(arr.min()), float(arr.max())
        scaled = (arr - lo) / (hi - lo) * 255.0 if hi > lo else np.zeros_like(arr)
        img = Image.fromarray(scaled.astype(np.uint8), "L")
    if img.mode == "P" and "transparency" in img.info:
        img = img.convert("RGBA")
    if img.mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = img.convert("RGBA")
        canvas = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(canvas, rgba).convert("RGB")
    return img.convert("RGB")


def model_input(img: Image.Image, spec: ImageInput) -> np.ndarray:
    """[3,size,size] float32 as `spec` asks: squash (no crop), then (x/255 - mean)/std.

    Written as x * scale + offset: for SigLIP's 0.5/0.5 that is x * (2/255) - 1 to the bit,
    open_clip's recipe, so vectors do not move with the refactoring.
    """
    resample = Image.Resampling[spec.resample.upper()]
    x = np.asarray(img.resize((spec.size, spec.size), resample), dtype=np.float32)
    std = np.array(spec.std, dtype=np.float64)
    scale = (1.0 / (255.0 * std)).astype(np.float32)
    offset = (-np.array(spec.mean, dtype=np.float64) / std).astype(np.float32)
    x = x * scale + offset
    return np.ascontiguousarray(x.transpose(2, 0, 1))


def siglip_input(img: Image.Image, size: int = SIGLIP_IMAGE_SIZE) -> np.ndarray:
    """[3,size,size] float32: SigLIP 2's input (bicubic squash, /255, (x-0.5)/0.5)."""
    return model_input(img, ImageInput(size, SIGLIP2.image.mean, SIGLIP2.image.std, "bicubic"))


_CLIPSEG_MEAN = np.array(CLIPSEG_MEAN, dtype=np.float32) * 255.0
_CLIPSEG_SCALE = 1.0 / (np.array(CLIPSEG_STD, dtype=np.float32) * 255.0)


def clipseg_input(img: Image.Image, size: int = CLIPSEG_IMAGE_SIZE) -> np.ndarray:
    """[3,size,size] float32: bilinear squash, /255, ImageNet mean/std (CIDAS config)."""
    x = np.asarray(img.resize((size, size), Image.Resampling.BILINEAR), dtype=np.float32)
    x = (x - _CLIPSEG_MEAN) * _CLIPSEG_SCALE
    return np.ascontiguousarray(x.transpose(2, 0, 1))


@dataclass(frozen=True)
class Locator:
    """Where in its file an item is: the whole image (a photo's one item), a video frame at
    t seconds, or a region's box (x0, y0, x1, y1) in the file's pixels."""

    kind: str = "image"  # 'image' | 'frame' | 'region' (the catalog's items.kind)
    t: float | None = None
    box: tuple[float, float, float, float] | None = None


WHOLE_IMAGE = Locator()


@dataclass
class Prepared:
    """One file's bytes, ready for the image tower (or the reason they are not).

    size and mtime_ns describe the bytes that were hashed (taken from the same
    open file), never an earlier look at the path. items: what the file yields, each
    item's locator and its [3,size,size] float32 pixels (model_input); a photo yields
    one whole-image item, a file that failed none.
    """

    size: int = 0
    mtime_ns: int = 0
    sha256: str = ""
    width: int = 0
    height: int = 0
    items: list[tuple[Locator, np.ndarray]] = field(default_factory=list)
    error: str = ""
    photo: PhotoMeta | None = None  # EXIF from the same bytes (the index run stores it)
    ctime_ns: int = 0  # with size and mtime, the state of the file read (0: not known)
    inode: int = 0
    # A timed file (a video: probed, not decoded yet): its frames are sampled and embedded
    # in chunks after its file row is committed (ingest/videos.py); items stays empty.
    video: VideoInfo | None = None
    # Its bytes where there is no local file to sample it from (a tar member of a kind that
    # is sampled in memory: an animation); the frames are read from them.
    data: bytes | None = None
    # Regions cut from a photo (indexer/regions.py): how many of items are regions and the
    # tiling's name; None when the photo was not cut (regions off, or not read).
    regions: int | None = None
    kind: str = "photo"  # its media kind's name (indexer/kinds), as the catalog stores it
    tiling: str | None = None
    # Its format by content, as the kind read it ("jpeg", "png", "mp4"; "": not known): a
    # JPEG named .mp4 is a jpeg, whatever its name says.
    format: str = ""

    @property
    def pixels(self) -> np.ndarray | None:
        """A photo's pixels: its one whole-image item's; None on error or for a file that
        yields other items (use tower_pixels)."""
        if len(self.items) == 1 and self.items[0][0] == WHOLE_IMAGE:
            return self.items[0][1]
        return None

    @pixels.setter
    def pixels(self, value: np.ndarray | None) -> None:
        self.items = [] if value is None else [(WHOLE_IMAGE, value)]

    def tower_pixels(self) -> np.ndarray | list[np.ndarray] | None:
        """What the ingest pipeline's Step takes: a photo's [3,s,s], a list of each item's
        for a file that yields other items, None without items."""
        if not self.items:
            return None
        return self.pixels if self.pixels is not None else [p for _, p in self.items]


def prepare(
    data: bytes,
    spec: ImageInput,
    draft: bool = JPEG_DRAFT,
    mtime_ns: int = 0,
    tiling: Tiling | None = None,
) -> Prepared:
    """Hash, decode and preprocess for the model's input `spec` — the one path both indexers
    (local, sharded) use, so identical files give identical vectors. tiling: also cut a
    large photo into regions (indexer/regions.py), items after the whole photo's, whose
    input stays what it is without them."""
    res = Prepared(size=len(data), mtime_ns=mtime_ns, sha256=hashlib.sha256(data).hexdigest())
    if not data:
        res.error = "empty file"
        return res
    try:
        img, (res.width, res.height), res.format = decode_named(
            data, draft_size=spec.size if draft else None
        )
        res.pixels = model_input(img, spec)
        if tiling is not None:
            add_regions(res, data, img, spec, tiling)
    except DecodeError as exc:
        res.error = str(exc)
    return res


def add_regions(
    res: Prepared, data: bytes, img: Image.Image, spec: ImageInput, tiling: Tiling
) -> None:
    """Append a decoded photo's regions to res.items (and count them in res.regions)."""

    def decode_at(scale: int) -> Image.Image:
        short = min(res.width, res.height)  # jpeg_scale's rule: sides >= 2 x draft_size
        return decode(data, draft_size=max(1, short // (2 * scale)))[0]

    def to_input(tile: Image.Image) -> np.ndarray:
        return model_input(tile, spec)

    cut = region_inputs(img, (res.width, res.height), spec, to_input, tiling, decode_at)
    res.items += [(Locator("region", box=(x0, y0, x1, y1)), px) for (x0, y0, x1, y1), px in cut]
    res.regions, res.tiling = len(cut), tiling.name


def read_error(exc: OSError) -> str:
    return f"cannot read: {exc.strerror.lower() if exc.strerror else exc}"
