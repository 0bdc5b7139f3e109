"""PyTorch towers to convert: where the weights come from, and the exact module to export.

A converted graph is only as trustworthy as the reference it is compared to, so
every tower is described by a `Source` that the manifest records and
`wherein models verify` rebuilds: the hub id or local directory of real
weights, the stand-in module, or a random-weight config with its seed (and a
digest of the weights, so a wrong rebuild is caught rather than compared).

torch, timm and open_clip are imported inside functions (the [convert] path only).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from wherein.schemas.errors import ModelError
from wherein.schemas.models import (
    SIGLIP_EMBED_DIM,
    SIGLIP_IMAGE,
    SIGLIP_IMAGE_SIZE,
    SIGLIP_TEXT,
)

REAL_SOURCE = f"hf-hub:{SIGLIP_TEXT.hub_repo}"  # open_clip ViT-B-16-SigLIP2 (webli)
TIMM_NAME = "vit_base_patch16_siglip_224"  # the timm trunk of that model
# Test-sized tower: same architecture family (no class token, MAP pool, GELU-tanh),
# same I/O contract [B,3,224,224] -> [B,768] through a linear head; converts in seconds.
SMALL_VIT = {"embed_dim": 64, "depth": 2, "num_heads": 2}
CONFIGS = ("full", "small")
KINDS = ("hub", "local-dir", "random", "standin")


@dataclass(frozen=True)
class Target:
    """What a family's converted image tower takes and gives, and where its graphs go (a model
    family's entry passes its own; the default is SigLIP 2 ViT-B/16's)."""

    image_folder: str = SIGLIP_IMAGE.key
    text_folder: str = SIGLIP_TEXT.key
    size: int = SIGLIP_IMAGE_SIZE
    dim: int = SIGLIP_EMBED_DIM
    timm_name: str = TIMM_NAME  # the trunk a `random` source builds
    file_prefix: str = "siglip2_image"


B16 = Target()


@dataclass(frozen=True)
class Source:
    """Where a tower's weights come from: hub | local-dir | random | standin."""

    kind: str
    ref: str = ""  # hub id or directory
    config: str = "full"  # random only: full | small
    seed: int = 0  # random only

    def describe(self) -> str:
        if self.kind == "random":
            return f"random weights ({self.config} config, seed {self.seed})"
        if self.kind == "standin":
            return "stand-in colour tower"
        return f"{self.kind}:{self.ref}" if self.kind == "local-dir" else self.ref

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> Source:
        try:
            return cls(
                kind=d["kind"],
                ref=d.get("ref", ""),
                config=d.get("config", "full"),
                seed=int(d.get("seed", 0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelError(f"manifest source is malformed ({exc})") from exc


def parse_source(
    spec: str | None, random_weights: bool = False, config: str = "full", seed: int = 0
) -> Source:
    """`--source` text -> Source. Default: the real hub model."""
    if config not in CONFIGS:
        raise ModelError(f"--config must be one of {', '.join(CONFIGS)}, not {config!r}")
    if random_weights:
        return Source("random", config=config, seed=seed)
    if config != "full":
        raise ModelError("--config small only applies with --random-weights")
    spec = spec or REAL_SOURCE
    if spec == "standin":
        return Source("standin")
    if spec.startswith("hf-hub:"):
        return Source("hub", ref=spec)
    if spec.startswith("local-dir:"):
        d = Path(spec[len("local-dir:") :]).expanduser()
        if not (d / "open_clip_config.json").is_file():
            raise ModelError(
                f"{d}: no open_clip_config.json (expected an open_clip model directory)"
            )
        return Source("local-dir", ref=str(d.resolve()))
    raise ModelError(f"--source {spec!r}: expected hf-hub:ORG/NAME, local-dir:PATH or standin")


def state_digest(module) -> str:
    """A digest of every parameter and buffer: the manifest pins the exact weights."""
    h = hashlib.sha256()
    for name, t in sorted(module.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().float().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


HUB_PROBE_SECONDS = 5.0
_TRUTHY = {"1", "true", "yes", "on"}


def _hub_reachable(endpoint: str) -> bool:
    """One quick request: any HTTP answer (even 404) means the hub is there."""
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(
            urllib.request.Request(endpoint, method="HEAD"), timeout=HUB_PROBE_SECONDS
        ).close()
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False
    return True


def need_hub(repo: str) -> None:
    """Fail fast, in one line, when weights must come from a hub that cannot be reached.

    huggingface_hub retries a refused connection for about half a minute, logging every
    try; a cached model needs no network, so only an uncached one is probed (once).
    """
    from huggingface_hub import try_to_load_from_cache

    if isinstance(try_to_load_from_cache(repo, "open_clip_config.json"), str):
        return
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUTHY
    if offline or not _hub_reachable(endpoint):
        why = "HF_HUB_OFFLINE is set" if offline else f"{endpoint} is unreachable"
        raise ModelError(
            f"cannot reach the Hugging Face Hub to download {repo} ({why}): "
            "pass --source local-dir:DIR or connect"
        )


def _open_clip_model(source: Source):
    if source.kind == "hub":
        need_hub(source.ref.removeprefix("hf-hub:"))
    import open_clip

    name = source.ref if source.kind == "hub" else f"local-dir:{source.ref}"
    try:
        return open_clip.create_model(name, device="cpu")
    except Exception as exc:  # open_clip wraps network/file errors in many types
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        if source.kind == "hub":
            raise ModelError(
                f"cannot load {source.ref} (offline or hub unreachable? {first[:160]}); "
                "download it where the hub is reachable and pass --source local-dir:DIR, "
                "or set HF_ENDPOINT"
            ) from exc
        raise ModelError(f"{source.ref}: cannot load the open_clip model ({first[:200]})") from exc


def _normalised(trunk):
    from torch import nn

    class Normalised(nn.Module):
        """The published graph's contract: L2-normalised [B,768]."""

        def __init__(self, inner: nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x):
            e = self.inner(x)
            return e / e.norm(dim=-1, keepdim=True).clamp_min(1e-12)

    return Normalised(trunk).eval()


def image_module(source: Source, target: Target = B16):
    """[B,3,size,size] in (x-0.5)/0.5 -> [B,dim] unit vectors, as a torch module in eval mode."""
    import torch

    if source.kind == "standin":
        from wherein.indexer.models.standins import siglip

        return siglip.image_tower_module()
    if source.kind == "random":
        import timm

        torch.manual_seed(source.seed)
        kwargs = {"num_classes": 0, "global_pool": "map"}
        if source.config == "small":
            kwargs = {"num_classes": target.dim, "global_pool": "map", **SMALL_VIT}
        trunk = timm.create_model(
            target.timm_name, pretrained=False, img_size=target.size, **kwargs
        )
        return _normalised(trunk.eval())
    model = _open_clip_model(source)
    visual = model.visual
    if visual is None:
        raise ModelError(f"{source.describe()}: model has no vision tower")
    return _normalised(visual.eval())


def text_module(source: Source):
    """(module: int tokens [B,L] -> [B,768] unit vectors, logit_scale (exp'd), logit_bias, context_length)."""
    import torch
    from torch import nn

    if source.kind in ("random", "standin"):
        raise ModelError(
            "the text tower converts from real weights: --source hf-hub:... or local-dir:DIR"
        )
    model = _open_clip_model(source)
    if getattr(model, "logit_bias", None) is None:
        raise ModelError(f"{source.describe()}: not a SigLIP model (no logit_bias)")
    model.visual = None  # only the text half is exported

    class TextTower(nn.Module):
        def __init__(self, inner) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, tokens):
            return self.inner.encode_text(tokens, normalize=True)

    ctx = int(getattr(model, "context_length", 0) or model.text.context_length)
    scale = float(model.logit_scale.detach().exp())
    bias = float(model.logit_bias.detach())
    with torch.no_grad():
        module = TextTower(model.eval()).eval()
    return module, scale, bias, ctx
