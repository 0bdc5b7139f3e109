"""The SigLIP family kit: a family whose image side is a LiteRT tower and whose text side is
an open_clip model (LiteRT once converted) builds its whole registry entry here from a few
facts: its spec, its open_clip name, its hub repository and its folders.

SigLIP 2 ViT-B/16 (the published LiteRT graph, `siglip2`), its stand-ins and the families
under families/ are entries made by `siglip_entry`. What a family then owns:

- layout: its image and text folders in a models directory, with their hub files;
- pull: the hub download (huggingface_hub's snapshot_download, resumable, cache-aware) and,
  for a family with no published LiteRT graph, the conversion of its image tower from the
  downloaded open_clip weights (the text tower converts in `models optimize`'s text step);
- check: its image graph's contract and its text towers, one row per file;
- optimize: the int8 image tower (gated by correlation, top-10 and speed) and the LiteRT
  text tower; the self-test; the near-duplicate threshold;
- convert_random: the same directory with random weights, for tests and benches.

torch, open_clip and the converters are imported inside functions only.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING

from wherein.indexer.models.family import (
    CheckRows,
    ImageEmbedder,
    Log,
    ModelEntry,
    OptimizePart,
    TextEncoder,
    Thresholds,
)
from wherein.schemas.errors import ModelError, WhereinError
from wherein.schemas.models import (
    CLIPSEG,
    MODEL_MARKER,
    SIGLIP_IMAGE,
    SIGLIP_TEXT,
    EmbedderSpec,
    ModelSpec,
    image_graph,
)

if TYPE_CHECKING:
    from wherein.indexer.models.modeldir import ModelDir

CONVERT_BATCHES = (1, 8)  # a converted image tower's signatures (batch 8 runs ~2x faster)
CLIP_BPE_VOCAB = 49408  # open_clip's bundled tokenizer: random-weight text towers use it
SMALL_WIDTH = 64  # --config small: towers that convert in seconds, same I/O contract


@dataclasses.dataclass(frozen=True)
class SiglipFacts:
    """What a SigLIP-like family is, beyond its spec: where its files come from and go."""

    open_clip_name: str  # e.g. "ViT-B-16-SigLIP2": its architecture (random weights)
    hub_repo: str  # open_clip weights and tokenizer (timm/ViT-B-16-SigLIP2)
    space: str  # the embedding space of the trained weights
    image_folder: str
    text_folder: str
    timm_name: str  # the image trunk (timm), for `models convert --random-weights`
    published: ModelSpec | None = None  # a published LiteRT image graph, when there is one


def text_layout(facts: SiglipFacts) -> ModelSpec:
    return dataclasses.replace(SIGLIP_TEXT, key=facts.text_folder, hub_repo=facts.hub_repo)


def image_layout(spec: EmbedderSpec, facts: SiglipFacts) -> ModelSpec:
    if facts.published is not None:
        return facts.published
    return ModelSpec(
        key=facts.image_folder,
        title=f"{spec.title} image tower (LiteRT, converted from open_clip)",
        hub_repo="",  # built by pull from the text folder's open_clip weights
        graphs=(image_graph(spec, "*.tflite"),),
    )


def convert_target(spec: EmbedderSpec, facts: SiglipFacts):
    from wherein.indexer.models.convert.towers import Target

    return Target(
        image_folder=facts.image_folder,
        text_folder=facts.text_folder,
        size=spec.image.size,
        dim=spec.dim,
        timm_name=facts.timm_name,
        file_prefix=facts.image_folder.replace("-", "_"),
    )


# -- loading ------------------------------------------------------------------------------------
def _load_image(spec: EmbedderSpec, models: ModelDir, threads: int | None) -> ImageEmbedder:
    from wherein.indexer.models.image_tower import ImageTower

    return ImageTower.from_models(models, threads, spec)


def _load_text(models: ModelDir) -> TextEncoder:
    # A converted text tower (.tflite) serves queries without torch; else open_clip.
    from wherein.indexer.models.text_tower_litert import load_query_encoder

    return load_query_encoder(str(models.root))


def _identify(models: ModelDir) -> tuple[str, str]:
    models.require(SIGLIP_IMAGE, models.image_dir)
    path = models.image_tower_file()
    st = path.stat()
    return _graph_id(models.space, path, st.st_size, st.st_mtime_ns), path.name


@functools.lru_cache(maxsize=8)
def _graph_id(space: str, graph: Path, size: int, mtime_ns: int) -> str:
    """tower_id hashes the whole graph (hundreds of MB): once per file version, not per
    /api/status request."""
    from wherein.indexer.models.image_tower import tower_id

    return tower_id(space, graph)


# -- models check -------------------------------------------------------------------------------
def _check(md: ModelDir, entry: ModelEntry, rows: CheckRows) -> None:
    """The image graph against the family's contract; the open_clip text tower; the LiteRT
    text tower when converted."""
    spec, dim = entry.spec, entry.spec.dim
    graph = image_graph(spec, SIGLIP_IMAGE.graphs[0].filename)
    try:
        name = md.image_tower_file().name
    except (WhereinError, OSError, ValueError):  # none, or a bad manifest: the expected file
        name = graph.filename

    def image() -> str:
        tower = entry.load_image(md, 1)
        return f"batch sizes {getattr(getattr(tower, 'graph', None), 'batch_sizes', '?')}"

    ins = ", ".join(t.describe() for t in graph.inputs)
    outs = ", ".join(t.describe() for t in graph.outputs)
    rows.add(md.image_dir.name, name, f"{ins} -> {outs}", image)

    def text() -> str:
        from wherein.indexer.models.text_tower import TextTower

        tower = TextTower.from_models(md)
        if tower.dim != dim:
            raise WhereinError(f"text embedding has {tower.dim} dims")
        return f"[n,{tower.dim}], scale {tower.logit_scale:.2f}, bias {tower.logit_bias:.2f}"

    rows.add(md.text_dir.name, "open_clip_config.json", f"open_clip SigLIP, [n,{dim}]", text)

    from wherein.indexer.models.text_tower_litert import (
        TEXT_GRAPH,
        LiteRTTextTower,
        has_litert_text,
    )

    if has_litert_text(md.root):  # a converted, torch-free text tower

        def litert_text() -> str:
            tower = LiteRTTextTower.from_models(md)
            if tower.dim != dim:
                raise WhereinError(f"text embedding has {tower.dim} dims")
            return f"[n,{tower.dim}], scale {tower.logit_scale:.2f}, bias {tower.logit_bias:.2f}"

        rows.add(md.text_dir.name, TEXT_GRAPH, f"LiteRT tokens -> [1,{dim}]", litert_text)


# -- pull ---------------------------------------------------------------------------------------
def claim(root: Path, entry: ModelEntry) -> None:
    """Refuse a models directory that holds another family: its index would not match, and
    its files are not ours to replace. Stand-ins give way (pull makes them real)."""
    from wherein.indexer.models.modeldir import ModelDir

    md = ModelDir(root)
    held = md.model_key
    if held not in (entry.key, "standin") and md.image_dir.is_dir():
        raise ModelError(
            f"{root} holds the {held} models; put {entry.key} in another directory "
            "(--models DIR or WHEREIN_MODELS)"
        )


def write_marker(root: Path, marker: dict, **extra: object) -> None:
    """MODEL.json: the family, its space and folders (nothing for the default layout)."""
    if not marker:
        return
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".{MODEL_MARKER}.tmp"
    tmp.write_text(json.dumps({**marker, **extra}, indent=2) + "\n")
    tmp.replace(root / MODEL_MARKER)


def _pull(
    spec: EmbedderSpec, facts: SiglipFacts, root: Path, keys: list[str] | None, log: Log
) -> list[Path]:
    from wherein.indexer.models.convert.build import convert_image_tower
    from wherein.indexer.models.convert.towers import Source
    from wherein.indexer.models.modeldir import STANDIN_MARKER, ModelDir, pull

    if facts.published is not None:  # the default layout: modeldir's, CLIPSeg included
        return pull(root, keys)
    written = pull(root, keys, specs=(image_layout(spec, facts), text_layout(facts), CLIPSEG))
    write_marker(root, _marker(spec, facts))
    if keys is None:
        (root / STANDIN_MARKER).unlink(missing_ok=True)  # the directory now holds real models
    wanted = keys is None or facts.image_folder in keys
    if wanted and not _converted_from(ModelDir(root), facts):
        # No published LiteRT graph: the image tower converts from the downloaded weights,
        # checked against open_clip; `models optimize` then makes and gates its int8 copy.
        log(f"converting the {spec.title} image tower to LiteRT")
        convert_image_tower(
            Source("local-dir", ref=str((root / facts.text_folder).resolve())),
            root,
            list(CONVERT_BATCHES),
            "fp32",
            log=lambda s: log("  " + s),
            target=convert_target(spec, facts),
        )
        written.insert(0, root / facts.image_folder)
    return written


def _converted_from(md: ModelDir, facts: SiglipFacts) -> bool:
    """The image folder already holds a tower converted from these weights (a re-pull)."""
    try:
        manifest = json.loads((md.image_dir / "manifest.json").read_text())
    except (OSError, ValueError):
        return False
    src = manifest.get("source", {})
    return (
        src.get("kind") == "local-dir"
        and Path(src.get("ref", "")) == (md.root / facts.text_folder).resolve()
    )


# -- random weights -------------------------------------------------------------------------------
def random_open_clip(out_dir: Path, name: str, size: int, config: str, seed: int) -> None:
    """An open_clip model directory (open_clip_config.json + safetensors) of the family's
    architecture with random weights, loadable by `local-dir:` as a download is.

    The text side reads open_clip's bundled CLIP BPE (the family's own tokenizer is on the
    hub, out of reach offline), so its vocabulary is that tokenizer's; `small` shrinks both
    towers to width 64 and 2 layers (same inputs and outputs) so it converts in seconds.
    """
    import open_clip
    import torch
    from safetensors.torch import save_file

    cfg = open_clip.get_model_config(name)
    if cfg is None:
        raise ModelError(f"open_clip has no model config {name!r}")
    cfg = json.loads(json.dumps(cfg))
    text = cfg["text_cfg"]
    text["vocab_size"] = CLIP_BPE_VOCAB
    text.pop("hf_tokenizer_name", None)
    text.pop("tokenizer_kwargs", None)
    if config == "small":
        text.update(width=SMALL_WIDTH, heads=2, layers=2)
        cfg["vision_cfg"] = {
            "image_size": size,
            "patch_size": 32,
            "width": SMALL_WIDTH,
            "layers": 2,
            "head_width": 32,
        }
    torch.manual_seed(seed)
    model_cfg = {k: v for k, v in cfg.items() if k != "custom_text"}
    model = open_clip.CustomTextCLIP(**model_cfg).eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    config_json = {
        "model_cfg": cfg,
        "preprocess_cfg": {"mean": [0.5] * 3, "std": [0.5] * 3, "resize_mode": "squash"},
    }
    (out_dir / "open_clip_config.json").write_text(json.dumps(config_json, indent=2) + "\n")
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(out_dir / "open_clip_model.safetensors"))


def _convert_random(
    spec: EmbedderSpec, facts: SiglipFacts, root: Path, config: str, seed: int, log: Log
) -> dict:
    """The directory `pull` builds, with random weights: both towers converted to LiteRT and
    checked against open_clip, MODEL.json naming the family in a space of its own."""
    from wherein.indexer.models.convert.build import convert_image_tower, convert_text_tower
    from wherein.indexer.models.convert.towers import CONFIGS, Source
    from wherein.indexer.models.modeldir import ModelDir

    if config not in CONFIGS:
        raise ModelError(f"--config must be one of {', '.join(CONFIGS)}, not {config!r}")
    md = ModelDir(root)
    info = md.model_info or {}
    if (md.image_dir.is_dir() or md.text_dir.is_dir()) and not info.get("random"):
        raise ModelError(
            f"{root} holds models that are not random-weight ones; write random-weight "
            "towers into another --out directory"
        )
    space = f"{facts.space}-random-{config}-seed{seed}"  # never mixed with the trained space
    write_marker(root, _marker(spec, facts), space=space, random=True)
    text_dir = root / facts.text_folder
    log(f"building random {facts.open_clip_name} weights ({config} config, seed {seed})")
    random_open_clip(text_dir, facts.open_clip_name, spec.image.size, config, seed)
    source = Source("local-dir", ref=str(text_dir.resolve()))
    image = convert_image_tower(
        source,
        root,
        list(CONVERT_BATCHES),
        "fp32",
        log=log,
        target=convert_target(spec, facts),
    )
    text = convert_text_tower(source, root, "fp32", log=log, folder=facts.text_folder)
    return {"model": spec.key, "space": space, "image": image, "text": text}


# -- the entry -------------------------------------------------------------------------------------
def _marker(spec: EmbedderSpec, facts: SiglipFacts) -> dict:
    if facts.published is not None:  # the default layout needs no MODEL.json
        return {}
    return {
        "model": spec.key,
        "space": facts.space,
        "folders": {"image": facts.image_folder, "text": facts.text_folder},
    }


def siglip_entry(
    spec: EmbedderSpec, facts: SiglipFacts, thresholds: Thresholds | None = None
) -> ModelEntry:
    """The whole registry entry of a SigLIP-like family."""
    return ModelEntry(
        spec=spec,
        load_image=functools.partial(_load_image, spec),
        load_text=_load_text,
        identify=_identify,
        layout=(image_layout(spec, facts), text_layout(facts)),
        pull=functools.partial(_pull, spec, facts),
        check=_check,
        optimize=(
            OptimizePart(facts.image_folder, "image"),
            OptimizePart(facts.text_folder, "text"),
        ),
        self_test=True,
        thresholds=thresholds or Thresholds(),
        # A family with a published graph converts its towers one by one (`models convert
        # siglip2`); the others build their whole directory.
        convert_random=None
        if facts.published is not None
        else functools.partial(_convert_random, spec, facts),
        marker=_marker(spec, facts),
    )
