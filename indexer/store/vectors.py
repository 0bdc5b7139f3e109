"""The FAISS side of an index: a derived, atomically replaced copy of the catalog's embeddings.

``vectors.faiss`` is written to a temporary file, fsynced and renamed, then
``vectors.json`` records which catalog generation and model it reflects. When
either is missing, unreadable or behind the catalog (a crash between a SQLite
commit and the next save), ``sync`` brings the index back in line from the
catalog: by id difference when only rows came and went, by a full rebuild when
the model or the index type changed.

An on-disk IVF index (kind ``ivf-sq8-ondisk``) keeps its lists in a memory-mapped
``.ivfdata`` file beside ``vectors.faiss``. FAISS stores that file's name inside
``vectors.faiss``; wherein stores the bare name and always opens it from the folder
``vectors.faiss`` is read from, so an index folder can be moved or copied whole.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePath

import faiss
import numpy as np

from wherein.indexer.normalize import unit_rows
from wherein.indexer.store.atomic import atomic_path, write_atomic
from wherein.indexer.store.catalog import Catalog
from wherein.schemas.errors import IndexError_

FAISS_FILE = "vectors.faiss"
SIDECAR_FILE = "vectors.json"
ONDISK_KIND = "ivf-sq8-ondisk"  # IVF whose lists live in a memory-mapped .ivfdata file

EXACT_LIMIT = 100_000  # below this, exact search is fast enough and has recall 1.0
BYTES_PER_VECTOR = {"flat": 4.0, "sq8": 1.0}  # per dimension, plus ids


@dataclass(frozen=True)
class IndexChoice:
    kind: str  # "flat" | "ivf-sq8" | "ivf-flat"
    factory: str  # faiss.index_factory string
    nlist: int = 0
    nprobe: int = 0

    def as_dict(self) -> dict:
        return {
            "kind": self.kind,
            "factory": self.factory,
            "nlist": self.nlist,
            "nprobe": self.nprobe,
        }


def choose_index(n: int, dim: int, memory_budget: int | None = None) -> IndexChoice:
    """Exact below EXACT_LIMIT (or while it fits the budget); IVF{nlist},SQ8 beyond.

    Below 100k vectors a Flat scan is a few ms per query with recall 1.0. Beyond,
    IVF,SQ8 keeps 1 byte/dim (4x smaller than Flat) and supports remove_ids, which
    keeps incremental deletes cheap (HNSW does not). nlist ~ sqrt(n) (a power of
    two: 1024 at 1M) keeps the k-means training and the add pass within a couple of
    minutes on 2 cores. Every search re-scores 4x its k in candidates with the stored
    vectors, so the probe count only has to put the true top 10 among the candidates:
    nprobe = nlist/64 (at least 16) gave recall@10 0.997 at 1M (nprobe 16) and 0.998 at
    10M (nprobe 64, 41 ms median per query, where nlist/16 took 129 ms for 0.9993) on
    clustered synthetic 768-d vectors (bench/bench_scale.py, bench/results/scale.md).
    An index keeps the nprobe it was built with (vectors.json).
    """
    flat_bytes = n * (dim * 4 + 16)
    if n < EXACT_LIMIT and (memory_budget is None or flat_bytes <= memory_budget):
        return IndexChoice("flat", "IDMap2,Flat")
    nlist = max(64, min(65536, int(math.sqrt(max(n, 1)))))
    nlist = 1 << round(math.log2(nlist))
    nprobe = max(16, nlist // 64)
    return IndexChoice("ivf-sq8", f"IVF{nlist},SQ8", nlist, nprobe)


def new_index(choice: IndexChoice, dim: int) -> faiss.Index:
    return faiss.index_factory(dim, choice.factory, faiss.METRIC_INNER_PRODUCT)


def apply_search_params(index: faiss.Index, choice: IndexChoice) -> None:
    if choice.nprobe:
        faiss.extract_index_ivf(index).nprobe = choice.nprobe


def index_ids(index: faiss.Index) -> np.ndarray:
    """The ids an index holds (IDMap2 or IVF)."""
    if isinstance(index, faiss.IndexIDMap2 | faiss.IndexIDMap):
        return faiss.vector_to_array(index.id_map).astype(np.int64)
    ivf = faiss.extract_index_ivf(index)
    invlists = ivf.invlists
    assert invlists is not None  # an IVF index always holds its lists
    ids = []
    for lst in range(ivf.nlist):
        size = invlists.list_size(lst)
        if size:
            ids.append(faiss.rev_swig_ptr(invlists.get_ids(lst), size).copy())
    return np.concatenate(ids).astype(np.int64) if ids else np.zeros(0, dtype=np.int64)


class VectorIndex:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.index: faiss.Index | None = None
        self.choice: IndexChoice | None = None
        self.generation = -1
        self.model_id: str | None = None
        self.dim = 0
        self.dirty = False  # in memory differs from what is on disk: save() would write something

    @property
    def faiss_path(self) -> Path:
        return self.dir / FAISS_FILE

    @property
    def sidecar_path(self) -> Path:
        return self.dir / SIDECAR_FILE

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal) if self.index is not None else 0

    def sidecar(self) -> dict | None:
        """What vectors.json says, without reading the (possibly GBs) FAISS file."""
        try:
            return json.loads(self.sidecar_path.read_text())
        except (OSError, ValueError):
            return None

    def load(self) -> bool:
        """Load what is on disk; False when there is nothing usable (it will be rebuilt)."""
        try:
            side = json.loads(self.sidecar_path.read_text())
            ondisk = (side.get("index") or {}).get("kind") == ONDISK_KIND
            index = read_index_file(self.faiss_path, ondisk)
        except (OSError, ValueError, RuntimeError):
            return False
        choice = IndexChoice(**side["index"])
        if index.ntotal != side.get("count", -1) or index.d != side.get("dim"):
            return False  # the sidecar describes another file: treat as stale
        self.index, self.choice = index, choice
        self.generation, self.model_id, self.dim = side["generation"], side["model_id"], side["dim"]
        apply_search_params(index, choice)
        self.dirty = False
        return True

    def save(self) -> None:
        assert self.index is not None and self.choice is not None
        self.dir.mkdir(parents=True, exist_ok=True)
        with atomic_path(self.faiss_path) as tmp, _ivfdata_named_by_file_name(self.index, self.dir):
            write_index_file(self.index, tmp)
        side = {
            "generation": self.generation,
            "model_id": self.model_id,
            "dim": self.dim,
            "count": int(self.index.ntotal),
            "index": self.choice.as_dict(),
        }
        write_atomic(self.sidecar_path, json.dumps(side, indent=2).encode())
        self.dirty = False

    def is_current(self, catalog: Catalog) -> bool:
        return (
            self.index is not None
            and self.generation == catalog.generation
            and self.model_id == catalog.get_meta("model_id")
        )

    def sync(self, catalog: Catalog, memory_budget: int | None = None) -> str:
        """Bring the index in line with the catalog; return what was done ("" if nothing).

        Everything is read in one SQLite read transaction: the index ends up exactly
        at one committed generation, even while a writer commits batches meanwhile
        (without it, the generation recorded could be newer than the ids read, and
        the batch in between would stay missing until the next commit).
        """
        with catalog.snapshot():
            return self._sync(catalog, memory_budget)

    def _sync(self, catalog: Catalog, memory_budget: int | None) -> str:
        model_id = catalog.get_meta("model_id")
        dim = int(catalog.get_meta("dim", 0) or 0)
        if self.is_current(catalog):
            return ""
        n = catalog.count_embedded()
        want = choose_index(n, dim or 1, memory_budget)
        needs_rebuild = (
            self.index is None
            or self.model_id != model_id
            or self.dim != dim
            or self.choice is None
            or self.choice.kind != want.kind
            or (want.kind != "flat" and _ivf_outgrown(self.choice, want))
        )
        if needs_rebuild and self._disk_is_current(catalog) and self.load():
            # A writer already saved this generation (a long-running reader such as
            # `serve` after a re-index): reading it beats rebuilding, which may train IVF.
            return f"reloaded {self.faiss_path.name} ({self.ntotal} vectors)"
        if needs_rebuild:
            self._rebuild(catalog, want, dim)
            action = f"rebuilt {want.kind} index from catalog ({n} vectors)"
        else:
            assert self.index is not None
            have = index_ids(self.index)
            target = catalog.embedded_ids()
            stale = np.setdiff1d(have, target, assume_unique=True)
            missing = np.setdiff1d(target, have, assume_unique=True)
            if len(stale):
                self.index.remove_ids(faiss.IDSelectorBatch(stale))
            for start in range(0, len(missing), 4096):
                ids, vecs = catalog.vectors_for(missing[start : start + 4096])
                if len(ids):
                    self.index.add_with_ids(unit_rows(vecs), ids)
            action = f"updated index: +{len(missing)} -{len(stale)} vectors"
        self.generation, self.model_id, self.dim = catalog.generation, model_id, dim
        self.dirty = True
        return action

    def _disk_is_current(self, catalog: Catalog) -> bool:
        side = self.sidecar() or {}
        return side.get("generation") == catalog.generation and side.get(
            "model_id"
        ) == catalog.get_meta("model_id")

    def _rebuild(self, catalog: Catalog, choice: IndexChoice, dim: int) -> None:
        if dim == 0:
            self.index, self.choice = (
                new_index(IndexChoice("flat", "IDMap2,Flat"), 1),
                IndexChoice("flat", "IDMap2,Flat"),
            )
            return
        index = new_index(choice, dim)
        if not index.is_trained:
            index.train(_training_sample(catalog, choice.nlist * 64))
        for ids, vecs in catalog.iter_vectors():
            index.add_with_ids(unit_rows(vecs), ids)
        apply_search_params(index, choice)
        self.index, self.choice = index, choice

    def search(self, queries: np.ndarray, k: int, selector: faiss.IDSelector | None = None):
        """(scores [q, k], ids [q, k]); ids are -1 past the end."""
        assert self.index is not None
        queries = unit_rows(np.atleast_2d(queries).astype(np.float32))
        k = max(1, min(k, self.ntotal)) if self.ntotal else 1
        if self.ntotal == 0:
            return np.zeros((len(queries), 0), np.float32), np.zeros((len(queries), 0), np.int64)
        params: faiss.SearchParameters | None = None
        if selector is not None:
            # FAISS's Python wrapper takes fields as keywords (and keeps `sel` alive); its stubs
            # declare bare constructors.
            if self.choice is not None and self.choice.nprobe:
                params = faiss.SearchParametersIVF(sel=selector, nprobe=self.choice.nprobe)  # type: ignore[call-arg, unused-ignore]
            else:
                params = faiss.SearchParameters(sel=selector)  # type: ignore[call-arg, unused-ignore]
        scores, ids = self.index.search(queries, k, params=params)
        return scores, ids


def write_index_file(index: faiss.Index, path: Path) -> None:
    """Stream an index to a file, failing loudly when the disk does.

    ``faiss.write_index(index, filename)`` cannot report an error from its final
    fclose (it prints one to stderr): on a full disk the buffered tail is lost and
    a truncated file looks written. A Python file object raises on every write and
    on close, and FAISS passes the exception through; blocks of 1 MB keep it streamed
    (no second copy of the index in memory).
    """
    with open(path, "wb") as f:
        # PyCallbackIOWriter is in faiss's SWIG module but not in its stubs.
        faiss.write_index(index, faiss.PyCallbackIOWriter(f.write, 1 << 20))  # type: ignore[attr-defined, unused-ignore]


def ondisk_lists(index: faiss.Index) -> faiss.OnDiskInvertedLists | None:
    """The memory-mapped inverted lists of an on-disk IVF index; None for any other index."""
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is None or ivf.invlists is None:
        return None
    lists = faiss.downcast_InvertedLists(ivf.invlists)
    return lists if isinstance(lists, faiss.OnDiskInvertedLists) else None


def read_index_file(path: Path, ondisk: bool = False) -> faiss.Index:
    """Read ``vectors.faiss``; an on-disk index maps the .ivfdata of the same folder.

    Whatever folder the file names (the build's absolute path in indexes written before
    the bare name was stored), only its file name counts: a moved index finds its data,
    and a copy never reads the original's. FAISS' own IO_FLAG_ONDISK_SAME_DIR does the
    same resolution but printf()s a line on stdout (breaking ``--json``) and reports a
    missing file as a C++ error; reading the lists unmapped (IO_FLAG_SKIP_IVF_DATA) and
    mapping them here allows a one-line error instead. A read-only file (a read-only
    mount) is mapped read-only: a loaded on-disk index is only searched, never modified
    (a catalog change rebuilds the vectors in memory, an append writes a new file).
    """
    if not ondisk:
        return faiss.read_index(str(path))
    index = faiss.read_index(str(path), faiss.IO_FLAG_SKIP_IVF_DATA)
    lists = ondisk_lists(index)
    if lists is None:  # vectors.json describes another file: stale, rebuilt by the caller
        raise RuntimeError(f"{path}: no on-disk inverted lists")
    data = path.absolute().parent / PurePath(lists.filename).name
    try:
        size = data.stat().st_size
    except FileNotFoundError:
        raise IndexError_(
            f"{data}: missing; {path.name} keeps its vectors in it (copy it back beside "
            f"{path.name}, or delete {path.name} to rebuild the vectors from the catalog)"
        ) from None
    if size < lists.totsize:  # mapping it would crash (SIGBUS) at the first search
        raise IndexError_(
            f"{data}: {size} bytes, {path.name} needs {lists.totsize} (an incomplete copy?)"
        )
    lists.filename = str(data)
    lists.read_only = not os.access(data, os.W_OK)
    try:
        lists.do_mmap()
    except RuntimeError as exc:
        reason = str(exc).rsplit("failed: ", 1)[-1]
        raise IndexError_(f"{data}: cannot map the index's vectors: {reason}") from None
    return index


@contextmanager
def _ivfdata_named_by_file_name(index: faiss.Index, folder: Path) -> Iterator[None]:
    """While writing: on-disk lists name their .ivfdata by file name only (read_index_file
    looks for it beside vectors.faiss), so the file written holds no folder of this machine."""
    lists = ondisk_lists(index)
    if lists is None:
        yield
        return
    full = lists.filename
    if Path(full).resolve().parent != folder.resolve():
        raise ValueError(
            f"{full}: an on-disk index keeps its .ivfdata beside {folder / FAISS_FILE}"
        )
    lists.filename = PurePath(full).name
    try:
        yield
    finally:
        lists.filename = full


def _ivf_outgrown(have: IndexChoice, want: IndexChoice) -> bool:
    # Retrain when the collection has grown 4x past what the lists were sized for.
    return want.nlist >= have.nlist * 2


def _training_sample(catalog: Catalog, n: int) -> np.ndarray:
    vecs = []
    got = 0
    for _, v in catalog.iter_vectors():
        vecs.append(v)
        got += len(v)
        if got >= n:
            break
    return unit_rows(np.concatenate(vecs)[:n])
