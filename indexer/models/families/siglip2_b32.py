"""SigLIP 2 ViT-B/32 at 256 px: about a third of B/16's compute, for machines that need speed.

open_clip's `ViT-B-32-SigLIP2-256` (webli weights on the hub as timm/ViT-B-32-SigLIP2-256).
No LiteRT graph is published for it, so `wherein models pull --model siglip2-b32` downloads
the open_clip weights and converts both towers (the image tower at pull, its int8 copy and
the text tower in the optimize steps that follow), each checked against open_clip.
Everything else comes from the SigLIP kit (siglip_family.py).
"""

from __future__ import annotations

from wherein.indexer.models.family import Thresholds
from wherein.indexer.models.siglip_family import SiglipFacts, siglip_entry
from wherein.schemas.models import (
    SIGLIP_EMBED_DIM,
    SIGLIP_MEAN,
    SIGLIP_PROMPT_TEMPLATE,
    SIGLIP_STD,
    EmbedderSpec,
    ImageInput,
)

KEY = "siglip2-b32"

SPEC = EmbedderSpec(
    key=KEY,
    title="SigLIP 2 ViT-B/32 256",
    image=ImageInput(256, SIGLIP_MEAN, SIGLIP_STD, "bicubic"),
    dim=SIGLIP_EMBED_DIM,
    template=SIGLIP_PROMPT_TEMPLATE,
)

FACTS = SiglipFacts(
    open_clip_name="ViT-B-32-SigLIP2-256",
    hub_repo="timm/ViT-B-32-SigLIP2-256",
    space="siglip2-vit-b32-256-webli",
    image_folder=f"{KEY}-image",
    text_folder=f"{KEY}-text",
    timm_name="vit_base_patch32_siglip_256",
)

# The same cut-off as B/16 until measured on this family's copies of one photo.
ENTRY = siglip_entry(SPEC, FACTS, Thresholds(near_duplicate=0.95))
