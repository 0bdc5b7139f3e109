"""The model seam: which embedding model a models directory holds, and how to load it.

One entry per model family, registered under a key, as llm does with its model classes:
every layer asks the entry (or the loaded model) for what varies — the image input, the
vector width, the prompt template, the loaders — instead of hard-wiring SigLIP 2. Adding a
model is one entry; the indexer, the shards, search and the web app do not change.

A models directory names its entry in MODEL.json (``{"model": KEY, "space": ...}``); without
one it holds SigLIP 2 (the pulled layout) or, with STANDIN.json, its stand-ins. Other
distributions add entries through the ``wherein.models`` entry-point group: each entry point
is a callable that calls :func:`register`.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wherein.indexer.models import siglip_family as K
from wherein.indexer.models.families import siglip2_b32
from wherein.indexer.models.family import (  # noqa: F401 - the seam's public names
    CheckRows,
    ImageEmbedder,
    ModelEntry,
    OptimizePart,
    Segmenter,
    TextEncoder,
    Thresholds,
)
from wherein.indexer.models.modeldir import REAL_SPACE
from wherein.schemas.errors import ModelError
from wherein.schemas.models import SIGLIP2, SIGLIP_IMAGE, SIGLIP_TEXT

if TYPE_CHECKING:
    from wherein.indexer.models.modeldir import ModelDir

ENTRY_POINT_GROUP = "wherein.models"
# "module:function" items, comma-separated, each called like an entry point: a family in a
# module that is not installed as a distribution (development, tests; Ray workers inherit it).
PLUGINS_ENV = "WHEREIN_MODEL_PLUGINS"

# (models, threads, text, image, cached) -> the segmenter; text=False / image=False leave that
# side out (a worker given the condition; a driver that only computes it), cached: one per
# models dir and thread count in this process (long-lived servers and mask sessions).
LoadSegmenter = Callable[["ModelDir", int | None, bool, bool, bool], Segmenter]

_ENTRIES: dict[str, ModelEntry] = {}
_SEGMENTERS: dict[str, LoadSegmenter] = {}
_plugins_loaded = False
_lock = threading.Lock()


def register(entry: ModelEntry) -> ModelEntry:
    """Add (or replace) the entry under its key."""
    _ENTRIES[entry.key] = entry
    return entry


def unregister(key: str) -> None:
    _ENTRIES.pop(key, None)


def register_segmenter(key: str, load: LoadSegmenter) -> None:
    _SEGMENTERS[key] = load


def _load_plugins() -> None:
    global _plugins_loaded
    with _lock:
        if _plugins_loaded:
            return
        _plugins_loaded = True
        import os
        from importlib import import_module
        from importlib.metadata import entry_points

        def from_env(value: str) -> Callable[[], Any]:
            module, _, attr = value.partition(":")
            return getattr(import_module(module), attr)

        named: list[tuple[str, str, Callable[[], Any]]] = [
            (ep.name, ep.value, ep.load) for ep in entry_points(group=ENTRY_POINT_GROUP)
        ]
        for value in filter(None, (v.strip() for v in os.environ.get(PLUGINS_ENV, "").split(","))):
            named.append((value, value, functools.partial(from_env, value)))
        for name, value, load in named:
            try:
                load()()
            except Exception as exc:  # a broken plugin must not take the built-in models down
                raise ModelError(f"model plugin {name!r} ({value}) failed: {exc}") from None


def entry(key: str) -> ModelEntry:
    if key not in _ENTRIES:
        _load_plugins()
    try:
        return _ENTRIES[key]
    except KeyError:
        known = ", ".join(sorted(_ENTRIES))
        raise ModelError(f"no model {key!r} is registered (known: {known})") from None


def keys(plugins: bool = True) -> list[str]:
    """The registered families' keys; plugins=False: without loading plugins first."""
    if plugins:
        _load_plugins()
    return sorted(_ENTRIES)


