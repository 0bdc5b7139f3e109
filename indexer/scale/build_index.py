"""`wherein build-index`: a normal wherein index directory from embed shards, in bounded memory.

From one or several embed directories (embed_set.py: ids kept disjoint, shards
taken oldest first), into a new index, or with ``append`` into one built earlier.

- catalog.db (catalog_fill.py): one images row per embedded item, id = FAISS id,
  failed items in ``skipped``; one transaction per shard. A path in several shards
  keeps the newest shard's row; how many and which is reported.
- vectors.f16 (store/vector_file.py): the vectors search re-scores candidates against,
  float16, row id - 1, written with the catalog rows (``rescore="float32"`` keeps them
  as float32 blobs in the catalog instead: twice the bytes of the file, and at 10M
  ~2.6x, SQLite storing one 3 KB row per 4 KB page). An append keeps what the index has.
- vectors.faiss + vectors.json via VectorIndex.save(), the index chosen by
  vectors.choose_index(n, dim, budget). IVF is trained on a sample spread over the
  shards. When even the IVF codes exceed half the budget, blocks are filled
  separately and merged on disk into a memory-mapped ``.ivfdata`` (kind
  "ivf-sq8-ondisk"; a later catalog change rebuilds it in memory through the
  normal sync). The .ivfdata always lies beside vectors.faiss, which names it by file
  name only (store/vectors.py): the index folder can be moved or copied whole.
- Append keeps the trained quantizer: new vectors go into its lists, rows a newer
  shard replaced leave them, and the lists of an on-disk index are copied as codes,
  never re-assigned. Then recall_check.py measures recall@10 for the new vectors;
  only below its target is the quantizer retrained (on a sample of the catalog) and
  every list refilled. An index that was exact (flat) and has outgrown that gets its
  first training instead.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from wherein.indexer.normalize import unit_rows
from wherein.indexer.regions import TILINGS
from wherein.indexer.scale import ivf_fill
from wherein.indexer.scale import shards as S
from wherein.indexer.scale.catalog_fill import fill_catalog
from wherein.indexer.scale.embed_set import EmbedSet, check_shards, open_set
from wherein.indexer.scale.recall_check import RECALL_TARGET, measure
from wherein.indexer.store.catalog import Catalog
from wherein.indexer.store.index_store import CATALOG_FILE, IndexStore
from wherein.indexer.store.vectors import (
    ONDISK_KIND,
    IndexChoice,
    apply_search_params,
    choose_index,
    new_index,
)
from wherein.schemas.errors import IndexError_

IVFDATA_FILE = "vectors.ivfdata"
BUILD_UNFINISHED = "build_unfinished"  # meta: a fresh build that has not saved its vectors yet
RESCORE_CHOICES = ("float16", "float32")


@dataclass
class BuildStats:
    index: str
    embed_dirs: list[str] = field(default_factory=list)
    appended: bool = False
    space: str = ""  # the embedding space of the vectors (stand-ins or real)
    vectors: int = 0  # embedded rows in the index now
    regions: str | None = None  # the index's regions setting (its tiling), None: no regions
    region_items: int = 0  # of the vectors added, photos' regions (embed --regions)
    added: int = 0  # of them, from these embed directories
    skipped: int = 0
    shards: int = 0
    duplicates: int = 0  # paths met more than once (the newest shard's row kept)
    duplicate_examples: list[dict] = field(default_factory=list)
    duplicate_sources: list[dict] = field(default_factory=list)  # kept, dropped, paths
    replaced: int = 0  # rows of the earlier index that a newer shard replaced
    reclaimed_bytes: int = 0  # disk given back under dead vectors.f16 rows (holes punched)
    kind: str = ""
    factory: str = ""
    nlist: int = 0
    nprobe: int = 0
    quantizer: str = ""  # "trained", "reused", "retrained"; "" for exact search
    recall: dict | None = None  # recall check of the reused quantizer
    recall_after_retrain: dict | None = None
    train_vectors: int = 0
    seconds: float = 0.0
    catalog_seconds: float = 0.0
    train_seconds: float = 0.0
    add_seconds: float = 0.0

    def to_dict(self) -> dict:
        """The build as `wherein build-index --json` prints it (schemas/build-index.schema.json)."""
        return {k: (round(v, 2) if isinstance(v, float) else v) for k, v in vars(self).items()}


# Below it the on-disk merge writes blocks of a handful of vectors each (a line per block):
# no budget that small can be kept anyway, the quantizer alone is nlist x dim x 4 bytes.
MIN_MEMORY_BUDGET = 32 << 10


def parse_bytes(text: str, minimum: int = 1) -> int:
    """'4G', '512M', '1.5GB', '100000' -> bytes (binary units), at least ``minimum``."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
    try:
        value = float(t[:-1] if mult > 1 else t) * mult
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ValueError(f"not a size: {text!r} (use e.g. 4G, 512M)")
    if value < minimum:
        raise ValueError(f"{text!r} is too small: at least {minimum >> 10}K (use e.g. 4G, 512M)")
    return int(value)


