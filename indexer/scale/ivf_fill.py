"""Training and filling the FAISS index of a built index, in bounded memory.

Vectors arrive as a stream of (ids, unit vectors) batches (shards, or the catalog),
and an index built earlier can contribute its inverted lists as they are (codes
copied list by list, never decoded or re-assigned): that is how an append keeps the
trained quantizer without re-adding what is already in.

On disk: each block of a quarter of the budget fills its own copy of the empty
trained index, and faiss.contrib.ondisk.merge_ondisk joins the blocks into one
``.ivfdata`` file that FAISS memory-maps. The file name carries the catalog
generation, so the file an older vectors.faiss points at stays intact until the
new vectors.faiss has replaced it.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from wherein.indexer.normalize import unit_rows
from wherein.indexer.store.catalog import Catalog

if TYPE_CHECKING:  # FAISS is imported where it runs
    import faiss
    from typing_extensions import TypeIs

IVFDATA_SUFFIX = ".ivfdata"
TRAIN_PER_LIST = 64  # what VectorIndex._rebuild samples; FAISS wants >= 39 per list
TRAIN_MIN_PER_LIST = 39
KMEANS_ITERATIONS = (
    10  # FAISS' default is 25; 10 loses nothing measurable on recall (bench_scale.py)
)

Batches = Iterable[tuple[np.ndarray, np.ndarray]]


def sample_size(nlist: int, n: int, dim: int, budget: int | None) -> int:
    """nlist*64 rows, held to an eighth of the budget (>= nlist*39): k-means and the residual
    pass hold several copies of the sample."""
    want = nlist * TRAIN_PER_LIST
    if budget is not None:
        want = min(want, max(nlist * TRAIN_MIN_PER_LIST, budget // 8 // (dim * 4)))
    return min(want, n)


def train(index, sample: np.ndarray) -> None:
    import faiss

    faiss.extract_index_ivf(index).cp.niter = KMEANS_ITERATIONS
    index.train(sample)


def catalog_draw(cat: Catalog, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(ids, vectors) of up to n random rows of the catalog, sorted by id.

    Never a list of every id (800 MB at 100M): ids are drawn from 1..the largest id handed
    out, in rounds that fill the gaps deleted rows left; a catalog within 4n ids walks a
    permutation of them instead, so a small one gives every row it has.
    """
    top = cat.next_id() - 1
    n = min(n, cat.count_embedded())
    rng = np.random.default_rng(seed)
    small = top <= 4 * n
    order = rng.permutation(np.arange(1, top + 1, dtype=np.int64)) if small else None
    got_ids, got, pos = np.zeros(0, np.int64), [], 0
    for _ in range(10_000 if small else 8):
        need = n - len(got_ids)
        if need <= 0 or (small and pos >= top):
            break
        if small:
            assert order is not None  # drawn above when small
            draw, pos = np.sort(order[pos : pos + 2 * need + 16]), pos + 2 * need + 16
        else:
            draw = np.unique(rng.integers(1, top + 1, 2 * need + 16))
            draw = np.setdiff1d(draw, got_ids, assume_unique=True)
        ids, vecs = cat.vectors_for(draw)
        if len(ids):
            pick = rng.permutation(len(ids))[:need]  # vectors_for returns id order
            got_ids = np.concatenate([got_ids, ids[pick]])
            got.append(vecs[pick])
    if not got:
        return np.zeros(0, np.int64), np.zeros((0, 0), np.float32)
    vecs = np.concatenate(got)
    order_ids = np.argsort(got_ids)
    return got_ids[order_ids], vecs[order_ids]


def catalog_sample(cat: Catalog, n: int, seed: int = 0) -> np.ndarray:
    """A training sample: up to n unit vectors at random ids of the catalog."""
    return unit_rows(catalog_draw(cat, n, seed)[1])


