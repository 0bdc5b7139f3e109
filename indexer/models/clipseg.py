"""CLIPSeg rd64 as three LiteRT graphs plus host assets (contract: docs/models.md, section 3).

    prompt -> CLIP BPE ids [77] -> rows of token_embedding_f16.bin [1,77,512]
           -> text graph -> hidden [1,77,512] -> hidden[0, eot] @ W -> cond [512]
    image  -> 352x352 ImageNet-normalised -> vision graph -> (t3, t6, t9) [1,485,768]
    (t3, t6, t9, cond) -> decoder graph -> logits [1,352,352] -> sigmoid

The vision pass is the expensive part and is done once per image; cond is
cached per prompt. A prompt that fits a shorter text graph (`models optimize`'s
text_short, e.g. 16 positions) runs that one instead: the text transformer is
causal, so hidden[0, eot] is the same for any length >= eot + 1, so one image with several prompts costs one vision pass and
one decoder run per prompt. Graph tensors are bound by signature slot
(LiteRTGraph.run takes and returns slot order), never by shape: t3/t6/t9 share
one shape and a swapped binding gives a plausible but wrong mask.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
from PIL import Image

from wherein.indexer.imaging import clipseg_input
from wherein.indexer.models.modeldir import ModelDir
from wherein.schemas.errors import ModelError
from wherein.schemas.models import (
    CLIPSEG,
    CLIPSEG_EOT,
    CLIPSEG_IMAGE_SIZE,
    CLIPSEG_SOT,
    CLIPSEG_TEXT_LEN,
    CLIPSEG_TEXT_WIDTH,
    CLIPSEG_VOCAB,
    GraphSpec,
    TensorSpec,
)

MAX_CONTENT_TOKENS = CLIPSEG_TEXT_LEN - 2  # SOT and EOT take two of the 77 slots
TOKEN_TABLE = "token_embedding_f16.bin"
PROJECTION = "text_projection_f16.bin"
_GRAPH_SPECS = {g.filename: g for g in CLIPSEG.graphs}
VISION_FILE, TEXT_FILE, DECODER_FILE = (g.filename for g in CLIPSEG.graphs)


class Graph(Protocol):
    """What ClipSeg needs from a graph: inputs in slot order in, outputs in slot order out.

    LiteRTGraph is one; the parity test passes torch callables through the same code path.
    """

    def run(self, *inputs: np.ndarray) -> list[np.ndarray]: ...


class LeftOut:
    """A graph ClipSeg.load was asked to leave out."""

    def __init__(self, name: str) -> None:
        self.name = name

    def run(self, *inputs: np.ndarray) -> list[np.ndarray]:
        raise ModelError(f"{self.name}: this CLIPSeg was loaded without that graph")


def short_text_spec(filename: str, length: int) -> GraphSpec:
    """The text graph's contract at `length` positions: [1,L,512] -> [1,L,512]."""
    t = TensorSpec((1, length, CLIPSEG_TEXT_WIDTH))
    return GraphSpec(filename, (t,), (t,))


class LazyGraph:
    """A graph made on first use: loading a text graph costs about as much as several runs
    (XNNPACK packs its weights), and many processes never run it (cond is cached; a
    prompt runs only one of the 16- and 77-position graphs)."""

    def __init__(self, make: Callable[[], Graph]) -> None:
        self._make: Callable[[], Graph] | None = make
        self._graph: Graph | None = None
        self._lock = threading.Lock()

    @property
    def graph(self) -> Graph:
        with self._lock:
            if self._graph is None:
                assert self._make is not None
                self._graph = self._make()
                self._make = None
            return self._graph

    @property
    def loaded(self) -> bool:
        return self._graph is not None

    def run(self, *inputs: np.ndarray) -> list[np.ndarray]:
        return self.graph.run(*inputs)


class ShortTextGraph(LazyGraph):
    """The text graph at `length` positions (exact for prompts whose eot < length)."""

    def __init__(self, length: int, make: Callable[[], Graph]) -> None:
        super().__init__(make)
        self.length = length