def iter_shard_vectors(embed_dir: Path, manifest: dict):
    """(ids, unit vectors) of one embed directory, shard by shard."""
    del manifest  # kept for callers that already read it
    return open_set([embed_dir]).vectors()


def build_index(
    embed_dirs: str | Path | Iterable[str | Path],
    index_dir: str | Path,
    memory_budget: int | None = None,
    progress: Callable[[str], object] | None = None,
    append: bool = False,
    recall_target: float = RECALL_TARGET,
    rescore: str = "float16",
) -> BuildStats:
    """recall_target: with ``append``, retrain the IVF quantizer when the measured recall@10 of
    the appended vectors falls below it (0 never retrains). rescore: how a new index keeps
    the vectors search re-scores with, "float16" (vectors.f16) or "float32" (catalog blobs)."""
    if rescore not in RESCORE_CHOICES:
        raise ValueError(f"rescore must be one of {', '.join(RESCORE_CHOICES)}, not {rescore!r}")
    t0 = time.perf_counter()
    dirs = [embed_dirs] if isinstance(embed_dirs, str | Path) else list(embed_dirs)
    out = Path(index_dir).expanduser().absolute()
    given = open_set(dirs)
    check_shards(given)  # a damaged shard stops the build before anything is written
    _regions_agree(given, None)  # and shards cut into regions beside shards that are not
    exists = (out / CATALOG_FILE).exists()
    if append and not exists:
        raise IndexError_(f"{out}: no index to append to (build it first, without --append)")
    say = progress or (lambda _m: None)
    # A fresh build never reads the old vectors: only appends load them.
    with IndexStore.open(out, write=True, create=not append, load_vectors=append) as store:
        if not append and exists:
            if not _unfinished_build(store.catalog, dirs):
                raise IndexError_(
                    f"{out}: already holds an index; add --append to add these shards to it, "
                    "or build into a new directory"
                )
            say(f"{out}: an earlier build-index of these shards did not finish; starting over")
            store.start_over()
        cat = store.catalog
        first_id = cat.next_id()
        es = open_set(dirs, first_id)
        if append:
            _check_same_model(cat, es, out)
        regions = _regions_setting(cat, es, out, say)
        current = store.vectors.index is not None and store.vectors.is_current(cat)
        if append and not current and store.vectors.choice is not None:
            current = _catch_up(store, say)
        stats = BuildStats(
            str(out),
            [str(d) for d in es.dirs],
            append,
            space=es.space,
            skipped=es.errors,
            shards=len(es.shards),
            regions=regions,
        )
        t = time.perf_counter()
        before = cat.count_embedded()
        regions_before = cat.count_tiled()[1]
        with cat.transaction():
            _set_meta(cat, es, append)
            if regions is not None:  # later `wherein index` runs, --watch too, cut new photos
                cat.set_meta("regions", regions)
            if not append and rescore == "float16":
                cat.use_vector_file(es.dim)
            # Before any row: an interrupted run leaves the catalog ahead of vectors.json,
            # which the next open (or re-run) brings back in line like any crash.
            cat.bump_generation()
        filled = fill_catalog(cat, es, first_id, say)
        stats.catalog_seconds = time.perf_counter() - t
        stats.duplicates = filled.duplicates.count
        stats.duplicate_examples = filled.duplicates.examples
        stats.duplicate_sources = filled.duplicates.by_source()
        stats.replaced = len(filled.replaced)
        # Deletions punch their own rows' blocks; this pass also frees dead rows of an index
        # written before they did (all of them, with the writer lock held and no write pending).
        stats.reclaimed_bytes = cat.reclaim_vector_file()
        stats.vectors = cat.count_embedded()
        stats.added = stats.vectors - before + len(filled.replaced)
        stats.region_items = cat.count_tiled()[1] - regions_before
        excluded = np.unique(np.array(filled.excluded, np.int64))

        builder = _Vectors(store, es, memory_budget, stats, say, recall_target)
        if append and current:
            queries = _new_id_sample(first_id, es.last_id, excluded)
            index, choice = builder.append(filled.replaced, excluded, queries)
        elif append:
            say("the index's vectors were behind its catalog: rebuilding them from the catalog")
            index, choice = builder.from_catalog(builder.choose(stats.vectors))
        else:
            index, choice = builder.from_shards(excluded)
        stats.kind, stats.factory = choice.kind, choice.factory
        stats.nlist, stats.nprobe = choice.nlist, choice.nprobe
        apply_search_params(index, choice)
        vi = store.vectors
        vi.index, vi.choice = index, choice
        vi.generation = cat.generation
        vi.model_id, vi.dim = es.model_id, es.dim
        vi.save()
        builder.drop_unused_ivfdata()
        with cat.transaction():
            cat.set_meta(BUILD_UNFINISHED, False)
    stats.seconds = time.perf_counter() - t0
    return stats


