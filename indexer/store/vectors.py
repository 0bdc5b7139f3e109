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

Both files can be damaged in ways FAISS reads without complaint (overwritten bytes: ids
and codes from nowhere, centroids that send queries to the wrong lists). ``vectors.json``
records the CRC-32 of the ``vectors.faiss`` it describes (``crc32``), and ``load`` checks
it before FAISS reads a byte: any overwritten byte of that file is caught (a file saved
before the checksum existed is read unchecked until its next save). The memory-mapped
``.ivfdata`` is too large to hash on every open; before the first use, ``sync`` checks
what was loaded against the catalog (``damage``: list bounds, a sample of ids, a sample of
vectors that must find themselves). A damaged index is rebuilt from the catalog like a
missing one, in memory, and saved when the index is open for writing.
"""

from __future__ import annotations

import json
import math
import os
import re
import zlib
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

MIN_NLIST = 64
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
    if n < MIN_NLIST:  # k-means needs a vector per list: exact, whatever the budget
        return IndexChoice("flat", "IDMap2,Flat")
    nlist = max(MIN_NLIST, min(65536, int(math.sqrt(max(n, 1)))))
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
        self.verified = False  # what load() read was checked against the catalog (damage())
        self.damaged = ""  # why what is on disk was not used, if it was damaged

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

    def load(self, catalog_generation: int | None = None) -> bool:
        """Load what is on disk; False when there is nothing usable (it will be rebuilt).

        A vectors.faiss whose checksum is not the one vectors.json records is damaged (and
        never given to FAISS), unless vectors.json is older than catalog_generation: a save
        that died between renaming the file and writing vectors.json leaves the new file
        beside the old record, which is only behind."""
        unreadable = (OSError, ValueError, RuntimeError, MemoryError, TypeError, KeyError)
        try:
            side = json.loads(self.sidecar_path.read_text())
            ondisk = (side.get("index") or {}).get("kind") == ONDISK_KIND
            choice = IndexChoice(**side["index"])
            generation, model_id, dim = side["generation"], side["model_id"], side["dim"]
            crc = side.get("crc32")
        # a damaged vectors.json can hold any shape (TypeError, KeyError, AttributeError)
        except (*unreadable, AttributeError):
            return False
        if not self.faiss_path.is_file():  # a crash before its first save: only behind
            return False
        try:
            if crc is not None and file_crc32(self.faiss_path) != crc:
                behind = catalog_generation is not None and generation < catalog_generation
                if not behind:
                    self.damaged = (
                        f"{FAISS_FILE} is damaged: its checksum is not the one {SIDECAR_FILE} "
                        "records"
                    )
                return False
            index = read_index_file(self.faiss_path, ondisk)
        except FileNotFoundError:
            return False
        # Overwritten bytes can make FAISS ask for absurd allocations (MemoryError).
        except unreadable as exc:
            self.damaged = f"{FAISS_FILE} is damaged: {_first_line(exc)}"
            return False
        if index.ntotal != side.get("count", -1) or index.d != dim:
            return False  # the sidecar describes another file: treat as stale
        self.index, self.choice = index, choice
        self.generation, self.model_id, self.dim = generation, model_id, dim
        apply_search_params(index, choice)
        self.dirty = False
        self.verified = False
        return True

    def damage(self, catalog: Catalog, samples: int = 8) -> str | None:
        """What is wrong with the loaded index, checked against the catalog; None if nothing.

        Cheap enough for every open: ``samples`` entries spread over the id map or the lists
        must hold catalog ids, and their codes must be what the index's own quantizer makes
        of those ids' catalog vectors (flat: the vectors themselves). Random ids, codes or
        centroids fail all of them; a healthy index, however coarse its quantizer, passes.
        """
        if self.index is None or self.index.ntotal == 0:
            return None
        name = FAISS_FILE
        lists = ondisk_lists(self.index)
        if lists is not None:
            name = f"{FAISS_FILE} or its {PurePath(lists.filename).name}"
        entries = _sample_entries(self.index, samples)
        picked = np.array([e[2] for e in entries], np.int64)
        if len(picked) == 0 or picked.min() < 1 or picked.max() >= catalog.next_id():
            return f"{name} is damaged: it holds ids that are no catalog row"
        if not self.is_current(catalog):
            return None  # rows came and went since: sync updates it by id difference
        try:
            ids, vecs = catalog.vectors_for(np.unique(picked))
        except ValueError:
            # The catalog's own vectors are unreadable (a wrong width): not this file's damage;
            # the catalog check names it.
            return None
        if len(ids) < len(np.unique(picked)):
            return f"{name} is damaged: it holds ids that are no catalog row"
        if not np.isfinite(vecs).all() or (np.linalg.norm(vecs, axis=1) < 1e-6).any():
            return None  # the catalog's own copy is empty (a holed vectors.f16): its check names it
        by_id = dict(zip(ids.tolist(), unit_rows(vecs), strict=True))
        for lst, pos, item_id in entries:
            if not _entry_matches(self.index, lst, pos, item_id, by_id[item_id]):
                return f"{name} is damaged: its vectors differ from the catalog's"
        return None

    def save(self) -> None:
        assert self.index is not None and self.choice is not None
        self.dir.mkdir(parents=True, exist_ok=True)
        with atomic_path(self.faiss_path) as tmp, _ivfdata_named_by_file_name(self.index, self.dir):
            crc = write_index_file(self.index, tmp)
        side = {
            "generation": self.generation,
            "model_id": self.model_id,
            "dim": self.dim,
            "count": int(self.index.ntotal),
            "index": self.choice.as_dict(),
            "crc32": crc,
        }
        write_atomic(self.sidecar_path, json.dumps(side, indent=2).encode())
        self.dirty = False
        self.damaged = ""
        self._drop_unused_ivfdata()

    def _drop_unused_ivfdata(self) -> None:
        """After a save: list files no index points at any more (a damaged or outgrown on-disk
        index rebuilt in memory); readers that mapped one keep their mapping."""
        lists = ondisk_lists(self.index) if self.index is not None else None
        keep = PurePath(lists.filename).name if lists is not None else None
        for path in self.dir.glob("*.ivfdata"):
            if path.name != keep:
                path.unlink(missing_ok=True)

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
        damaged = self._drop_if_damaged(catalog)
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
        if (
            needs_rebuild
            and not (damaged or self.damaged)  # what is on disk was found damaged
            and self._disk_is_current(catalog)
            and self.load(catalog.generation)
            and not self._drop_if_damaged(catalog)
        ):
            # A writer already saved this generation (a long-running reader such as
            # `serve` after a re-index): reading it beats rebuilding, which may train IVF.
            return f"reloaded {self.faiss_path.name} ({self.ntotal} vectors)"
        if needs_rebuild:
            self._rebuild(catalog, want, dim)
            action = f"rebuilt {want.kind} index from catalog ({n} vectors)"
            if self.damaged:
                action = f"{self.damaged}; {action}"
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

    def _drop_if_damaged(self, catalog: Catalog) -> bool:
        """Check a freshly loaded index once; a damaged one is dropped (and rebuilt by sync)."""
        if self.index is None or self.verified or self.model_id != catalog.get_meta("model_id"):
            return False  # another model's vectors are rebuilt anyway
        self.verified = True
        problem = self.damage(catalog)
        if problem is None:
            return False
        self.damaged = problem
        self.index = self.choice = None
        return True

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
        self.verified = True  # built here from the catalog

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


def write_index_file(index: faiss.Index, path: Path) -> str:
    """Stream an index to a file, failing loudly when the disk does; returns the file's
    CRC-32 (file_crc32's form), computed on the way.

    ``faiss.write_index(index, filename)`` cannot report an error from its final
    fclose (it prints one to stderr): on a full disk the buffered tail is lost and
    a truncated file looks written. A Python file object raises on every write and
    on close, and FAISS passes the exception through; blocks of 1 MB keep it streamed
    (no second copy of the index in memory).
    """
    crc = 0
    with open(path, "wb") as f:

        def write(block: bytes) -> None:
            nonlocal crc
            crc = zlib.crc32(block, crc)
            f.write(block)

        # PyCallbackIOWriter is in faiss's SWIG module but not in its stubs.
        faiss.write_index(index, faiss.PyCallbackIOWriter(write, 1 << 20))  # type: ignore[attr-defined, unused-ignore]
    return f"{crc:08x}"


def file_crc32(path: Path) -> str:
    """A file's CRC-32 as 8 hex digits. CRC-32, not a cryptographic hash: it catches any
    burst of damage up to 32 bits and all but 1 in 4 billion others, at twice SHA-256's
    speed here (read and hashed at ~0.6 GB/s: bench/results/catalog.md)."""
    crc = 0
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            crc = zlib.crc32(block, crc)
    return f"{crc:08x}"


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
    if not _lists_fit(lists, index.ntotal):  # a damaged vectors.faiss: rebuilt by the caller
        raise RuntimeError(f"its list table does not fit {data.name}")
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


def _first_line(exc: BaseException) -> str:
    # FAISS' C++ exceptions carry a multi-line trace of where they were thrown.
    text = str(exc).strip().splitlines()
    line = text[-1].strip() if text else type(exc).__name__
    return re.sub(r"^Error in .*? at \S+:\d+: ", "", line)


def _lists_fit(lists: faiss.OnDiskInvertedLists, ntotal: int) -> bool:
    """Every list lies inside the .ivfdata and the sizes add up to the index's count: a
    list table that does not (overwritten bytes) would read outside the mapping (SIGBUS)."""
    entry = lists.code_size + 8  # codes, then one int64 id per vector
    total = 0
    for k in range(lists.nlist):
        one = lists.lists.at(k)  # type: ignore[attr-defined]  # a SWIG vector, stubbed as a list
        if one.size > one.capacity or one.offset + one.capacity * entry > lists.totsize:
            return False
        total += one.size
    return total == ntotal


def _sample_entries(index: faiss.Index, n: int) -> list[tuple[int, int, int]]:
    """Up to n (list, position, id) entries spread over an IVF's lists (list -1: an id map)."""
    if isinstance(index, faiss.IndexIDMap2 | faiss.IndexIDMap):
        ids = faiss.vector_to_array(index.id_map)
        return [(-1, -1, int(i)) for i in ids[:: max(1, len(ids) // n)][:n]]
    ivf = faiss.extract_index_ivf(index)
    invlists = ivf.invlists
    assert invlists is not None  # an IVF index always holds its lists
    full = [k for k in range(ivf.nlist) if invlists.list_size(k)]
    out = []
    for k in full[:: max(1, len(full) // n)][:n]:
        size = invlists.list_size(k)
        out.append((k, size // 2, int(faiss.rev_swig_ptr(invlists.get_ids(k), size)[size // 2])))
    return out


def _entry_matches(index: faiss.Index, lst: int, pos: int, item_id: int, vec: np.ndarray) -> bool:
    """Does the index hold vec for item_id at (lst, pos)? An IVF,SQ entry is compared as the
    code its quantizer gives vec in that list: within a step or two per dimension (the index
    was filled from float32 shards, the catalog may keep float16), however coarse the
    quantizer or clamped the vector, where bytes from elsewhere are off by ~85 on average."""
    if lst < 0:
        # float16 rows (vectors.f16) are within half a unit in the 11th bit of float32
        return bool(np.allclose(index.reconstruct(item_id), vec, atol=2e-3))
    ivf = faiss.extract_index_ivf(index)  # its methods are virtual: the SQ's own run
    invlists = ivf.invlists
    assert invlists is not None
    if not isinstance(faiss.downcast_index(ivf), faiss.IndexIVFScalarQuantizer):
        got = np.zeros(ivf.d, np.float32)
        ivf.reconstruct_from_offset(lst, pos, faiss.swig_ptr(got))
        return bool(np.allclose(got, vec, atol=2e-3))
    size = ivf.code_size
    x = np.ascontiguousarray(vec.reshape(1, -1), dtype=np.float32)
    want = np.zeros(size, np.uint8)
    list_nos = np.array([lst], np.int64)
    ivf.encode_vectors(1, faiss.swig_ptr(x), faiss.swig_ptr(list_nos), faiss.swig_ptr(want))
    codes = faiss.rev_swig_ptr(invlists.get_codes(lst), invlists.list_size(lst) * size)
    have = codes[pos * size : (pos + 1) * size]
    diff = np.abs(want.astype(np.int16) - np.asarray(have, np.uint8).astype(np.int16))
    return bool(np.isfinite(vec).all() and diff.mean() <= 2.0)


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