@dataclass(frozen=True)
class Features:
    """The vision graph's outputs for one image, in slot order (output_0/1/2)."""

    t3: np.ndarray
    t6: np.ndarray
    t9: np.ndarray

    def in_slot_order(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.t3, self.t6, self.t9


def _asset_size_check(path: Path, expected: int, what: str) -> None:
    if not path.is_file():
        raise ModelError(f"{path}: {what} not found (run `wherein models pull`)")
    size = path.stat().st_size
    if size != expected:
        raise ModelError(f"{path}: expected {expected:,} bytes ({what}), found {size:,}")


def load_token_table(path: Path) -> np.ndarray:
    """[49408,512] float16 view of the file (memory-mapped: only the looked-up rows are read)."""
    _asset_size_check(
        path, CLIPSEG_VOCAB * CLIPSEG_TEXT_WIDTH * 2, "float16 [49408,512] token embedding table"
    )
    return np.memmap(path, dtype="<f2", mode="r", shape=(CLIPSEG_VOCAB, CLIPSEG_TEXT_WIDTH))


def load_projection(path: Path) -> np.ndarray:
    """[512,512] float32, input-major: cond = hidden_eot @ W."""
    _asset_size_check(
        path, CLIPSEG_TEXT_WIDTH * CLIPSEG_TEXT_WIDTH * 2, "float16 [512,512] text projection"
    )
    w = np.fromfile(path, dtype="<f2").reshape(CLIPSEG_TEXT_WIDTH, CLIPSEG_TEXT_WIDTH)
    return w.astype(np.float32)


def check_vocab(path: Path) -> None:
    """The bundle's vocab.json must be CLIP's: the tokenizer used here is open_clip's bundled copy."""
    if not path.is_file():
        raise ModelError(f"{path}: CLIP BPE vocabulary not found (run `wherein models pull`)")
    try:
        vocab = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ModelError(f"{path}: not a JSON vocabulary ({exc})") from None
    # HF's CLIPTokenizer spells the specials <|startoftext|>; open_clip's copy <start_of_text>.
    sot = vocab.get("<|startoftext|>", vocab.get("<start_of_text>"))
    eot = vocab.get("<|endoftext|>", vocab.get("<end_of_text>"))
    if len(vocab) != CLIPSEG_VOCAB or sot != CLIPSEG_SOT or eot != CLIPSEG_EOT:
        raise ModelError(
            f"{path}: expected the CLIP BPE vocabulary ({CLIPSEG_VOCAB} entries, SOT {CLIPSEG_SOT}, "
            f"EOT {CLIPSEG_EOT}), found {len(vocab)} entries"
        )


class Tokenizer:
    """CLIP BPE as open_clip's SimpleTokenizer encodes it: [SOT, tokens..., EOT, 0...] of length 77.

    Its bundled merges and its default ("lower") cleaning, through the torch-free copy of its
    encoder that the LiteRT text tower uses: importing open_clip.tokenizer imports torch,
    seconds that a mask would otherwise wait for a tokenizer.
    """

    def __init__(self) -> None:
        from wherein.indexer.models.clip_bpe import ClipBPE, open_clip_bpe_file
        from wherein.indexer.models.text_tower_litert import CLEANERS

        self._bpe = ClipBPE(open_clip_bpe_file())
        self._clean = CLEANERS["lower"]
        self._lock = threading.Lock()  # its BPE cache is a plain dict

    def __call__(self, text: str) -> np.ndarray:
        with self._lock:
            content = self._bpe.encode(self._clean(text))[:MAX_CONTENT_TOKENS]
        ids = np.zeros(CLIPSEG_TEXT_LEN, dtype=np.int64)
        ids[0] = CLIPSEG_SOT
        ids[1 : 1 + len(content)] = content
        ids[1 + len(content)] = CLIPSEG_EOT
        return ids


class ClipSeg:
    """CLIPSeg's host pipeline over three graphs; thread-safe (each graph is one shared model
    behind a lock, or an interpreter per thread where its weight cache cannot be had)."""

    def __init__(
        self,
        vision: Graph,
        text: Graph,
        decoder: Graph,
        token_table: np.ndarray,
        projection: np.ndarray,
        tokenizer: Tokenizer | None = None,
        short_text: ShortTextGraph | None = None,
    ) -> None:
        self.vision = vision
        self.text = text
        self.short_text = short_text  # used for prompts with eot < short_text.length
        self.decoder = decoder
        self.token_table = token_table
        self.projection = projection
        self._tokenizer = tokenizer  # made on first use (parsing the merges takes ~0.15 s)
        self._cond: dict[str, np.ndarray] = {}
        self._cond_lock = threading.Lock()

    # -- loading -------------------------------------------------------------
    @classmethod
    def load(
        cls,
        models: ModelDir,
        num_threads: int | None = None,
        text: bool = True,
        image: bool = True,
    ) -> ClipSeg:
        """The graphs and assets of models/clipseg/, each checked against its contract.

        text=False leaves out the text graph (workers that get cond from elsewhere: no
        tokenizer, no open_clip import); image=False the vision and decoder graphs (a
        driver that only computes cond). A left-out graph raises ModelError when run.
        With a short text graph that `models optimize` verified (clipseg/manifest.json),
        both text graphs load on first use: a prompt that fits runs only the short one.
        """
        from wherein.indexer.models.litert_cached import shared_weights
        from wherein.indexer.models.litert_graph import LiteRTGraph

        def make(path: Path, spec: GraphSpec) -> Graph:
            g = LiteRTGraph(path, num_threads)
            g.check(spec)  # one-line ModelError naming the file and expected I/O
            # Packed weights in one cached file for every thread, not one anonymous copy
            # per thread beside the mapped graph (a full-size CLIPSeg: 543 MB, not 957).
            return shared_weights(g)

        d = models.require(CLIPSEG)
        short = models.clipseg_text_short() if text else None
        # The vision graph may be an optimized one (clipseg/manifest.json); same contract.
        paths = {VISION_FILE: models.clipseg_vision_file()}
        wanted = {VISION_FILE: image, TEXT_FILE: text, DECODER_FILE: image}
        graphs: list[Graph] = []
        for name in (VISION_FILE, TEXT_FILE, DECODER_FILE):
            path, spec = paths.get(name, d / name), _GRAPH_SPECS[name]
            if not wanted[name]:
                graphs.append(LeftOut(name))
            elif name == TEXT_FILE and short is not None:  # verified with it: same bytes
                graphs.append(LazyGraph(functools.partial(make, path, spec)))
            else:
                graphs.append(make(path, spec))
        vision, text_graph, decoder = graphs
        model = cls.from_parts(vision, text_graph, decoder, assets_dir=d)
        if short is not None:
            spec = short_text_spec(short.path.name, short.length)
            model.short_text = ShortTextGraph(
                short.length, functools.partial(make, short.path, spec)
            )
        return model

    @classmethod
    def from_parts(cls, vision: Graph, text: Graph, decoder: Graph, assets_dir: Path) -> ClipSeg:
        """Any three graphs with the published contracts plus the bundle's host assets."""
        assets_dir = Path(assets_dir)
        table = load_token_table(assets_dir / TOKEN_TABLE)
        projection = load_projection(assets_dir / PROJECTION)
        check_vocab(assets_dir / "vocab.json")
        if not (assets_dir / "merges.txt").is_file():
            raise ModelError(
                f"{assets_dir / 'merges.txt'}: CLIP BPE merges not found (run `wherein models pull`)"
            )
        return cls(vision, text, decoder, table, projection)

    # -- text ----------------------------------------------------------------
    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            self._tokenizer = Tokenizer()
        return self._tokenizer

    def tokenize(self, text: str) -> np.ndarray:
        return self.tokenizer(text)

    def embed_tokens(self, ids: np.ndarray) -> np.ndarray:
        """[n] ids -> [1,n,512] float32 rows of the fp16 table (the graph adds positions itself)."""
        return np.asarray(self.token_table[ids], dtype=np.float32)[None]

    def encode_prompt(self, text: str) -> np.ndarray:
        """cond [512] float32 for a prompt (cached); not L2-normalised, as the decoder was trained."""
        with self._cond_lock:
            hit = self._cond.get(text)
        if hit is not None:
            return hit
        cond = self.compute_cond(text)
        with self._cond_lock:
            self._cond[text] = cond
        return cond

    def text_graph_for(self, ids: np.ndarray) -> tuple[Graph, int, int]:
        """(graph, positions to feed, eot): the short graph when eot fits in it, else the 77 one."""
        eot = int(np.argmax(ids == CLIPSEG_EOT))  # first EOT: the padding after it does not matter
        short = self.short_text
        if short is not None and eot < short.length:
            return short, short.length, eot
        return self.text, len(ids), eot

    def compute_cond(self, text: str) -> np.ndarray:
        """cond, uncached (what `models optimize` compares and times)."""
        ids = self.tokenize(text)
        graph, n, eot = self.text_graph_for(ids)
        (hidden,) = graph.run(self.embed_tokens(ids[:n]))
        return (np.asarray(hidden, dtype=np.float32)[0, eot] @ self.projection).astype(np.float32)

    # -- image ---------------------------------------------------------------
    @staticmethod
    def features_from(arrays: Sequence[np.ndarray]) -> Features:
        """A vision pass read back (e.g. from the cache), in slot order."""
        t3, t6, t9 = arrays
        return Features(t3, t6, t9)

    def image_features(self, img: Image.Image) -> Features:
        """One vision pass: outputs 0/1/2 are t3/t6/t9 (slot order, never shape)."""
        x = clipseg_input(img)[None]
        t3, t6, t9 = self.vision.run(x)
        return Features(t3, t6, t9)

    def logits(self, features: Features, cond: np.ndarray) -> np.ndarray:
        """[352,352] decoder logits; inputs bound as args_0..3 = t3, t6, t9, cond."""
        cond = np.asarray(cond, dtype=np.float32).reshape(1, CLIPSEG_TEXT_WIDTH)
        # A kept pass may be float16 (search/cache/vision_store.rounded): widened exactly.
        slots = [np.asarray(t, dtype=np.float32) for t in features.in_slot_order()]
        (out,) = self.decoder.run(*slots, cond)
        return np.asarray(out, dtype=np.float32).reshape(CLIPSEG_IMAGE_SIZE, CLIPSEG_IMAGE_SIZE)

    def decode(self, features: Features, cond: np.ndarray) -> np.ndarray:
        """[352,352] probabilities: sigmoid of the decoder logits."""
        return sigmoid(self.logits(features, cond))

    def probabilities(self, img: Image.Image, prompts: Sequence[str]) -> list[np.ndarray]:
        """One vision pass, one decoder run per prompt."""
        feats = self.image_features(img)
        return [self.decode(feats, self.encode_prompt(p)) for p in prompts]


def sigmoid(x: np.ndarray) -> np.ndarray:
    # exp of a negative magnitude never overflows
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(np.float32)


# -- a process-wide cache: loading parses three graphs and maps a 50 MB table -----------------
_CACHE: dict[tuple[str, int | None, bool], ClipSeg] = {}
_CACHE_LOCK = threading.Lock()


def load_cached(models_root: str | Path, num_threads: int | None = None) -> ClipSeg:
    from wherein.indexer.models.litert_graph import runs_concurrently

    # Graphs opened for a one-shot command hold the GIL through their runs: a server
    # in the same process gets its own (litert_graph.run_concurrently).
    key = (str(Path(models_root).resolve()), num_threads, runs_concurrently())
    with _CACHE_LOCK:
        model = _CACHE.get(key)
        if model is None:
            model = _CACHE[key] = ClipSeg.load(ModelDir(Path(models_root)), num_threads)
        return model