def _unfinished_build(cat: Catalog, dirs: list) -> bool:
    """Is this index what a fresh build of these embed directories left when it was stopped
    (killed, a damaged shard), so that all of it is that build's own? Also an index created
    and stopped before its first commit (no model, no rows)."""
    if cat.get_meta("model_id") is None and cat.max_id() == 0:
        return True
    same_dirs = cat.get_meta("built_from") == [str(d) for d in open_set(dirs).dirs]
    return bool(cat.get_meta(BUILD_UNFINISHED)) and same_dirs


def _catch_up(store: IndexStore, say) -> bool:
    """Vectors behind the catalog (an append interrupted earlier): the normal sync by id
    difference, in memory; an on-disk index is rebuilt later from the catalog instead."""
    choice = store.vectors.choice
    if choice is None or choice.kind == ONDISK_KIND:
        return False
    say(f"vectors behind the catalog: {store.ensure_vectors(persist=False)}")
    return store.vectors.is_current(store.catalog)


def _check_same_model(cat: Catalog, es: EmbedSet, out: Path) -> None:
    held = cat.get_meta("family")
    if es.family is not None and held is not None and held != es.family:
        raise S.ShardError(
            f"{out}: was built with the {held} models; these shards were embedded with "
            f"{es.family}: build a new index for them"
        )
    model_id, dim = cat.get_meta("model_id"), int(cat.get_meta("dim", 0) or 0)
    if model_id and (model_id, dim) != (es.model_id, es.dim):
        raise S.ShardError(
            f"{out}: holds vectors of model {model_id} ({dim}-d); these shards were embedded "
            f"with {es.model_id} ({es.dim}-d): build a new index for them"
        )


def _regions_setting(cat: Catalog, es: EmbedSet, out: Path, say) -> str | None:
    """The index's regions setting after this build (its tiling's name; None: no regions).

    An index with regions keeps regions of every photo it adds: shards embedded without
    --regions are refused (into an index with regions, or beside shards with them), before
    anything is written. Shards with regions give an index without them the setting, as
    `wherein index --regions` does; its earlier photos are cut by a later `wherein index`
    of their folders. An index keeps the tiling it names: shards cut by another are kept as
    they were cut (the tiled table names each photo's tiling)."""
    held = cat.get_meta("regions")
    cut = _regions_agree(es, None if held is None else out)
    if not cut:
        return None
    if held is None and cat.count_images():
        say(
            f"{out}: keeps regions of large photos from now on; the photos it held get "
            "theirs from the next `wherein index` of their folders"
        )
    return str(held) if held is not None else cut


def _regions_agree(es: EmbedSet, index: Path | None) -> str | None:
    """The tiling the shards were cut by, None when none was; ShardError where some were
    embedded without --regions beside shards with them, or into ``index`` (one with regions)."""
    cut = [(d, t) for d, t in zip(es.dirs, es.tilings, strict=True) if t is not None]
    plain = [d for d, t in zip(es.dirs, es.tilings, strict=True) if t is None]
    if plain and (index is not None or cut):
        why = f"{index} keeps regions of large photos" if index is not None else (
            f"{cut[0][0]} was embedded with --regions")  # fmt: skip
        raise S.ShardError(
            f"{plain[0]}: embedded without --regions, but {why}; run `wherein embed "
            "--regions` (or `--for-index INDEX`) into a new --out for it, so that every "
            "photo of the index has regions"
        )
    unknown = [(d, t) for d, t in cut if t not in TILINGS]
    if unknown:
        raise S.ShardError(
            f"{unknown[0][0]}: its photos were cut into regions with tiling {unknown[0][1]!r}, "
            f"which this wherein does not know (it knows {', '.join(TILINGS)}): it was "
            "embedded by a newer wherein"
        )
    return cut[0][1] if cut else None


