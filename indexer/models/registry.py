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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from wherein.schemas.errors import ModelError
from wherein.schemas.models import SIGLIP2, SIGLIP_IMAGE, EmbedderSpec

if TYPE_CHECKING:
    from PIL import Image

    from wherein.indexer.models.modeldir import ModelDir

ENTRY_POINT_GROUP = "wherein.models"


class ImageEmbedder(Protocol):
    """Batches of preprocessed images -> unit vectors of `dim` in the model's space."""

    spec: EmbedderSpec
    model_id: str  # space plus the weights' digest: the index's record of its model
    space: str
    dim: int
    batch_size: int
    path: Path  # the weights' file (its name is kept in the catalog)

    def preprocess(self, image: Image.Image) -> np.ndarray: ...

    def embed(self, batch: np.ndarray) -> np.ndarray: ...


class TextEncoder(Protocol):
    """Prompts -> vectors in the image side's space, with the model's calibration."""

    logit_scale: float  # the multiplier itself (exp of the model's parameter)
    logit_bias: float

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...

    def probability(self, cosine: np.ndarray | float) -> np.ndarray: ...

    def cosine_for_probability(self, p: float) -> float: ...


class Segmenter(Protocol):
    """A prompt -> condition, an image -> vision pass, both -> a probability map."""

    def encode_prompt(self, text: str) -> np.ndarray: ...

    def image_features(self, img: Image.Image) -> Any: ...  # the model's own pass type

    def features_from(self, arrays: Sequence[np.ndarray]) -> Any: ...  # a stored pass back

    def decode(self, features: Any, cond: np.ndarray) -> np.ndarray: ...


# (models, threads, text, image, cached) -> the segmenter; text=False / image=False leave that
# side out (a worker given the condition; a driver that only computes it), cached: one per
# models dir and thread count in this process (long-lived servers and mask sessions).
LoadSegmenter = Callable[["ModelDir", int | None, bool, bool, bool], Segmenter]


@dataclass(frozen=True)
class ModelEntry:
    """One model family: its spec and how to load (or only name) its sides."""

    spec: EmbedderSpec
    load_image: Callable[[ModelDir, int | None], ImageEmbedder]
    load_text: Callable[[ModelDir], TextEncoder]
    # (model_id, model file name) as the loaded image side reports them, without loading it:
    # embed's driver and status name the model this way.
    identify: Callable[[ModelDir], tuple[str, str]]

    @property
    def key(self) -> str:
        return self.spec.key


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
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            try:
                ep.load()()
            except Exception as exc:  # a broken plugin must not take the built-in models down
                raise ModelError(f"model plugin {ep.name!r} ({ep.value}) failed: {exc}") from None


def entry(key: str) -> ModelEntry:
    if key not in _ENTRIES:
        _load_plugins()
    try:
        return _ENTRIES[key]
    except KeyError:
        known = ", ".join(sorted(_ENTRIES))
        raise ModelError(f"no model {key!r} is registered (known: {known})") from None


def keys() -> list[str]:
    _load_plugins()
    return sorted(_ENTRIES)


def entry_for(models: ModelDir) -> ModelEntry:
    return entry(models.model_key)


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


# -- the built-in entries: SigLIP 2 (LiteRT image tower; LiteRT or open_clip text tower),
#    its stand-ins (the same contract, another space), CLIPSeg ---------------------------------
def _siglip_image(models: ModelDir, threads: int | None) -> ImageEmbedder:
    from wherein.indexer.models.image_tower import ImageTower

    return ImageTower.from_models(models, threads, entry_for(models).spec)


def _siglip_text(models: ModelDir) -> TextEncoder:
    # A converted text tower (.tflite) serves queries without torch; else open_clip.
    from wherein.indexer.models.text_tower_litert import load_query_encoder

    return load_query_encoder(str(models.root))


def _siglip_identify(models: ModelDir) -> tuple[str, str]:
    models.require(SIGLIP_IMAGE)
    path = models.image_tower_file()
    st = path.stat()
    return _graph_id(models.space, path, st.st_size, st.st_mtime_ns), path.name


@functools.lru_cache(maxsize=8)
def _graph_id(space: str, graph: Path, size: int, mtime_ns: int) -> str:
    """tower_id hashes the whole graph (hundreds of MB): once per file version, not per
    /api/status request."""
    from wherein.indexer.models.image_tower import tower_id

    return tower_id(space, graph)


def _clipseg(
    models: ModelDir, threads: int | None, text: bool, image: bool, cached: bool
) -> Segmenter:
    from wherein.indexer.models.clipseg import ClipSeg, load_cached

    if cached and text and image:
        return load_cached(models.root, threads)
    return ClipSeg.load(models, threads, text=text, image=image)


SIGLIP2_ENTRY = register(ModelEntry(SIGLIP2, _siglip_image, _siglip_text, _siglip_identify))
STANDIN_ENTRY = register(
    dataclasses.replace(
        SIGLIP2_ENTRY,
        spec=dataclasses.replace(SIGLIP2, key="standin", title="stand-ins of SigLIP 2"),
    )
)
register_segmenter("clipseg", _clipseg)
