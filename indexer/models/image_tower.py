"""The SigLIP 2 image tower as a LiteRT graph: batches of preprocessed images -> unit vectors."""

from __future__ import annotations

import hashlib
import threading
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image

from wherein.indexer.imaging import model_input
from wherein.indexer.models.litert_graph import LiteRTGraph, default_threads
from wherein.indexer.models.modeldir import ModelDir
from wherein.indexer.normalize import unit_rows
from wherein.schemas.errors import ModelError
from wherein.schemas.models import SIGLIP2, SIGLIP_IMAGE, EmbedderSpec, image_graph


def file_digest(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def tower_id(space: str, graph: Path) -> str:
    """The index's model identity: embedding space plus the graph file's digest.

    Computed from the file alone, so a driver can name the model without loading it.
    """
    return f"{space}:{file_digest(graph)[:16]}"


MAX_LANES = 4  # each lane holds its own interpreter (~70 MB more for the ViT-B tower)


def lane_split(threads: int | None = None) -> tuple[int, int]:
    """(lanes, threads per lane) for `threads` model threads in all (default: one per core).

    Separate single-threaded interpreters beat one multi-threaded one on few cores: an
    XNNPACK thread pool splits each op into equal parts and its threads wait for the
    slowest, which the decode threads keep descheduling (bench/results/optimize.md).
    """
    total = threads or default_threads()
    lanes = min(total, MAX_LANES)
    return lanes, max(1, total // lanes)


def _enter_lane(here: threading.local) -> None:
    here.lane = True


class ImageTower:
    """Runs the largest batch signature the graph has; a shorter tail at batch 1.

    The published file has one signature of batch 1; a tower converted by
    `wherein models convert` adds e.g. batch 8, which runs ~2x faster per image.

    embed() runs in the caller's thread on num_threads threads. lane_pool() is for a
    caller that keeps several batches in flight (the ingest pipeline): ``lanes`` threads,
    each with its own interpreter of ``lane_threads`` threads, ``lanes * lane_threads``
    at most num_threads. The pool lives as long as the tower, so a watch's many short runs
    pack the weights once per lane, not once per run.
    """

    def __init__(
        self,
        path: Path,
        space: str,
        num_threads: int | None = None,
        spec: EmbedderSpec = SIGLIP2,
    ) -> None:
        self.path = path
        self.spec = spec
        self.graph = LiteRTGraph(path, num_threads)
        self.graph.check(image_graph(spec, path.name))
        size, dim = spec.image.size, spec.dim
        for sig in self.graph.signatures.values():
            b = sig.batch
            if sig.input_shapes != [(b, 3, size, size)] or sig.output_shapes != [(b, dim)]:
                raise ModelError(
                    f"{path.name}: signature {sig.key} is {sig.input_shapes} -> {sig.output_shapes}, "
                    f"expected [B,3,{size},{size}] -> [B,{dim}]"
                )
        self.batch_size = max(self.graph.batch_sizes)
        self.lanes, self.lane_threads = lane_split(num_threads)
        self._lane_graph: LiteRTGraph | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._here = threading.local()  # .lane: this thread is one of the pool's
        self.space = space
        self.model_id = tower_id(space, path)
        self.dim = dim

    @classmethod
    def from_models(
        cls, models: ModelDir, num_threads: int | None = None, spec: EmbedderSpec = SIGLIP2
    ) -> ImageTower:
        """spec: the model family's (registry.entry_for(models).spec); given by the caller,
        because the registry loads this module: a lookup from here would be an import cycle."""
        models.require(SIGLIP_IMAGE, models.image_dir)
        return cls(models.image_tower_file(), models.space, num_threads, spec)

    def preprocess(self, image: Image.Image) -> np.ndarray:
        return model_input(image, self.spec.image)

    def lane_pool(self) -> Executor:
        """Threads whose embed() calls run side by side, one interpreter each (made on first use)."""
        with self._pool_lock:
            if self._pool is None:
                if self.lane_threads == self.graph.num_threads:
                    self._lane_graph = self.graph  # interpreters are per thread already
                else:
                    self._lane_graph = LiteRTGraph(self.path, self.lane_threads)
                # The initializer holds the thread-local, not the tower: a tower dropped
                # ends its pool's threads, and their interpreters go with them.
                self._pool = ThreadPoolExecutor(
                    self.lanes,
                    thread_name_prefix="tower",
                    initializer=_enter_lane,
                    initargs=(self._here,),
                )
            return self._pool

    def embed(self, batch: np.ndarray) -> np.ndarray:
        """[n,3,size,size] -> [n,dim] L2-normalised (re-normalised: guards against fp16 drift).

        Thread-safe: each thread runs its own interpreter (a lane_pool() thread, its lane's)."""
        graph = self._lane_graph if getattr(self._here, "lane", False) else self.graph
        assert graph is not None  # a lane thread exists only once lane_pool() made its graph
        big = graph.signature_for_batch(self.batch_size)
        assert big is not None  # batch_size is the largest of the graph's own batch sizes
        one = graph.signature_for_batch(1)
        tail = one.key if one is not None else None
        return unit_rows(graph.run_batched(batch, big.key, tail=tail))