def _set_meta(cat: Catalog, es: EmbedSet, append: bool) -> None:
    cat.set_meta("model_id", es.model_id)
    if es.family is not None:
        cat.set_meta("family", es.family)
    cat.set_meta("space", es.space)
    cat.set_meta("dim", es.dim)
    cat.set_meta("model_file", es.model_file)
    if not append:  # cleared once vectors.faiss is saved; until then a re-run starts over
        cat.set_meta(BUILD_UNFINISHED, True)
    earlier = cat.get_meta("built_from", []) if append else []
    earlier = [earlier] if isinstance(earlier, str) else list(earlier or [])
    cat.set_meta("built_from", earlier + [str(d) for d in es.dirs])


def _new_id_sample(first_id: int, last_id: int, excluded: np.ndarray, n: int = 1000) -> np.ndarray:
    """Up to n ids of this build's new rows (candidates for the recall check's queries)."""
    span = last_id - first_id + 1
    if span <= 0:
        return np.zeros(0, np.int64)
    rng = np.random.default_rng(0)
    ids = first_id + rng.choice(span, min(span, n + len(excluded)), replace=False)
    return np.setdiff1d(ids.astype(np.int64), excluded)[:n]


class _Vectors:
    """The FAISS side of one build or append."""

    def __init__(
        self, store: IndexStore, es: EmbedSet, budget: int | None, stats, say, target: float
    ) -> None:
        self.store, self.cat, self.es = store, store.catalog, es
        self.budget, self.stats, self.say, self.target = budget, stats, say, target
        self.ivfdata: Path | None = None  # the .ivfdata the new index uses, if any

    def choose(self, n: int) -> IndexChoice:
        choice = choose_index(n, self.es.dim, self.budget)
        # In memory only while the codes take at most half the budget: FAISS' training and
        # add passes need the rest (measured: a 1M build peaked at 2.3 GB with 776 MB of codes).
        if self._ondisk(choice, n):
            choice = IndexChoice(ONDISK_KIND, choice.factory, choice.nlist, choice.nprobe)
        return choice

    def _ondisk(self, choice: IndexChoice, n: int) -> bool:
        return (
            choice.kind != "flat"
            and self.budget is not None
            and n * (self.es.dim + 16) > self.budget // 2
        )

    def _ivfdata_path(self) -> Path:
        gen = self.cat.generation
        name = IVFDATA_FILE if not self.stats.appended else f"vectors.{gen}.ivfdata"
        self.ivfdata = self.store.dir / name
        return self.ivfdata

    def _fill(self, empty: np.ndarray, choice: IndexChoice, parts: list, exclude=None):
        import faiss

        t = time.perf_counter()
        if choice.kind == ONDISK_KIND:
            assert self.budget is not None  # on disk only under a memory budget (_ondisk)
            index = ivf_fill.fill_ondisk(
                empty, parts, self._ivfdata_path(), self.budget, self.es.dim, self.say, exclude
            )
        else:
            index = faiss.deserialize_index(empty)
            for part in parts:
                if hasattr(part, "ntotal"):
                    ivf_fill.copy_lists(part, index, exclude)
                else:
                    for ids, vecs in part:
                        index.add_with_ids(vecs, ids)
        self.stats.add_seconds += time.perf_counter() - t
        return index

    def _train(self, choice: IndexChoice, sample: np.ndarray):
        import faiss

        t = time.perf_counter()
        index = new_index(choice, self.es.dim)
        self.stats.train_vectors = len(sample)
        self.say(f"training {choice.factory} on {len(sample)} vectors")
        ivf_fill.train(index, sample)
        self.stats.train_seconds += time.perf_counter() - t
        return faiss.serialize_index(index)

    def from_shards(self, excluded: np.ndarray):
        """A new index from the shards (the catalog was just written from them)."""
        choice = self.choose(self.stats.vectors)
        if choice.kind == "flat":
            index = new_index(choice, self.es.dim)
            t = time.perf_counter()
            for ids, vecs in self.es.vectors(excluded):
                index.add_with_ids(vecs, ids)
            self.stats.add_seconds += time.perf_counter() - t
            return index, choice
        sample = _shard_sample(
            self.es, ivf_fill.sample_size(choice.nlist, self.es.count, self.es.dim, self.budget)
        )
        empty = self._train(choice, sample)
        del sample
        self.stats.quantizer = "trained"
        return self._fill(empty, choice, [self.es.vectors(excluded)]), choice

    def from_catalog(self, choice: IndexChoice, how: str = "trained"):
        """Train (if IVF) on a sample of the catalog and fill every list from it."""
        n = self.cat.count_embedded()
        batches = ((ids, unit_rows(v)) for ids, v in self.cat.iter_vectors())
        if choice.kind == "flat":
            index = new_index(choice, self.es.dim)
            for ids, vecs in batches:
                index.add_with_ids(vecs, ids)
            return index, choice
        size = ivf_fill.sample_size(choice.nlist, n, self.es.dim, self.budget)
        empty = self._train(choice, ivf_fill.catalog_sample(self.cat, size))
        self.stats.quantizer = how
        return self._fill(empty, choice, [batches]), choice

    def append(self, replaced: list[int], excluded: np.ndarray, new_ids: np.ndarray):
        import faiss

        old, have = self.store.vectors.index, self.store.vectors.choice
        assert old is not None and have is not None  # an append starts from current vectors
        want = self.choose(self.stats.vectors)
        gone = np.unique(np.array(replaced, np.int64))
        new_vectors = self.es.vectors(excluded)
        if have.kind == "flat" and want.kind == "flat":
            t = time.perf_counter()
            if len(gone):
                old.remove_ids(faiss.IDSelectorBatch(gone))
            for ids, vecs in new_vectors:
                old.add_with_ids(vecs, ids)
            self.stats.add_seconds += time.perf_counter() - t
            return old, have
        if have.kind == "flat":
            self.say(f"{self.stats.vectors} vectors: past exact search, training {want.factory}")
            return self.from_catalog(want)
        # Keep the trained quantizer: its nlist/nprobe, in memory or on disk as the budget says.
        kind = ONDISK_KIND if self._ondisk(want, self.stats.vectors) else "ivf-sq8"
        choice = IndexChoice(kind, have.factory, have.nlist, have.nprobe)
        if have.kind != ONDISK_KIND and kind != ONDISK_KIND:
            t = time.perf_counter()
            if len(gone):
                old.remove_ids(faiss.IDSelectorBatch(gone))
            for ids, vecs in new_vectors:
                old.add_with_ids(vecs, ids)
            self.stats.add_seconds += time.perf_counter() - t
            index = old
        else:
            index = self._fill(ivf_fill.empty_like(old), choice, [old, new_vectors], gone)
        self.stats.quantizer = "reused"
        apply_search_params(index, choice)
        check = measure(index, choice.nprobe, self.cat, new_ids, self.target)
        self.stats.recall = check.as_dict() if check else None
        if check is None or check.ok:
            return index, choice
        self.say(
            f"recall@10 of the appended vectors {check.recall:.2f} < {check.target:.2f}: "
            "retraining the quantizer"
        )
        index, choice = self.from_catalog(want, how="retrained")
        apply_search_params(index, choice)
        after = measure(index, choice.nprobe, self.cat, new_ids, self.target)
        self.stats.recall_after_retrain = after.as_dict() if after else None
        return index, choice

    def drop_unused_ivfdata(self) -> None:
        """After the save: .ivfdata files no index points at any more (the old vectors.faiss did)."""
        for path in ivf_fill.ivfdata_files(self.store.dir):
            if path != self.ivfdata:
                path.unlink(missing_ok=True)


def _shard_sample(es: EmbedSet, want: int) -> np.ndarray:
    """Rows spread evenly over all shards, never a whole shard in memory."""
    rng = np.random.default_rng(0)
    parts, left = [], want
    refs = [r for r in es.shards if r.entry["count"]]
    total = sum(r.entry["count"] for r in refs)
    for k, ref in enumerate(refs):
        count = ref.entry["count"]
        take = left if k == len(refs) - 1 else min(left, round(want * count / total))
        if take <= 0:
            continue
        rows = np.sort(rng.choice(count, min(take, count), replace=False))
        start = 0
        for t in ref.batches(["embedding"]):
            end = start + t.num_rows
            lo, hi = np.searchsorted(rows, [start, end])
            if hi > lo:
                parts.append(unit_rows(S.embeddings(t, es.dim)[rows[lo:hi] - start]))
            start = end
        left -= len(rows)
    return np.concatenate(parts) if parts else np.zeros((0, es.dim), np.float32)
