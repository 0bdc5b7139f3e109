"""Synthetic 768-d embeddings shaped like an image collection's, regenerated chunk by chunk.

Not uniform noise (which IVF cannot index: every list is as near as every other):
- a shared mean direction (SigLIP-style image embeddings sit in a cone; random pairs
  here have cosine ~0.15, same-concept pairs ~0.65);
- 1,024 topics of 16 concepts each (16,384 clusters), Zipf-weighted (a few concepts are
  common, most rare), each concept with its own spread;
- anisotropic noise of low intrinsic dimension: 80% of its variance in 128 random
  directions with a spectrum falling as 1/sqrt(r+1) (as real embeddings have), 20% spread
  over all 768 (uniform from random bytes: Gaussian draws at 10M x 768 cost minutes a pass);
  centres drawn with per-dimension scales falling the same way;
- unit norm.

Chunk ``c`` (rows c*chunk+1 ..) comes from a generator seeded with (seed, c): any pass
over the data (catalog fill, training sample, add, exact ground truth) regenerates the
same vectors, so nothing of size N x 768 is ever held or written besides the index.

Queries: half near an item (an image query: the item plus noise, cosine ~0.9 to it),
half near a concept centre (a text-like query: between items, nearest to none).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TOPICS, PER_TOPIC = 1024, 16
RANK, LOW_RANK_SHARE = 128, 0.8
_BYTE_STD = np.float32(np.sqrt((256**2 - 1) / 12))  # std of a uniform byte


@dataclass
class Synth:
    n: int
    dim: int = 768
    chunk: int = 50_000
    seed: int = 0

    def __post_init__(self) -> None:
        rng = np.random.default_rng([self.seed, 1 << 30])
        d = self.dim
        scale = 1 / np.sqrt(np.arange(1, d + 1, dtype=np.float64))
        self.scale = (scale / np.sqrt(np.mean(scale**2))).astype(np.float32)  # E|z*s|^2 = d
        mean = rng.normal(size=d).astype(np.float32)
        self.mean = 0.5 * mean / np.linalg.norm(mean)
        topics = rng.normal(size=(TOPICS, d)).astype(np.float32) * self.scale / np.sqrt(d)
        sub = rng.normal(size=(TOPICS, PER_TOPIC, d)).astype(np.float32) * self.scale / np.sqrt(d)
        self.centres = (self.mean + topics[:, None, :] + 0.6 * sub).reshape(-1, d)
        k = len(self.centres)
        w = 1.0 / np.arange(1, k + 1) ** 0.8
        self.weights = w[rng.permutation(k)] / w.sum()
        self.spread = rng.uniform(0.55, 0.9, k).astype(np.float32)
        basis, _ = np.linalg.qr(rng.normal(size=(d, RANK)))
        spectrum = 1 / np.sqrt(np.arange(1, RANK + 1))
        spectrum *= np.sqrt(LOW_RANK_SHARE * d / np.sum(spectrum**2))  # E|noise|^2 = d
        self.low_rank = (spectrum[:, None] * basis.T).astype(np.float32)  # [RANK, d]

    @property
    def chunks(self) -> int:
        return -(-self.n // self.chunk)

    def rows(self, c: int) -> tuple[np.ndarray, np.ndarray]:
        """(ids, unit vectors float32) of chunk c."""
        lo = c * self.chunk
        k = min(self.chunk, self.n - lo)
        rng = np.random.default_rng([self.seed, c])
        which = np.sort(rng.choice(len(self.centres), size=k, p=self.weights))  # gather in order
        v = self._noise(rng, k)
        v *= (self.spread[which] / np.sqrt(self.dim))[:, None]
        v += self.centres[which]
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        return np.arange(lo + 1, lo + k + 1, dtype=np.int64), v

    def queries(self, count: int) -> tuple[np.ndarray, np.ndarray]:
        """(kind, unit queries): kind 0 = near an item, 1 = near a concept centre."""
        rng = np.random.default_rng([self.seed, 1 << 31])
        half = count // 2
        picks = np.sort(rng.choice(self.chunks, size=min(self.chunks, 8), replace=False))
        items = np.concatenate([self.rows(int(c))[1][:: max(1, self.chunk // 64)] for c in picks])
        near_item = items[rng.choice(len(items), half, replace=len(items) < half)]
        near_item = near_item + 0.45 / np.sqrt(self.dim) * self._noise(rng, half)
        concept = rng.choice(len(self.centres), count - half, p=self.weights)
        near_concept = self.centres[concept] + 0.3 / np.sqrt(self.dim) * self._noise(
            rng, count - half
        )
        q = np.concatenate([near_item, near_concept]).astype(np.float32)
        q /= np.linalg.norm(q, axis=1, keepdims=True)
        kind = np.r_[np.zeros(half, np.int8), np.ones(count - half, np.int8)]
        return kind, q

    def _noise(self, rng, k: int) -> np.ndarray:
        """[k, dim], E|row|^2 = dim: low-rank Gaussian plus a uniform residual."""
        out = rng.standard_normal((k, RANK), dtype=np.float32) @ self.low_rank
        residual = np.frombuffer(rng.bytes(k * self.dim), np.uint8).reshape(k, self.dim)
        out += (residual - np.float32(127.5)) * (np.sqrt(1 - LOW_RANK_SHARE) / _BYTE_STD)
        return out
