"""The SigLIP 2 text tower as a LiteRT graph: a query needs no torch when it is present.

`wherein models convert siglip2-text` writes MODELS/siglip2-text/text_tower.tflite
(tokens int32 [1,L] -> [1,768] unit vector) and manifest.json (tokenizer recipe,
logit_scale/logit_bias, parity figures). Tokenization here is torch-free and was
checked token-for-token against open_clip's tokenizer when the graph was converted:

- "hf": the Hugging Face `tokenizers` library on tokenizer.json (Gemma SentencePiece
  for the real model), after open_clip's cleaning (clean='canonicalize': ftfy, HTML
  unescape, punctuation strip, lower case, whitespace collapse);
- "clip-bpe": open_clip's CLIP BPE (its module imports torch, so the ~40 lines of
  byte-level BPE are repeated here over the same bundled vocabulary file).

Both then add the manifest's prefix/suffix special ids (e.g. EOS 1) and right-pad
with 0 to the context length, truncating content as open_clip does.
"""

from __future__ import annotations

import html
import json
import string
import threading
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

import numpy as np

from wherein.indexer.models.bpe_index import IndexedBPE, ensure_index
from wherein.indexer.models.clip_bpe import ClipBPE
from wherein.indexer.models.modeldir import ModelDir
from wherein.indexer.models.text_tower import CalibratedScores
from wherein.indexer.normalize import unit_rows
from wherein.schemas.errors import ModelError

TEXT_GRAPH = "text_tower.tflite"
TEXT_MANIFEST = "manifest.json"


# -- cleaning (same functions as open_clip/tokenizer.py) -------------------------
def _fix_text(text: str) -> str:
    """ftfy.fix_text, without importing ftfy (~0.1 s) for text it cannot change.

    Every ftfy fix needs a non-ASCII character, a control character or an HTML entity:
    printable ASCII without '&' comes back as it went in (checked in tests).
    """
    if text.isascii() and text.isprintable() and "&" not in text:
        return text
    import ftfy

    return ftfy.fix_text(text)


def _basic_clean(text: str) -> str:
    return html.unescape(html.unescape(_fix_text(text))).strip()


_PUNCT = str.maketrans("", "", string.punctuation)


def _canonicalize(text: str) -> str:
    text = _basic_clean(text).replace("_", " ").translate(_PUNCT).lower()
    return " ".join(text.split()).strip()


def _lower(text: str) -> str:
    return " ".join(_basic_clean(text).split()).strip().lower()


def _whitespace(text: str) -> str:
    return " ".join(_basic_clean(text).split()).strip()


CLEANERS: dict[str, Callable[[str], str]] = {
    "canonicalize": _canonicalize,
    "lower": _lower,
    "whitespace": _whitespace,
}


# -- tokenizers ------------------------------------------------------------------
class HFTokens:
    """tokenizer.json through the `tokenizers` library; special ids come from the manifest."""

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer

        self.tok = Tokenizer.from_file(str(path))

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids


def hf_tokens(path: Path) -> IndexedBPE | HFTokens:
    """The indexed BPE (same ids, no full load) where it applies, else the full tokenizer."""
    index = ensure_index(path)
    if index is not None:
        try:
            return IndexedBPE(index, path)
        except Exception:  # noqa: BLE001 - any fault in the shortcut: the full load is exact
            pass
    return HFTokens(path)


class QueryTokenizer:
    """clean -> content ids -> prefix + content + suffix, truncated and 0-padded to length."""

    def __init__(self, directory: Path, recipe: dict) -> None:
        kind = recipe.get("kind")
        path = directory / str(recipe.get("file", ""))
        if not path.is_file():
            raise ModelError(f"{path}: tokenizer file named in the text manifest is missing")
        if kind == "clip-bpe":
            self.content: ClipBPE | HFTokens | IndexedBPE = ClipBPE(path)
        elif kind == "hf":
            self.content = hf_tokens(path)
        else:
            raise ModelError(f"text manifest: unknown tokenizer kind {kind!r}")
        clean = recipe.get("clean", "whitespace")
        if clean not in CLEANERS:
            raise ModelError(f"text manifest: unknown cleaning {clean!r}")
        self.clean = CLEANERS[clean]
        self.prefix = [int(i) for i in recipe.get("prefix", [])]
        self.suffix = [int(i) for i in recipe.get("suffix", [])]
        self.length = int(recipe["context_length"])
        self.pad = int(recipe.get("pad_id", 0))

    def __call__(self, texts: list[str]) -> np.ndarray:
        room = self.length - len(self.prefix) - len(self.suffix)
        out = np.full((len(texts), self.length), self.pad, dtype=np.int64)
        for i, text in enumerate(texts):
            ids = self.prefix + self.content.encode(self.clean(text))[:room] + self.suffix
            out[i, : len(ids)] = ids
        return out