def entry_for(models: ModelDir) -> ModelEntry:
    return entry(models.model_key)


def refuse_other_family(
    recorded: str | None, models_family: str, index: Path, models: Path | None = None
) -> None:
    """One line when an index built by one family meets another family's models (searching
    would compare unrelated spaces; indexing would throw every vector away). An index from
    before families were recorded (None) is not judged here: its space is."""
    if recorded is None or recorded == models_family:
        return
    raise ModelError(
        f"the index at {index} was built with the {recorded} models, but "
        f"{models if models is not None else 'the models directory in use'} holds "
        f"{models_family}: point --models / WHEREIN_MODELS at {recorded} models, or use "
        "another --index for these"
    )


def family_of_index(family: str | None, space: str | None) -> ModelEntry:
    """The family an index was built with: the one it records, else (an index from before
    families were recorded) the stand-ins or SigLIP 2 B/16, by its space."""
    from wherein.indexer.models.modeldir import is_standin_space

    if family:
        return entry(family)
    return STANDIN_ENTRY if is_standin_space(space) else SIGLIP2_ENTRY


def load_image_embedder(models: ModelDir, threads: int | None = None) -> ImageEmbedder:
    return entry_for(models).load_image(models, threads)


def load_text_encoder(models: ModelDir) -> TextEncoder:
    return entry_for(models).load_text(models)


def load_segmenter(
    models: ModelDir,
    threads: int | None = None,
    *,
    text: bool = True,
    image: bool = True,
    cached: bool = False,
    key: str = "clipseg",
) -> Segmenter:
    """The segmenter every mask path runs (masks on hits, `wherein mask`, Ray, the web)."""
    try:
        load = _SEGMENTERS[key]
    except KeyError:
        raise ModelError(f"no segmenter {key!r} is registered") from None
    return load(models, threads, text, image, cached)


def families(plugins: bool = True) -> list[ModelEntry]:
    """Every registered family by key (plugins=False: those registered so far)."""
    return [_ENTRIES[k] for k in keys(plugins)]


# -- the built-in families: SigLIP 2 B/16 (the published LiteRT image tower; LiteRT or
#    open_clip text tower), its stand-ins (the same contract, another space), the families
#    under families/ (one line each), and the segmenter CLIPSeg ------------------------------
B16 = K.SiglipFacts(
    open_clip_name="ViT-B-16-SigLIP2",
    hub_repo=SIGLIP_TEXT.hub_repo,
    space=REAL_SPACE,
    image_folder=SIGLIP_IMAGE.key,
    text_folder=SIGLIP_TEXT.key,
    timm_name="vit_base_patch16_siglip_224",
    published=SIGLIP_IMAGE,
)
# Re-encodes, resizes and format conversions of one photo land at >= 0.95 with SigLIP 2;
# different photos of the same scene usually below.
SIGLIP2_ENTRY = register(K.siglip_entry(SIGLIP2, B16, Thresholds(near_duplicate=0.95)))
_STANDIN_SPEC = dataclasses.replace(SIGLIP2, key="standin", title="stand-ins of SigLIP 2")
# The stand-in embedding is colour histograms: every image of one colour is close (copies at
# >= 0.9999, the same colour in another layout at 0.993, other colours <= 0.68).
STANDIN_ENTRY = register(
    dataclasses.replace(
        SIGLIP2_ENTRY,
        spec=_STANDIN_SPEC,
        load_image=K.siglip_entry(_STANDIN_SPEC, B16).load_image,
        pull=None,
        thresholds=Thresholds(near_duplicate=0.998),
    )
)
register(siglip2_b32.ENTRY)


def _clipseg(
    models: ModelDir, threads: int | None, text: bool, image: bool, cached: bool
) -> Segmenter:
    from wherein.indexer.models.clipseg import ClipSeg, load_cached

    if cached and text and image:
        return load_cached(models.root, threads)
    return ClipSeg.load(models, threads, text=text, image=image)


register_segmenter("clipseg", _clipseg)
