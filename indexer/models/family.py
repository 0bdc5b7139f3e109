"""What a model family is: the protocols its loaded sides follow, and its registry entry.

A family owns its whole life in one `ModelEntry`: how its sides load and name themselves,
its folders and hub files in a models directory, how it is pulled, checked, optimized and
self-tested, and its thresholds. `registry.py` keeps the table of entries; a family module
(families/) builds its entry from this module alone, so registering it is one line there
and no import runs back up into the registry.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from wherein.schemas.errors import WhereinError
from wherein.schemas.models import CLIPSEG, EmbedderSpec, ModelSpec

if TYPE_CHECKING:
    import numpy as np
    from PIL import Image

    from wherein.indexer.models.modeldir import ModelDir

Log = Callable[[str], None]


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


# -- `models check`: one row per file or side -------------------------------------------------
class CheckRows:
    """The rows `models check` prints: each check runs, and any failure becomes a FAIL row."""

    def __init__(self) -> None:
        self.rows: list[dict] = []

    def add(self, model: str, file: str, expected: str, fn: Callable[[], str]) -> None:
        try:
            found, status = fn(), "ok"
        except WhereinError as exc:
            found, status = str(exc), "FAIL"
        except Exception as exc:  # a check must report, not crash
            found, status = f"{type(exc).__name__}: {exc}", "FAIL"
        self.rows.append(
            {"model": model, "file": file, "expected": expected, "found": found, "status": status}
        )


def probe_image() -> Image.Image:
    """A small photo-like image every image side must take: colour blocks, not a flat grey."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    blocks = rng.integers(0, 256, (4, 4, 3), dtype=np.uint8)
    return Image.fromarray(np.kron(blocks, np.ones((24, 24, 1), np.uint8)))


def check_sides(md: ModelDir, entry: ModelEntry, rows: CheckRows) -> None:
    """The contract every family keeps, loaded the way the commands load it: the image side
    takes its own input ([3, size, size] from `preprocess`) and gives [n, dim] unit vectors;
    the text side gives [n, dim] in the same width."""
    import numpy as np

    spec = entry.spec
    size, dim = spec.image.size, spec.dim

    def image() -> str:
        side = entry.load_image(md, 1)
        x = side.preprocess(probe_image())
        if tuple(x.shape) != (3, size, size):
            raise WhereinError(f"preprocess gives {list(x.shape)}")
        out = np.asarray(side.embed(np.stack([x, x])))
        if out.shape != (2, dim):
            raise WhereinError(f"embedding is {list(out.shape)}")
        if not np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-3):
            raise WhereinError("embeddings are not unit vectors")
        return f"[n,3,{size},{size}] -> [n,{dim}] unit vectors"

    def text() -> str:
        side = entry.load_text(md)
        out = np.asarray(side.encode(["a photo"]))
        if out.shape != (1, dim):
            raise WhereinError(f"text embedding is {list(out.shape)}")
        return f"[n,{dim}], scale {side.logit_scale:.2f}, bias {side.logit_bias:.2f}"

    rows.add(entry.key, "image side", f"[n,3,{size},{size}] -> [n,{dim}]", image)
    rows.add(entry.key, "text side", f"prompts -> [n,{dim}]", text)


@dataclass(frozen=True)
class Thresholds:
    """Cut-offs that depend on the family's embedding space."""

    near_duplicate: float = 0.95  # `dupes`' default cosine: copies, resizes, re-encodes


@dataclass(frozen=True)
class OptimizePart:
    """One thing `models optimize` builds for a family: `step` is "image" (an int8 image
    tower, kept only where it passes the gates) or "text" (a LiteRT text tower)."""

    name: str  # what `--only` takes
    step: str


@dataclass(frozen=True)
class ModelEntry:
    """One model family: its spec, how to load (or only name) its sides, and the rest of its
    life. The defaults fit a family that only loads (a test's, a plugin's): nothing to pull or
    optimize, the generic contract check, the SigLIP-like near-duplicate cut-off."""

    spec: EmbedderSpec
    load_image: Callable[[ModelDir, int | None], ImageEmbedder]
    load_text: Callable[[ModelDir], TextEncoder]
    # (model_id, model file name) as the loaded image side reports them, without loading it:
    # embed's driver and status name the model this way.
    identify: Callable[[ModelDir], tuple[str, str]]
    # Its folders in a models directory, each with the hub repository and files it comes from
    # (image side first, then text side).
    layout: tuple[ModelSpec, ...] = ()
    # pull(models root, folders (None: all), log) -> the folders written; None: nothing to
    # download.
    pull: Callable[[Path, list[str] | None, Log], list[Path]] | None = None
    # check(models dir, this entry, rows): adds `models check`'s rows for this family.
    check: Callable[[ModelDir, ModelEntry, CheckRows], None] = check_sides
    optimize: tuple[OptimizePart, ...] = ()
    # Whether the semantic self-test (drawn photos and their captions) applies: it needs
    # trained weights and CLIPSeg beside them.
    self_test: bool = False
    thresholds: Thresholds = field(default_factory=Thresholds)
    # convert(out root, config, seed, log) -> what was written: the same directory as a pull,
    # with random weights (tests and benches). None: the family has no converter.
    convert_random: Callable[[Path, str, int, Log], dict] | None = None
    # The models directory's MODEL.json for this family (its key, space, folders): written by
    # its pull and its converter, read by ModelDir.
    marker: dict = field(default_factory=dict)

    @property
    def key(self) -> str:
        return self.spec.key

    def parts(self) -> list[str]:
        """What `models optimize` builds for this family, in the order it runs them: its
        image parts, CLIPSeg's, its text parts."""
        image = [p.name for p in self.optimize if p.step == "image"]
        rest = [p.name for p in self.optimize if p.step != "image"]
        return [*image, CLIPSEG.key, *rest]
