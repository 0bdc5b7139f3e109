"""Stand-in SigLIP 2 towers: a colour-histogram image tower and a colour-word text tower.

Image: [1,3,224,224] (x-0.5)/0.5 -> [1,768] L2-normalised, like the published file.
Text: an open_clip CustomTextCLIP (context 64, no causal mask, last-token pool,
like ViT-B-16-SigLIP2) with open_clip's bundled CLIP BPE tokenizer; its weights
are set by hand so a colour word lands on that colour's image direction.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from wherein.indexer.models.standins import palette as P
from wherein.schemas.models import SIGLIP_EMBED_DIM, SIGLIP_IMAGE_SIZE

N_SPATIAL = P.K * P.GRID * P.GRID
TEXT_WIDTH = 64
TEXT_NOISE_DIMS = TEXT_WIDTH - 2 * P.K  # dims of non-colour words
CONTEXT_LENGTH = 64
# Calibration of the stand-in: p = sigmoid(exp(scale) * cos + bias).
LOGIT_SCALE = float(np.log(16.0))
LOGIT_BIAS = -4.0


def embedding_basis() -> np.ndarray:
    """Rows: K global colour dirs, K*16 spatial dirs, then text-noise dirs."""
    return P.orthonormal_rows(P.K + N_SPATIAL + TEXT_NOISE_DIMS, SIGLIP_EMBED_DIM, "siglip-space")


def image_tower_module():
    import torch
    import torch.nn.functional as F
    from torch import nn

    basis = embedding_basis()
    weight, bias = P.soft_assignment_params()

    class ColourImageTower(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.assign = nn.Conv2d(3, P.K, 1)
            self.assign.weight.data = torch.from_numpy(weight)
            self.assign.bias.data = torch.from_numpy(bias)
            self.register_buffer("global_dirs", torch.from_numpy(basis[: P.K].copy()))
            self.register_buffer(
                "spatial_dirs", torch.from_numpy(basis[P.K : P.K + N_SPATIAL].copy())
            )

        def forward(self, x):
            a = torch.softmax(self.assign(x * 0.5 + 0.5), dim=1)
            grid = F.avg_pool2d(a, SIGLIP_IMAGE_SIZE // P.GRID)  # [B, K, 4, 4]
            g = grid.mean(dim=(2, 3))
            e = g @ self.global_dirs + P.SPATIAL_WEIGHT * grid.flatten(1) @ self.spatial_dirs
            return e / e.norm(dim=1, keepdim=True)

    return ColourImageTower().eval()


def text_config() -> dict:
    return {
        "model_cfg": {
            "embed_dim": SIGLIP_EMBED_DIM,
            "init_logit_bias": LOGIT_BIAS,
            "custom_text": True,
            "vision_cfg": {
                "image_size": 32,
                "patch_size": 16,
                "width": 32,
                "layers": 1,
                "head_width": 16,
            },
            "text_cfg": {
                "context_length": CONTEXT_LENGTH,
                "vocab_size": 49408,
                "width": TEXT_WIDTH,
                "heads": 2,
                "layers": 1,
                "no_causal_mask": True,
                "proj_bias": True,
                "pool_type": "last",
                "norm_kwargs": {"eps": 1e-6},
            },
        },
        "preprocess_cfg": {
            "mean": [0.5, 0.5, 0.5],
            "std": [0.5, 0.5, 0.5],
            "resize_mode": "squash",
        },
    }


def colour_token_ids() -> dict[str, int]:
    from open_clip.tokenizer import SimpleTokenizer

    tok = SimpleTokenizer()
    ids = {}
    for name in P.NAMES:
        enc = tok.encode(name)
        assert len(enc) == 1, f"colour word {name!r} is not one BPE token"
        ids[name] = enc[0]
    return ids


def write_text_tower(out_dir: Path) -> None:
    """Write open_clip_config.json + open_clip_model.safetensors (loadable via local-dir:)."""
    import open_clip
    import torch
    from safetensors.torch import save_file

    out_dir.mkdir(parents=True, exist_ok=True)
    cfg = text_config()
    model_cfg = {k: v for k, v in cfg["model_cfg"].items() if k != "custom_text"}
    model = open_clip.CustomTextCLIP(**model_cfg)
    sd = {k: torch.zeros_like(v) for k, v in model.state_dict().items()}
    W = TEXT_WIDTH
    basis = torch.from_numpy(embedding_basis())
    # Colour word k: zero-mean pattern (+1, -1) on dims (2k, 2k+1), so LayerNorm keeps it.
    emb = torch.zeros(49408, W)
    noise = torch.from_numpy(
        P.rng("text-noise").standard_normal((49408, TEXT_NOISE_DIMS)).astype(np.float32)
    )
    emb[:, 2 * P.K :] = noise - noise.mean(dim=1, keepdim=True)
    for k, tid in enumerate(colour_token_ids().values()):
        emb[tid] = 0
        emb[tid, 2 * k], emb[tid, 2 * k + 1] = 1.0, -1.0
    emb[0] = 0  # the pad id: padding contributes nothing to the mean
    sd["text.token_embedding.weight"] = emb
    # Attention with q = k = 0 is uniform over all 64 positions, so the pooled last
    # (pad) position holds the mean of the words' normalised embeddings.
    in_proj = torch.zeros(3 * W, W)
    in_proj[2 * W :] = torch.eye(W)
    prefix = "text.transformer.resblocks.0."
    sd[prefix + "attn.in_proj_weight"] = in_proj
    sd[prefix + "attn.out_proj.weight"] = torch.eye(W)
    for ln in ("ln_1", "ln_2"):
        sd[prefix + f"{ln}.weight"] = torch.ones(W)
    sd["text.ln_final.weight"] = torch.ones(W)
    proj = torch.zeros(SIGLIP_EMBED_DIM, W)
    for k in range(P.K):
        proj[:, 2 * k] = basis[k] / 2
        proj[:, 2 * k + 1] = -basis[k] / 2
    noise_dirs = basis[P.K + N_SPATIAL :]
    proj[:, 2 * P.K :] = 0.05 * noise_dirs.T  # non-colour words: orthogonal to every image
    sd["text.text_projection.weight"] = proj
    sd["logit_scale"] = torch.tensor(LOGIT_SCALE)
    sd["logit_bias"] = torch.tensor(LOGIT_BIAS)
    # The vision tower is never used (images go through LiteRT); keep its init weights.
    for key, value in model.state_dict().items():
        if key.startswith("visual."):
            sd[key] = value
    model.load_state_dict(sd)
    save_file(
        {k: v.contiguous() for k, v in model.state_dict().items()},
        str(out_dir / "open_clip_model.safetensors"),
    )
    (out_dir / "open_clip_config.json").write_text(json.dumps(cfg, indent=2))