# -- the tower -------------------------------------------------------------------
def read_text_manifest(directory: Path) -> dict:
    path = directory / TEXT_MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ModelError(f"{path}: cannot read the text tower manifest ({exc})") from exc
    for key in ("file", "tokenizer", "logit_scale", "logit_bias"):
        if key not in manifest:
            raise ModelError(f"{path}: manifest has no {key!r}")
    return manifest


class LiteRTTextTower(CalibratedScores):
    """Same interface as search.text_tower.TextTower, on LiteRT: no torch at query time."""

    def __init__(self, directory: Path, space: str, num_threads: int | None = None) -> None:
        from wherein.indexer.models.litert_cached import CachedGraph, open_cached
        from wherein.indexer.models.litert_graph import default_threads

        self.manifest = read_text_manifest(directory)
        path = directory / self.manifest["file"]
        if not path.is_file():
            raise ModelError(f"{path}: text tower graph not found")
        threads = num_threads or min(2, default_threads())
        # Packed weights mapped from a cache where LiteRT's CompiledModel allows (no
        # ~0.5 s repacking per start), else the Interpreter; both run the same kernels.
        self._graph: CachedGraph | None = open_cached(
            path, threads, str(self.manifest.get("sha256", ""))
        )
        if self._graph is not None:
            in_shape, out_shape = self._graph.in_shape, self._graph.out_shape
        else:
            in_shape, out_shape = self._open_interpreter(path, threads)
        self.tokenizer = QueryTokenizer(directory, self.manifest["tokenizer"])
        if tuple(in_shape) != (1, self.tokenizer.length):
            raise ModelError(
                f"{path}: input is {list(in_shape)}, expected [1,{self.tokenizer.length}]"
            )
        self.path = path
        self.space = space
        self.dim = int(out_shape[-1])
        self.logit_scale = float(self.manifest["logit_scale"])
        self.logit_bias = float(self.manifest["logit_bias"])
        self._lock = threading.Lock()

    def _open_interpreter(self, path: Path, threads: int) -> tuple[tuple[int, ...], ...]:
        from ai_edge_litert.interpreter import Interpreter

        from wherein.indexer.models.litert_graph import drop_mapped_pages

        try:
            self._interp = Interpreter(model_path=str(path), num_threads=threads)
            self._interp.allocate_tensors()  # XNNPACK packs the weights here
        except (ValueError, RuntimeError) as exc:
            raise ModelError(f"{path}: not a loadable LiteRT model ({exc})") from exc
        drop_mapped_pages(path)  # the float weights: only the token table is read again
        sigs = self._interp.get_signature_list()
        key = "serving_default" if "serving_default" in sigs else next(iter(sigs))
        self._runner = self._interp.get_signature_runner(key)
        ((self._in_name, in_detail),) = self._runner.get_input_details().items()
        ((self._out_name, out_detail),) = self._runner.get_output_details().items()
        self._in_dtype = in_detail["dtype"]
        return tuple(in_detail["shape"]), tuple(out_detail["shape"])

    @classmethod
    def from_models(cls, models: ModelDir) -> LiteRTTextTower:
        return cls(models.text_dir, models.space)

    def encode_tokens(self, tokens: np.ndarray) -> np.ndarray:
        out = np.empty((len(tokens), self.dim), dtype=np.float32)
        with self._lock:  # one interpreter: not thread-safe
            for i, row in enumerate(tokens):
                if self._graph is not None:
                    out[i] = self._graph.run(row[None, :])[0]
                    continue
                feed = np.ascontiguousarray(row[None, :], dtype=self._in_dtype)
                out[i] = self._runner(**{self._in_name: feed})[self._out_name][0]
        return unit_rows(out)

    def encode(self, texts: list[str]) -> np.ndarray:
        """[n, dim] L2-normalised, in the image tower's space."""
        return self.encode_tokens(self.tokenizer(list(texts)))


def has_litert_text(models_root: str | Path) -> bool:
    d = ModelDir(Path(models_root)).text_dir
    return (d / TEXT_GRAPH).is_file() and (d / TEXT_MANIFEST).is_file()


def load_query_encoder(models_root: str):
    """The LiteRT text tower when converted (no torch import), else open_clip's TextTower."""
    from wherein.indexer.models.litert_graph import runs_concurrently

    # A tower opened for a one-shot command holds the GIL through its runs: never hand it
    # to a server (or the other way round) in one process.
    return _query_encoder(models_root, runs_concurrently())


@lru_cache(maxsize=4)
def _query_encoder(models_root: str, concurrent: bool):
    if has_litert_text(models_root):
        return LiteRTTextTower.from_models(ModelDir(Path(models_root)))
    from wherein.indexer.models.text_tower import load_text_tower

    return load_text_tower(models_root)
