"""wherein's SigLIP 2 preprocessing is open_clip's own, to within float32 rounding.

The reference is built from open_clip's registry entry for ViT-B-16-SigLIP2 / webli (its
image size, mean/std, interpolation and resize mode) with open_clip.transform, so nothing
is downloaded and nothing is restated here: a bilinear resize, a centre crop or another
normalisation in indexer/imaging.py fails this test.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from wherein.indexer.imaging import decode, siglip_input
from wherein.schemas.models import SIGLIP_IMAGE_SIZE, SIGLIP_MEAN, SIGLIP_STD

open_clip = pytest.importorskip("open_clip")


@pytest.fixture(scope="module")
def reference():
    from open_clip.transform import PreprocessCfg, image_transform_v2, merge_preprocess_dict

    size = open_clip.get_model_config("ViT-B-16-SigLIP2")["vision_cfg"]["image_size"]
    tag = open_clip.get_pretrained_cfg("ViT-B-16-SigLIP2", "webli")
    cfg = PreprocessCfg(**merge_preprocess_dict(PreprocessCfg(size=size), tag))
    # The contract wherein states (schemas/models.py) is the one open_clip ships.
    assert cfg.size == (SIGLIP_IMAGE_SIZE, SIGLIP_IMAGE_SIZE) or cfg.size == SIGLIP_IMAGE_SIZE
    assert tuple(cfg.mean) == SIGLIP_MEAN and tuple(cfg.std) == SIGLIP_STD
    assert (cfg.interpolation, cfg.resize_mode) == ("bicubic", "squash")
    return image_transform_v2(cfg, is_train=False)


def photo(mode: str, size: tuple[int, int], seed: int) -> Image.Image:
    """Smooth gradients plus noise and hard edges: what separates resampling filters."""
    w, h = size
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 / max(w - 1, 1), y * 255 / max(h - 1, 1), (x + y) % 256], -1)
    base[h // 3 : h // 2, w // 4 : w // 2] = (250, 10, 30)
    rgb = np.clip(base + rng.normal(0, 25, base.shape), 0, 255).astype(np.uint8)
    img = Image.fromarray(rgb, "RGB")
    if mode == "RGBA":
        img.putalpha(Image.fromarray(rng.integers(0, 256, (h, w), dtype=np.uint8)))
    elif mode != "RGB":
        img = img.convert(mode)
    return img


CASES = [
    ("RGB", (640, 480)),  # landscape, downscaled
    ("RGB", (300, 900)),  # portrait, squashed harder one way
    ("RGB", (224, 224)),  # already the input size
    ("RGB", (97, 61)),  # upscaled
    ("L", (512, 384)),
    ("RGBA", (400, 300)),
    ("P", (333, 250)),
    ("CMYK", (256, 320)),
]


@pytest.mark.parametrize("mode, size", CASES, ids=[f"{m}-{w}x{h}" for m, (w, h) in CASES])
def test_siglip_input_equals_open_clip(reference, mode, size):
    # Through wherein's decoder first, as the indexer does: an RGB image in viewing orientation.
    buf = io.BytesIO()
    source = photo(mode, size, seed=sum(size))
    source.save(buf, "TIFF" if mode == "CMYK" else "PNG")
    img, _ = decode(buf.getvalue())
    ours = siglip_input(img)
    theirs = reference(img).numpy()
    assert ours.shape == theirs.shape == (3, SIGLIP_IMAGE_SIZE, SIGLIP_IMAGE_SIZE)
    assert ours.dtype == np.float32
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-6)


@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_undecoded_image_too(reference, mode):
    # For RGB and grey the colour conversion commutes with the resize, so open_clip on the
    # raw image (it converts after resizing) must agree as well.
    raw = photo(mode, (512, 300), seed=5)
    np.testing.assert_allclose(
        siglip_input(raw.convert("RGB")), reference(raw).numpy(), rtol=0, atol=1e-6
    )
