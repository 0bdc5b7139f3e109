"""Build a complete stand-in models directory (tests, CI, and the offline demo).

The .tflite graphs are committed under ``graphs/`` because building them needs
litert-torch (the ``[convert]`` extra); ``build_graphs`` regenerates them and a
test checks that the regenerated graphs compute the same as the committed ones.
The text tower and the 50 MB CLIPSeg token table are written fresh each time.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from wherein.schemas.models import CLIPSEG, SIGLIP_IMAGE, SIGLIP_TEXT, STANDIN_MARKER

GRAPHS_DIR = Path(__file__).parent / "graphs"

# graph file -> (owning model key)
GRAPH_FILES = {
    SIGLIP_IMAGE.graphs[0].filename: SIGLIP_IMAGE.key,
    "clipseg_vision_fp16.tflite": CLIPSEG.key,
    "clipseg_text_fp16.tflite": CLIPSEG.key,
    "clipseg_decoder.tflite": CLIPSEG.key,
}


def build_graphs(out: Path = GRAPHS_DIR) -> list[Path]:
    """Convert the stand-in torch modules to LiteRT (needs litert-torch)."""
    import litert_torch
    import torch

    from wherein.indexer.models.standins import clipseg, siglip

    out.mkdir(parents=True, exist_ok=True)
    written = []
    image = siglip.image_tower_module()
    size = SIGLIP_IMAGE.graphs[0].inputs[0].shape[-1]
    # Batch 1 only, like the published file; `wherein models convert` makes batched towers.
    model = litert_torch.convert(image, (torch.zeros(1, 3, size, size),))
    written.append(_export(model, out / SIGLIP_IMAGE.graphs[0].filename))
    ex = clipseg.example_inputs()
    for name, module, fname in (
        ("vision", clipseg.vision_module(), "clipseg_vision_fp16.tflite"),
        ("text", clipseg.text_module(), "clipseg_text_fp16.tflite"),
        ("decoder", clipseg.decoder_module(), "clipseg_decoder.tflite"),
    ):
        written.append(_export(litert_torch.convert(module, ex[name]), out / fname))
    return written


def _export(model, path: Path) -> Path:
    model.export(str(path))
    return path


def build_standin_models(out_dir: str | Path, graphs_dir: Path = GRAPHS_DIR) -> Path:
    """Write a models directory with the real layout; return it."""
    from wherein.indexer.models.standins import clipseg, siglip

    out = Path(out_dir)
    missing = [f for f in GRAPH_FILES if not (graphs_dir / f).is_file()]
    if missing:
        raise FileNotFoundError(f"stand-in graphs missing in {graphs_dir}: {', '.join(missing)}")
    for fname, key in GRAPH_FILES.items():
        (out / key).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(graphs_dir / fname, out / key / fname)
    siglip.write_text_tower(out / SIGLIP_TEXT.key)
    clipseg.write_assets(out / CLIPSEG.key, siglip.colour_token_ids())
    (out / STANDIN_MARKER).write_text(
        json.dumps(
            {
                "standin": True,
                "space": "wherein-standin-colour-v1",
                "note": "Tiny stand-in models: they only know colours. "
                "Run `wherein models pull` for the real SigLIP 2 and CLIPSeg.",
            },
            indent=2,
        )
    )
    return out
