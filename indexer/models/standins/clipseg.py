"""Stand-in CLIPSeg: three graphs and host assets with the published bundle's contract.

vision  [1,3,352,352] (ImageNet-normalised) -> t3, t6, t9 [1,485,768]
text    token embeddings [1,77,512]         -> hidden [1,77,512]
decoder t3, t6, t9, cond [1,512]            -> logits [1,352,352]

The mask follows the prompt's colour: t3, t6 and t9 each carry the per-patch
colour histograms, each in its own basis (the colours permuted differently per
slot). The decoder reads every slot in that slot's basis and averages the
three, so all three are needed: with any two of them bound in each other's
place, two thirds of the evidence names other colours and the prompt's colour
stays below p = 0.5 (an empty or misplaced mask, not just noise).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from wherein.indexer.models.standins import palette as P
from wherein.schemas.models import (
    CLIPSEG_IMAGE_SIZE,
    CLIPSEG_MEAN,
    CLIPSEG_STD,
    CLIPSEG_TEXT_LEN,
    CLIPSEG_TEXT_WIDTH,
    CLIPSEG_VOCAB,
    CLIPSEG_WIDTH,
)

PATCH = 16
GRID = CLIPSEG_IMAGE_SIZE // PATCH  # 22
LOGIT_GAIN = 12.0
PERM_T6 = np.roll(np.arange(P.K), 3)
PERM_T9 = np.roll(np.arange(P.K), 5)


def feature_basis() -> np.ndarray:
    return P.orthonormal_rows(P.K, CLIPSEG_WIDTH, "clipseg-features")  # [K, 768]


def slot_bases() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The [K, 768] basis of t3, t6 and t9: colour k of slot i is row k of its basis."""
    basis = feature_basis()
    return basis, basis[np.argsort(PERM_T6)], basis[np.argsort(PERM_T9)]


def cond_basis() -> np.ndarray:
    return P.orthonormal_rows(P.K, CLIPSEG_TEXT_WIDTH, "clipseg-cond")  # [K, 512]