def fill_ondisk(
    empty: np.ndarray,
    parts: Iterable[Batches | faiss.Index],
    ivfdata: Path,
    budget: int,
    dim: int,
    say: Callable[[str], object],
    exclude: np.ndarray | None = None,
):
    """The index, merged on disk into ``ivfdata`` from blocks of at most a quarter of the budget."""
    import faiss
    from faiss.contrib.ondisk import merge_ondisk

    per_block = max(1, (budget // 4) // (dim + 16))
    work = ivfdata.parent / ".build"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    blocks: list[str] = []
    block, held = faiss.deserialize_index(empty), 0

    def flush() -> None:
        nonlocal block, held
        if held:
            name = str(work / f"block-{len(blocks):05d}.index")
            faiss.write_index(block, name)
            blocks.append(name)
            say(f"wrote block {len(blocks)} ({held} vectors)")
        block, held = faiss.deserialize_index(empty), 0

    for part in parts:
        if _is_index(part):
            for lst in range(faiss.extract_index_ivf(part).nlist):
                held += copy_lists(part, block, exclude, lists=[lst])
                if held >= per_block:
                    flush()
            continue
        for ids, vecs in part:
            for s in range(0, len(ids), per_block):
                block.add_with_ids(vecs[s : s + per_block], ids[s : s + per_block])
                held += len(ids[s : s + per_block])
                if held >= per_block:
                    flush()
    flush()
    index = faiss.deserialize_index(empty)
    if ivfdata.exists():
        ivfdata.unlink()
    if blocks:
        with _native_stdout_silenced():  # FAISS printf()s "resizing FILE to N bytes" on stdout
            merge_ondisk(index, blocks, str(ivfdata))
    shutil.rmtree(work, ignore_errors=True)
    return index


def copy_lists(
    src, dst, exclude: np.ndarray | None = None, lists: Iterable[int] | None = None
) -> int:
    """Copy the codes and ids of ``src``'s inverted lists into ``dst`` (same trained quantizer),
    leaving out ``exclude``; returns how many entries were copied."""
    import faiss

    s_ivf, d_ivf = faiss.extract_index_ivf(src), faiss.extract_index_ivf(dst)
    s_inv, d_inv = s_ivf.invlists, d_ivf.invlists
    assert s_inv is not None and d_inv is not None  # an IVF index always holds its lists
    code_size = s_inv.code_size
    copied = 0
    for lst in range(s_ivf.nlist) if lists is None else lists:
        n = s_inv.list_size(lst)
        if not n:
            continue
        ids = faiss.rev_swig_ptr(s_inv.get_ids(lst), n).copy()
        codes = faiss.rev_swig_ptr(s_inv.get_codes(lst), n * code_size).copy()
        if exclude is not None and len(exclude):
            keep = ~np.isin(ids, exclude)
            ids, codes = ids[keep], codes.reshape(n, code_size)[keep].reshape(-1)
        if len(ids):
            d_inv.add_entries(lst, len(ids), faiss.swig_ptr(ids), faiss.swig_ptr(codes))
            copied += len(ids)
    before = dst.ntotal
    d_ivf.ntotal += copied
    if dst.ntotal == before:  # dst wraps the IVF index (its own ntotal)
        dst.ntotal += copied
    return copied


def empty_like(index) -> np.ndarray:
    """The serialized trained index with no vectors: quantizer and codec of ``index``, lists empty.

    Its lists are swapped out for the duration (not copied: they can be GBs, or on disk).
    """
    import faiss

    ivf = faiss.extract_index_ivf(index)
    lists, own, total, outer = ivf.invlists, ivf.own_invlists, ivf.ntotal, index.ntotal
    assert lists is not None  # an IVF index always holds its lists
    blank = faiss.ArrayInvertedLists(ivf.nlist, ivf.code_size)
    ivf.own_invlists = False  # replace_invlists would otherwise free the real lists
    ivf.replace_invlists(blank, False)
    ivf.ntotal = index.ntotal = 0
    try:
        return faiss.serialize_index(index)
    finally:
        ivf.replace_invlists(lists, False)
        ivf.own_invlists = own
        ivf.ntotal, index.ntotal = total, outer


def ivfdata_files(index_dir: Path) -> list[Path]:
    return sorted(index_dir.glob(f"*{IVFDATA_SUFFIX}"))


def _is_index(part: object) -> TypeIs[faiss.Index]:
    return hasattr(part, "ntotal") and hasattr(part, "search")


@contextmanager
def _native_stdout_silenced() -> Iterator[None]:
    """File descriptor 1 to /dev/null: `build-index --json > out.json` must stay valid JSON."""
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    try:
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
