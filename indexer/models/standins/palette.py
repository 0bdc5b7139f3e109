"""The colour world the stand-in models live in.

Stand-ins are tiny models with the real graphs' exact I/O contracts whose
outputs mean something: the image embedding follows an image's colours, the
text towers map colour words to the same directions, and CLIPSeg's mask covers
the pixels of the prompt's colour. Every weight is derived from a seeded numpy
generator, so the generator reproduces the committed graphs.
"""

from __future__ import annotations

import numpy as np

# name -> sRGB in [0, 1]; tests draw with these values.
COLOURS: dict[str, tuple[float, float, float]] = {
    "red": (0.86, 0.10, 0.10),
    "green": (0.10, 0.70, 0.15),
    "blue": (0.10, 0.25, 0.88),
    "yellow": (0.95, 0.88, 0.10),
    "orange": (0.98, 0.55, 0.05),
    "purple": (0.55, 0.15, 0.65),
    "white": (0.97, 0.97, 0.97),
    "black": (0.05, 0.05, 0.05),
}
NAMES = tuple(COLOURS)
K = len(NAMES)
PROTOTYPES = np.array([COLOURS[n] for n in NAMES], dtype=np.float32)  # [K, 3]
TAU = 0.01  # softmax temperature on squared RGB distance: near-hard assignment
GRID = 4  # image tower: 4x4 spatial colour histogram besides the global one
SPATIAL_WEIGHT = 0.25
SEED = 20261201


def rgb255(name: str) -> tuple[int, int, int]:
    r, g, b = COLOURS[name]
    return round(r * 255), round(g * 255), round(b * 255)


def rng(tag: str) -> np.random.Generator:
    return np.random.default_rng([SEED, *tag.encode()])


def orthonormal_rows(n: int, dim: int, tag: str) -> np.ndarray:
    """n orthonormal vectors in R^dim (rows), reproducible from tag."""
    q, _ = np.linalg.qr(rng(tag).standard_normal((dim, n)))
    return q.T.astype(np.float32)


def soft_assignment_params() -> tuple[np.ndarray, np.ndarray]:
    """1x1-conv weight/bias whose softmax over K is the colour assignment.

    softmax_k(-|p - c_k|^2 / tau) == softmax_k((2 p.c_k - |c_k|^2) / tau):
    |p|^2 is the same for every k and cancels.
    """
    weight = (2.0 * PROTOTYPES / TAU)[:, :, None, None]  # [K, 3, 1, 1]
    bias = -(PROTOTYPES**2).sum(axis=1) / TAU
    return weight.astype(np.float32), bias.astype(np.float32)