def vision_module():
    import torch
    import torch.nn.functional as F
    from torch import nn

    weight, bias = P.soft_assignment_params()
    b3, b6, b9 = (torch.from_numpy(b) for b in slot_bases())

    class ColourVision(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.assign = nn.Conv2d(3, P.K, 1)
            self.assign.weight.data = torch.from_numpy(weight)
            self.assign.bias.data = torch.from_numpy(bias)
            self.register_buffer("mean", torch.tensor(CLIPSEG_MEAN).view(1, 3, 1, 1))
            self.register_buffer("std", torch.tensor(CLIPSEG_STD).view(1, 3, 1, 1))
            self.register_buffer("b3", b3.clone())
            self.register_buffer("b6", b6.clone())
            self.register_buffer("b9", b9.clone())

        def forward(self, x):
            a = torch.softmax(self.assign(x * self.std + self.mean), dim=1)
            patches = F.avg_pool2d(a, PATCH).flatten(2).transpose(1, 2)  # [1, 484, K]
            tokens = torch.cat([patches.mean(dim=1, keepdim=True), patches], dim=1)  # CLS first
            return tokens @ self.b3, tokens @ self.b6, tokens @ self.b9

    return ColourVision().eval()


def text_module():
    import torch
    from torch import nn

    class CausalMeanText(nn.Module):
        """Position i holds the LayerNorm of the mean of tokens 0..i (causal, like CLIP)."""

        def __init__(self) -> None:
            super().__init__()
            tri = torch.tril(torch.ones(CLIPSEG_TEXT_LEN, CLIPSEG_TEXT_LEN))
            self.register_buffer("avg", tri / tri.sum(dim=1, keepdim=True))

        def forward(self, x):
            h = self.avg @ x[0]
            h = h - h.mean(dim=-1, keepdim=True)
            h = h / torch.sqrt((h * h).mean(dim=-1, keepdim=True) + 1e-5)
            return h.unsqueeze(0)

    return CausalMeanText().eval()


def decoder_module():
    import torch
    import torch.nn.functional as F
    from torch import nn

    b3, b6, b9 = (torch.from_numpy(b) for b in slot_bases())
    cb = torch.from_numpy(cond_basis())

    class ColourDecoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("b3", b3)
            self.register_buffer("b6", b6)
            self.register_buffer("b9", b9)
            self.register_buffer("cb", cb)

        def forward(self, t3, t6, t9, cond):
            c = cond @ self.cb.T  # [1, K]: how much of each colour the prompt names
            c = c / (c.norm(dim=1, keepdim=True) + 1e-3)
            # Each slot read in its own basis: [1, 484, K] colour histograms, averaged.
            hist = (
                t3[:, 1:, :] @ self.b3.T + t6[:, 1:, :] @ self.b6.T + t9[:, 1:, :] @ self.b9.T
            ) / 3.0
            score = (hist @ c.T).reshape(1, 1, GRID, GRID)
            logits = LOGIT_GAIN * (score - 0.5)
            up = F.interpolate(
                logits, size=(CLIPSEG_IMAGE_SIZE, CLIPSEG_IMAGE_SIZE), mode="bilinear"
            )
            return up[:, 0]

    return ColourDecoder().eval()


def example_inputs():
    import torch

    feat = torch.randn(1, 485, CLIPSEG_WIDTH)
    return {
        "vision": (torch.randn(1, 3, CLIPSEG_IMAGE_SIZE, CLIPSEG_IMAGE_SIZE),),
        "text": (torch.randn(1, CLIPSEG_TEXT_LEN, CLIPSEG_TEXT_WIDTH),),
        "decoder": (feat, feat.clone(), feat.clone(), torch.randn(1, CLIPSEG_TEXT_WIDTH)),
    }


def write_assets(out_dir: Path, colour_token_ids: dict[str, int]) -> None:
    """token_embedding_f16.bin, text_projection_f16.bin, vocab.json, merges.txt."""
    out_dir.mkdir(parents=True, exist_ok=True)
    table = np.zeros((CLIPSEG_VOCAB, CLIPSEG_TEXT_WIDTH), dtype=np.float32)
    noise = P.rng("clipseg-noise").standard_normal((CLIPSEG_VOCAB, CLIPSEG_TEXT_WIDTH - 2 * P.K))
    table[:, 2 * P.K :] = 0.3 * noise
    for k, tid in enumerate(colour_token_ids.values()):
        table[tid] = 0
        table[tid, 2 * k], table[tid, 2 * k + 1] = 1.0, -1.0
    table.astype("<f2").tofile(out_dir / "token_embedding_f16.bin")
    # Input-major [512, 512]: cond = hidden @ W; the colour pattern maps onto cond_basis.
    W = np.zeros((CLIPSEG_TEXT_WIDTH, CLIPSEG_TEXT_WIDTH), dtype=np.float32)
    cb = cond_basis()
    for k in range(P.K):
        W[2 * k] = cb[k]
        W[2 * k + 1] = -cb[k]
    W.astype("<f2").tofile(out_dir / "text_projection_f16.bin")
    write_bpe_files(out_dir)


def write_bpe_files(out_dir: Path) -> None:
    """vocab.json + merges.txt in HF CLIPTokenizer form, from open_clip's bundled BPE."""
    import json

    from open_clip.tokenizer import SimpleTokenizer

    tok = SimpleTokenizer()
    # Same ids; HF (and the published bundle) spell the specials <|startoftext|>/<|endoftext|>.
    hf_names = {"<start_of_text>": "<|startoftext|>", "<end_of_text>": "<|endoftext|>"}
    vocab = {hf_names.get(k, k): v for k, v in tok.encoder.items()}
    (out_dir / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    merges = sorted(tok.bpe_ranks.items(), key=lambda kv: kv[1])
    lines = ["#version: 0.2"] + [" ".join(pair) for pair, _ in merges]
    (out_dir / "merges.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
