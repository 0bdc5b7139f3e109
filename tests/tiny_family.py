"""A tiny model family that is not SigLIP: 512 wide, a 32-px bilinear input in plain /255,
its own prompt template. Its image side refuses any other input shape, as a real graph does.

Registered by tests in their own process (the `tiny` fixture of test_model_seam.py), and in
Ray's worker processes through WHEREIN_MODEL_PLUGINS=tiny_family:register.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from wherein.indexer.imaging import model_input
from wherein.indexer.models import registry
from wherein.indexer.models.modeldir import ModelDir
from wherein.indexer.models.standins.palette import NAMES, PROTOTYPES
from wherein.indexer.models.text_tower import CalibratedScores
from wherein.indexer.normalize import unit_rows
from wherein.schemas.errors import ModelError
from wherein.schemas.models import MODEL_MARKER, EmbedderSpec, ImageInput

TINY = EmbedderSpec(
    key="tiny-512",
    title="a tiny colour model",
    image=ImageInput(size=32, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0), resample="bilinear"),
    dim=512,
    template="a picture of {}",
)
SPACE = "tiny"
# Each palette colour's direction in the 512-d space (orthonormal rows).
DIRECTIONS = np.linalg.qr(np.random.default_rng(7).standard_normal((TINY.dim, len(NAMES))))[0].T


class TinyImages:
    spec, space, dim, batch_size = TINY, SPACE, TINY.dim, 3

    def __init__(self, models: ModelDir) -> None:
        self.path = models.root / MODEL_MARKER
        self.model_id = "tiny:1"
        self.batches: list[tuple[int, ...]] = []

    def preprocess(self, image) -> np.ndarray:
        return model_input(image, TINY.image)

    def embed(self, batch: np.ndarray) -> np.ndarray:
        size = TINY.image.size
        if batch.ndim != 4 or batch.shape[1:] != (3, size, size):
            raise ModelError(f"tiny-512 takes [n,3,{size},{size}], got {list(batch.shape)}")
        self.batches.append(batch.shape)
        pixels = batch.transpose(0, 2, 3, 1).reshape(len(batch), -1, 3)  # values in [0, 1]
        dist = ((pixels[:, :, None, :] - PROTOTYPES[None, None]) ** 2).sum(-1)
        share = (dist < 0.02).mean(axis=1)  # [n, colours]: the part of the image of each colour
        return unit_rows(share @ DIRECTIONS + 1e-9)


class TinyText(CalibratedScores):
    logit_scale, logit_bias = 10.0, -5.0

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        self.prompts.extend(texts)
        words = [[n in t.lower().split() for n in NAMES] for t in texts]
        return unit_rows(np.array(words, dtype=np.float64) @ DIRECTIONS + 1e-9)


def entry(load_image=TinyImages, text: TinyText | None = None) -> registry.ModelEntry:
    text = text or TinyText()
    return registry.ModelEntry(
        TINY,
        lambda md, threads: load_image(md),
        lambda md: text,
        lambda md: ("tiny:1", MODEL_MARKER),
    )


def register() -> None:
    """The plugin callable: registers the family unless this process has it already."""
    if TINY.key not in registry.keys(plugins=False):
        registry.register(entry())
