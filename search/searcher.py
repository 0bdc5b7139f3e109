"""The search engine behind the search service: an open index, its query vectors, the
FAISS candidates, exact scores, the fold of a video's frames into one hit. Internal: call
wherein.search.service.search (``open_index``, ``search``, ``SearchRequest``), the one public
Python entry point, which the CLI and the web app call too.

``Searcher.search`` takes a Selection (wherein.search.selection says what each field selects)
or a query with Selection's fields as keywords. Scores are exact: candidates from an
approximate (IVF-SQ8) index are re-scored against the catalog's vectors (float32; float16 in
vectors.f16 for an index from `build-index`, within ~1e-3 of float32, see docs/scale.md).
Hits whose file is gone carry ``exists=False`` (stale entries; re-run `wherein index` to drop
them). ``Searcher.last_timings`` holds the split of the last search (sync, encode, ann, join,
total; ms); ``Searcher.last_warnings`` what the user should hear about it (an ``under`` folder
holding no indexed file: outside every folder the index covers, say), one line each. Both are
per thread: a server's threads sharing one Searcher each read their own search's. The text
tower loads on the first text query, the image tower on the first ``--like`` of a file that
is not in the index; both once per process.

A Searcher may be shared between threads (a web app's workers).
"""

from __future__ import annotations

import enum
import fnmatch
import functools
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from wherein.indexer import paths as P
from wherein.indexer.kinds import registry as media
from wherein.indexer.models.modeldir import ModelDir
from wherein.indexer.models.registry import (
    ImageEmbedder,
    TextEncoder,
    entry_for,
    refuse_other_family,
)
from wherein.indexer.normalize import unit_rows
from wherein.indexer.store.index_store import IndexStore
from wherein.schemas.errors import IndexError_, ModelError
from wherein.schemas.records import HIT_KINDS, Hit
from wherein.search.query import SORT_KEYS, Query, QueryError, Term
from wherein.search.ranked import Entry, Ranked
from wherein.search.ranking import THRESHOLD_SLACK, exact_scores, rank_order
from wherein.search.regions import fold_photo
from wherein.search.selection import Selection, check_glob
from wherein.search.videos import (
    first_per_file,
    matching_frames,
    moments,
    nth_file_position,
)

__all__ = [
    "HIT_KINDS",
    "Hit",
    "Query",
    "QueryError",
    "QueryVectors",
    "Searcher",
    "SORT_KEYS",
    "open_index",
]

DEFAULT_K = 10
# Approximate (SQ8) scores can be off by ~1e-3; widen the range search by this
# much, then cut on exact scores.
_APPROX_MARGIN = 0.01


@dataclass(frozen=True)
class QueryVectors:
    full: np.ndarray  # [dim] unit: ranks hits (score)
    text: np.ndarray | None  # [dim] unit: the text part, for probability; None without text


class Template(enum.Enum):
    """A prompt template that is not a string: the loaded model's own."""

    MODEL = "the model's own template"


MODEL_TEMPLATE = Template.MODEL


def open_index(
    index_dir: str | Path | None = None,
    models_dir: str | Path | None = None,
    template: str | Template | None = MODEL_TEMPLATE,
) -> Searcher:
    """Open an index for searching (read-only). Directories: argument > env > per-user default.

    template: how a text term becomes the prompt the text tower sees ("{}" is
    the term); by default the model's own (SigLIP 2's "This is a photo of {}."),
    None for raw text.
    """
    store = IndexStore.open(P.index_dir(index_dir))
    return Searcher(store, ModelDir(P.models_dir(models_dir)), template)


# Prompts whose text vectors a Searcher keeps (3 KB each at 768-d): a long-lived one (the web
# app) sees the same text again on every page turn, re-sort and filter change.
PROMPT_VECTORS = 256


class Searcher:
    def __init__(
        self, store: IndexStore, models: ModelDir, template: str | Template | None = MODEL_TEMPLATE
    ) -> None:
        self.store = store
        self.models = models
        self.model = entry_for(models)  # the registered model family (its spec, its loaders)
        self.template = self.model.spec.template if template is MODEL_TEMPLATE else template
        self._last = threading.local()
        self._image_tower: ImageEmbedder | None = None
        self._lock = threading.RLock()
        self._prompt_vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._prompt_lock = threading.Lock()

    @property
    def last_timings(self) -> dict[str, float]:
        return getattr(self._last, "timings", {})

    @last_timings.setter
    def last_timings(self, value: dict[str, float]) -> None:
        self._last.timings = value

    @property
    def last_warnings(self) -> list[str]:
        return getattr(self._last, "warnings", [])

    @last_warnings.setter
    def last_warnings(self, value: list[str]) -> None:
        self._last.warnings = value

    # -- lifecycle ------------------------------------------------------------
    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Searcher:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def refresh(self) -> str:
        """Catch up with commits made since the last search (a long-running reader's tick)."""
        with self._lock:
            return self.store.ensure_vectors(persist=False)

    # -- what the index holds --------------------------------------------------
    @property
    def count(self) -> int:
        """Searchable images (the FAISS copy, in line with the catalog after a search)."""
        return self.store.vectors.ntotal

    @property
    def space(self) -> str | None:
        return self.store.catalog.get_meta("space")

    @property
    def dim(self) -> int:
        return int(self.store.catalog.get_meta("dim", 0) or 0)

    @property
    def index_kind(self) -> str | None:
        choice = self.store.vectors.choice
        return choice.kind if choice else None

    # -- models (lazy) ---------------------------------------------------------
    @property
    def text_tower(self) -> TextEncoder:
        return self.model.load_text(self.models)

    @property
    def image_tower(self) -> ImageEmbedder:
        if self._image_tower is None:
            self._image_tower = self.model.load_image(self.models, None)
        return self._image_tower

    def probability(self, cosine) -> np.ndarray:
        return self.text_tower.probability(cosine)

    # -- query vectors -------------------------------------------------------------
    def check_space(self) -> None:
        """The query side (models dir) must be the index's family and embed into its space."""
        refuse_other_family(
            self.store.catalog.get_meta("family"), self.model.key, self.store.dir, self.models.root
        )
        space = self.space
        if space is not None and space != self.models.space:
            raise ModelError(
                f"the index was built in embedding space {space!r} but {self.models.root} holds "
                f"{self.models.space!r} models: point --models / WHEREIN_MODELS at the models used "
                f"for indexing, or re-index with these"
            )

    def embed_query(self, query: Query | str) -> QueryVectors:
        """Unit vectors for a query: the full combination and its text part."""
        q = Query.parse(query) if isinstance(query, str) else query
        q.validate()
        self.check_space()
        dim = self.dim
        parts: list[np.ndarray] = []
        weights: list[float] = []
        text_terms = q.text_terms
        if text_terms:
            prompts = [self.prompt(t.value) for t in text_terms]
            vecs = self._text_vectors(prompts)
            _check_dim(vecs.shape[1], dim, "text tower")
            parts.extend(unit_rows(vecs))
            weights.extend(t.weight for t in text_terms)
        text = _combine(parts, weights) if parts else None
        if text_terms and text is None:
            raise QueryError(f"the text terms of {str(q)!r} cancel out")
        for t in q.image_terms:
            v = self._embed_image(t)
            _check_dim(v.shape[0], dim, "image tower")
            parts.append(v)
            weights.append(t.weight)
        full = _combine(parts, weights)
        if full is None:
            raise QueryError(f"the terms of {str(q)!r} cancel out: nothing left to search for")
        return QueryVectors(full, text)

    def stamp(self) -> tuple:
        """What a search's answer depends on besides its request: the catalog's commits (made
        by any other process) and the vectors searched. Equal stamps, equal answers."""
        with self._lock:
            cat, vectors = self.store.catalog, self.store.vectors
            return (cat.data_version, cat.generation, vectors.ntotal, vectors.damaged)

    def unencoded(self, query: Query) -> list[str]:
        """The prompts of the query's text terms whose vectors are not kept: what a search
        for it would run the text tower on."""
        prompts = [self.prompt(t.value) for t in query.text_terms]
        with self._prompt_lock:
            return [p for p in dict.fromkeys(prompts) if p not in self._prompt_vectors]

    def encode_ahead(self, prompts: list[str]) -> None:
        """Encode prompts and keep their vectors, so that a search for them runs no tower
        (the web app does this on its own thread: searches for known texts never wait)."""
        if prompts:
            self.check_space()  # a search would refuse other models before encoding
            self._text_vectors(prompts)

    def _text_vectors(self, prompts: list[str]) -> np.ndarray:
        """The text tower's vectors of prompts; those encoded lately come from a small LRU
        (the tower is the same for the Searcher's life)."""
        with self._prompt_lock:
            found = {p: self._prompt_vectors[p] for p in prompts if p in self._prompt_vectors}
            for p in found:
                self._prompt_vectors.move_to_end(p)
        missing = [p for p in dict.fromkeys(prompts) if p not in found]
        if missing:
            vecs = self.text_tower.encode(missing)
            found.update(zip(missing, vecs, strict=True))
            with self._prompt_lock:
                self._prompt_vectors.update(zip(missing, vecs, strict=True))
                while len(self._prompt_vectors) > PROMPT_VECTORS:
                    self._prompt_vectors.popitem(last=False)
        return np.stack([found[p] for p in prompts])

    def prompt(self, text: str) -> str:
        if not self.template:
            return text
        return self.template.format(text.strip().rstrip(".!?;,").strip())

    def _embed_image(self, term: Term) -> np.ndarray:
        if term.kind == "indexed":
            with self._lock:
                vec = self._file_vector(int(term.value))
            if vec is None:
                raise QueryError(f"image {term.value} is not in the index")
            return vec
        path = Path(term.value).expanduser()
        if not path.is_file():
            raise QueryError(f"{term.value}: no such image file (--like)")
        stored = self._indexed_vector(path)
        if stored is not None:
            return stored  # already embedded: no need to load the image tower
        from wherein.indexer.imaging import DecodeError, decode
        from wherein.indexer.regular import read_regular

        try:
            data = read_regular(path)  # swapped for a FIFO or a device since: refused
        except OSError as exc:
            raise QueryError(f"{term.value}: cannot read ({exc.strerror or exc})") from None
        if (found := media.kind_of(path, data[: media.HEAD_BYTES])).timed:
            raise QueryError(f"{term.value}: {found.a} is used with --like once it is indexed")
        try:
            img, _ = decode(data, self.model.spec.image.size)
        except DecodeError as exc:
            raise QueryError(f"{term.value}: {exc}") from None
        tower = self.image_tower
        if tower.space != self.models.space:  # pragma: no cover - same ModelDir
            raise ModelError(f"image tower space {tower.space!r} != {self.models.space!r}")
        return unit_rows(tower.embed(tower.preprocess(img)[None]))[0]

    def _indexed_vector(self, path: Path) -> np.ndarray | None:
        """The catalog's vector for this file when it is indexed and unchanged."""
        st = path.stat()
        with self._lock:
            row = self.store.catalog.row_by_path(os.path.abspath(path))
            if row is None or row["size"] != st.st_size or row["mtime_ns"] != st.st_mtime_ns:
                return None
            return self._file_vector(row["id"])

    def _file_vector(self, file_id: int) -> np.ndarray | None:
        """A file's query vector (call under the lock): a photo's one vector; for a timed file
        (a video) the mean direction of its frames (what the clip shows overall), unit length."""
        cat = self.store.catalog
        vec = cat.file_vectors([file_id]).get(file_id)
        if vec is not None:
            return unit_rows(vec[None])[0]
        frames = cat.embedded_frames([file_id]).get(file_id)
        if not frames:
            return None
        _, vecs = cat.vectors_for([item for item, _ in frames])
        return unit_rows(unit_rows(vecs).mean(axis=0)[None])[0]

    # -- search ---------------------------------------------------------------------
    def search(
        self, query: Selection | Query | str, *, check_exists: bool = True, **selection: Any
    ) -> list[Hit]:
        """Hits for a Selection, or for a query and Selection's fields as keywords
        (``search("red", k=5, kind="video")``); see wherein.search.selection for the rules."""
        return list(self._search(query, selection, check_exists, lazy=False))

    def ranked(
        self, query: Selection | Query | str, *, check_exists: bool = True, **selection: Any
    ) -> Sequence[Hit]:
        """The hits ``search`` gives, in its order, as a sequence whose hits are built from
        their catalog rows only when read (wherein.search.ranked: a web page reads 48 of a
        block of 200). Sorted by score (either way) only; another sort needs every hit's row,
        so its hits are built at once."""
        return self._search(query, selection, check_exists, lazy=True)

    def _search(
        self,
        query: Selection | Query | str,
        selection: dict[str, Any],
        check_exists: bool,
        lazy: bool,
    ) -> Sequence[Hit]:
        if isinstance(query, Selection):
            if selection:
                raise TypeError("give a Selection or a query with keywords, not both")
            sel = query
        else:
            sel = Selection(query, **selection)
        sel.check()
        q, k, under, kind = sel.parsed, sel.k, sel.folders, sel.kind
        min_probability, min_score = sel.min_probability, sel.min_score
        photo = sel.photo_filter()
        t0 = time.perf_counter()
        self.last_warnings = []
        with self._lock:
            self.store.ensure_vectors(persist=False)  # cheap when current; catches up after a crash
            empty = self.store.vectors.ntotal == 0  # not count(*): that scans the vector blobs
            if self.store.vectors.damaged:
                self.last_warnings = [
                    f"{self.store.dir}: {self.store.vectors.damaged}; searched vectors rebuilt "
                    "from the catalog in memory (`wherein status --repair` rebuilds the file)"
                ]
        if empty:
            self.last_timings = {
                "sync_ms": 0.0,
                "encode_ms": 0.0,
                "ann_ms": 0.0,
                "join_ms": 0.0,
                "total_ms": 0.0,
            }
            return []
        t_sync = time.perf_counter()
        qv = self.embed_query(q)
        t1 = time.perf_counter()
        with self._lock:
            allowed = self._filter_ids(under, sel.patterns)
            if allowed is not None and not len(allowed):
                self.last_warnings = self.last_warnings + self._empty_folders(under)
            if photo is not None:
                allowed = photo.ids(self.store.catalog, allowed)
            if kind is not None:
                of_kind = self.store.catalog.embedded_ids(file_kind=kind)
                allowed = of_kind if allowed is None else np.intersect1d(allowed, of_kind)
            # Folding costs a look-up of each candidate's file: not for a library of photos
            # without regions.
            regions = not sel.frames and self.store.catalog.holds_regions()
            fold = not sel.frames and (regions or self.store.catalog.holds_videos())
            ids = self._candidates(qv, k, min_probability, min_score, allowed, fold)
            t2 = time.perf_counter()
            entries = self._rank(qv, ids, k, min_probability, min_score, fold, regions)
            ranked = list(enumerate(entries, start=1))
            by_score = sel.sort == "score"
            if by_score and sel.reverse:
                ranked.reverse()  # the ranks stay the relevance order's
            hits: Sequence[Hit] = Ranked(ranked, functools.partial(self._hits, check_exists))
            if not (lazy and by_score):
                hits = list(hits)
        if not by_score:
            assert isinstance(hits, list)
            _sort(hits, sel.sort, sel.reverse)
        t3 = time.perf_counter()
        self.last_timings = {
            "sync_ms": (t_sync - t0) * 1e3,
            "encode_ms": (t1 - t_sync) * 1e3,
            "ann_ms": (t2 - t1) * 1e3,
            "join_ms": (t3 - t2) * 1e3,
            "total_ms": (t3 - t0) * 1e3,
        }
        return hits

    def _hits(self, check_exists: bool, ranked: list[tuple[int, Entry]]) -> list[Hit | None]:
        """The Hits of ranked entries from their catalog rows (None: the row is gone); what
        a fold made of a hit goes over its row."""
        with self._lock:
            rows = self.store.catalog.hit_rows(e.item for _, e in ranked)
            out: list[Hit | None] = []
            for rank, e in ranked:
                row = rows.get(e.item)
                if row is None:  # deleted between the ranking and now
                    out.append(None)
                    continue
                hit = Hit.from_row(row, rank, e.score, e.probability, check_exists=check_exists)
                out.append(hit.replace(**e.changes) if e.changes else hit)
            return out

    # -- internals ----------------------------------------------------------------------
    def _filter_ids(self, under, glob) -> np.ndarray | None:
        """Catalog ids passing --under/--glob; None when there is no filter."""
        unders = _as_list(under)
        globs = _as_list(glob)
        if not unders and not globs:
            return None
        return self._matching_ids(unders, globs)

    def _matching_ids(self, unders: list, globs: list) -> np.ndarray:
        """Catalog ids under any of ``unders`` and matching any of ``globs`` (either empty: all)."""
        folders = [os.path.abspath(os.path.expanduser(os.fspath(u))) for u in unders]
        rows = self.store.catalog.embedded_paths(folders or None)
        if globs:
            matchers = [_glob_matcher(g) for g in globs]
            rows = [r for r in rows if any(m(r[1]) for m in matchers)]
        return np.array(sorted(r[0] for r in rows), dtype=np.int64)

    def _empty_folders(self, under) -> list[str]:
        """A warning for each ``under`` folder that holds no indexed image at all."""
        return [
            f"--under {u}: no indexed image is in this folder (it is outside every folder "
            "this index covers, or they hold no images); `wherein status` shows the index"
            for u in _as_list(under)
            if not len(self._matching_ids([u], []))
        ]

    def _candidates(
        self, qv: QueryVectors, k, min_probability, min_score, allowed, fold: bool = False
    ) -> np.ndarray:
        """Candidate ids from FAISS (a superset of the final cut when scores are approximate).

        fold: k counts files, not items: fetch until the items found span k files (a video's
        frames crowd the top), and the ties of the k-th file's best item are in."""
        import faiss

        index = self.store.vectors.index
        choice = self.store.vectors.choice
        if index is None or index.ntotal == 0 or (allowed is not None and len(allowed) == 0):
            return np.zeros(0, dtype=np.int64)
        approx = choice is not None and choice.kind != "flat"
        selector = faiss.IDSelectorBatch(allowed) if allowed is not None else None
        nprobe = choice.nprobe if choice is not None else 0
        nlist = choice.nlist if choice is not None else 0
        threshold: tuple[np.ndarray, float] | None = None
        if min_probability is not None:
            assert qv.text is not None  # search() refuses min_probability without a text term
            threshold = (qv.text, self.text_tower.cosine_for_probability(min_probability))
        elif min_score is not None:
            threshold = (qv.full, float(min_score))
        if threshold is not None:
            vec, cos = threshold
            # _join keeps exact scores down to cos - THRESHOLD_SLACK; FAISS's own float32
            # scores are off by ~1e-7 (flat) or ~1e-3 (SQ8), so ask it for a little more.
            radius = cos - (_APPROX_MARGIN if approx else 2 * THRESHOLD_SLACK)
            # "All matches" is a promise: an IVF range search probes every list (a scan of
            # the 1-byte codes, still 4x less memory traffic than Flat), not just nprobe.
            _, _, ids = index.range_search(
                vec[None].astype(np.float32),
                radius,
                params=_params(selector, nlist if nprobe else 0),
            )
            return np.unique(ids.astype(np.int64))
        want = k or DEFAULT_K
        available = index.ntotal if allowed is None else len(allowed)
        # Approximate scores: over-fetch, the exact re-scoring in _join picks the true top k.
        fetch = min(available, want * 4 if approx else want)
        while True:
            dist, ids = index.search(
                qv.full[None].astype(np.float32), max(1, fetch), params=_params(selector, nprobe)
            )
            found = ids[0] >= 0
            got, dist = ids[0][found], dist[0][found]
            cut = min(want, len(got))  # items up to the last one wanted
            if fold:
                cut = self._file_cut(got, want, approx)
                if cut == len(got) and nprobe and nprobe < nlist and len(got) < fetch:
                    nprobe = min(nlist, nprobe * 4)
                    continue
            # IVF probes only nprobe lists: a narrow filter can leave it short; widen until exhaustive.
            if len(got) < min(want, available) and nprobe and nprobe < nlist:
                nprobe = min(nlist, nprobe * 4)
                continue
            # Hits tied with the last one wanted may lie past the cut, and which of them FAISS
            # returned depends on the CPU: fetch until the tie is inside, _join breaks it by id.
            if fetch < available and len(got) == fetch and _tied(dist, cut):
                fetch = min(available, fetch * 2)
                continue
            return got.astype(np.int64)

    def _file_cut(self, got: np.ndarray, want: int, approx: bool) -> int:
        """How many of the items found (best first) reach the want-th file's best item; all of
        them when they hold fewer files than wanted (a video's frames took the places: the
        caller's tie check then fetches more). As for items, an approximate search wants 4x
        the files to pick the true top from."""
        files = self._files_of(got)
        if nth_file_position(files, want * 4 if approx else want) is None:
            return len(got)
        return (nth_file_position(files, want) or 0) + 1

    def _files_of(self, item_ids: np.ndarray) -> list[int | None]:
        """The file of each item (None: not in the catalog any more)."""
        files = self.store.catalog.item_files(int(i) for i in item_ids)
        return [files.get(int(i)) for i in item_ids]

    def _rank(
        self,
        qv: QueryVectors,
        ids: np.ndarray,
        k,
        min_probability,
        min_score,
        fold: bool = False,
        regions: bool = False,
    ) -> list[Entry]:
        """Exact scores from the catalog's vectors, the cut, the folds: the hits in their
        final order as Entries (no catalog row read: Searcher._hits builds the Hits).

        fold: one hit per file, its best item's (a video's best frame), with moments.
        regions: the index holds photos' regions: a photo's items are folded into its hit
        before the cut (its calibrated probability decides whether it passes)."""
        if len(ids) == 0:
            return []
        cat = self.store.catalog
        got, vecs = cat.vectors_for(ids)
        if len(got) == 0:
            return []
        vecs = unit_rows(vecs)
        scores = exact_scores(vecs, qv.full)
        text_cos = exact_scores(vecs, qv.text) if qv.text is not None else None
        probs = self.text_tower.probability(text_cos) if text_cos is not None else None
        keep = np.ones(len(got), dtype=bool)
        if min_probability is not None and text_cos is not None:
            cos = self.text_tower.cosine_for_probability(min_probability)
            keep &= text_cos >= cos - THRESHOLD_SLACK
        if min_score is not None:
            keep &= scores >= min_score - THRESHOLD_SLACK
        ranked = rank_order(scores, got)
        order: list[int] = ranked[keep[ranked]].tolist()
        items: list[int] = got.tolist()
        owners: dict[int, tuple[int, str | None]] = {}
        if fold:
            owners = cat.item_owners(items[i] for i in order)
            files = [owners[i][0] if i in owners else None for i in items]
            order = first_per_file(order, files)
        limit = _limit(k, min_probability, min_score)
        if limit is not None and not regions:
            order = order[:limit]
        score_of: list[float] = scores.tolist()
        prob_of: list[float] | None = None if probs is None else np.asarray(probs).tolist()
        entries = []
        for i in order:
            file, kind = owners.get(items[i], (None, None))
            prob = None if prob_of is None else prob_of[i]
            entries.append(Entry(items[i], score_of[i], prob, file, _timed_kind(kind)))
        if regions:
            entries = self._fold_regions(qv, entries, min_probability, min_score)[:limit]
        if fold and any(e.timed for e in entries):
            entries = self._fold_timed(qv, entries, min_probability, min_score)
        return entries

    def _fold_regions(
        self, qv: QueryVectors, entries: list[Entry], min_probability, min_score
    ) -> list[Entry]:
        """Each hit of a file with regions (a photo) becomes its file's: its best item (exact scores)
        and that item's region, with the calibrated score and probability
        (wherein.search.regions); a photo whose probability is under --min-probability is
        left out, and so is one whose score is under --min-score. Then ranked again, best
        first, equal scores by item id."""
        cat = self.store.catalog
        items = cat.photo_regions(e.file for e in entries if not e.timed and e.file is not None)
        scale = self.text_tower.logit_scale if qv.text is not None else None
        floor = None
        if min_probability is not None and qv.text is not None:
            floor = self.text_tower.cosine_for_probability(min_probability) - THRESHOLD_SLACK
        out: list[Entry] = []
        for e in entries:
            located = items.get(e.file) if e.file is not None else None
            if not located:
                out.append(e)
                continue
            got, vecs = cat.vectors_for([i for i, _ in located])
            box_of = dict(located)
            vecs = unit_rows(vecs)
            text_cos = exact_scores(vecs, qv.text) if qv.text is not None else None
            whole = np.array([box_of[int(i)] is None for i in got])
            f = fold_photo(got, exact_scores(vecs, qv.full), text_cos, whole, scale)
            if floor is not None and f.text_cos is not None and f.text_cos < floor:
                continue
            if min_score is not None and f.score < min_score - THRESHOLD_SLACK:
                continue
            prob = None if f.text_cos is None else float(self.text_tower.probability(f.text_cos))
            out.append(
                e.folded(
                    item_id=int(got[f.best]),
                    score=f.score,
                    probability=prob,
                    region=box_of[int(got[f.best])],
                )
            )
        order = rank_order([e.ranked_score for e in out], [e.item_id for e in out])
        return [out[i] for i in order]

    def _fold_timed(
        self, qv: QueryVectors, entries: list[Entry], min_probability, min_score
    ) -> list[Entry]:
        """Each hit of a timed kind (a video) becomes its file's: the best of all its frames
        (exact scores, not only the candidates FAISS returned) with the moments they make;
        then ranked again, best first, equal scores by item id."""
        cat = self.store.catalog
        timed = [e.file for e in entries if e.timed and e.file is not None]
        frames = cat.embedded_frames(timed)
        videos = cat.video_rows(frames)
        calibration = None
        if qv.text is not None:
            calibration = (self.text_tower.logit_scale, self.text_tower.logit_bias)
        out: list[Entry] = []
        for e in entries:
            stamps = frames.get(e.file) if e.timed and e.file is not None else None
            if not stamps:
                out.append(e)
                continue
            item_ids = np.array([i for i, _ in stamps], dtype=np.int64)
            got, vecs = cat.vectors_for(item_ids)
            by_id = dict(zip(got.tolist(), range(len(got)), strict=True))
            rows = [by_id[i] for i in item_ids.tolist() if i in by_id]
            times = np.array([t for i, t in stamps if i in by_id], dtype=np.float64)
            item_ids = got[rows]
            vecs = unit_rows(vecs[rows])
            scores = exact_scores(vecs, qv.full)
            text_cos = exact_scores(vecs, qv.text) if qv.text is not None else None
            probs = self.text_tower.probability(text_cos) if text_cos is not None else None
            passes = None
            if min_probability is not None and text_cos is not None:
                cos = self.text_tower.cosine_for_probability(min_probability)
                passes = text_cos >= cos - THRESHOLD_SLACK
            elif min_score is not None:
                passes = scores >= min_score - THRESHOLD_SLACK
            matching = matching_frames(scores, text_cos, calibration, passes)
            ranked = [i for i in rank_order(scores, item_ids) if passes is None or passes[i]]
            best = ranked[0] if ranked else int(np.flatnonzero(item_ids == e.item_id)[0])
            duration = videos[e.file]["duration"] if e.file in videos else None
            out.append(
                e.folded(
                    item_id=int(item_ids[best]),
                    time=float(times[best]),
                    score=float(scores[best]),
                    probability=None if probs is None else float(probs[best]),
                    moments=moments(times, item_ids, scores, probs, matching, duration),
                )
            )
        order = rank_order([e.ranked_score for e in out], [e.item_id for e in out])
        return [out[i] for i in order]


def _timed_kind(kind: str | None) -> bool:
    """Whether a hit showing this kind (a file's media kind, else its item's; as
    Hit.from_row names it) is of a timed file (its frames fold into moments)."""
    return kind is not None and media.timed(HIT_KINDS.get(kind, kind))


def _limit(k, min_probability, min_score) -> int | None:
    """How many hits: k; without it, all above a threshold, else DEFAULT_K."""
    if k is not None:
        return k
    return None if (min_probability is not None or min_score is not None) else DEFAULT_K


def _params(selector, nprobe: int):
    import faiss

    # FAISS's Python wrapper takes fields as keywords (and keeps `sel` alive); its stubs
    # declare bare constructors.
    if nprobe:
        return faiss.SearchParametersIVF(sel=selector, nprobe=nprobe)  # type: ignore[call-arg, unused-ignore]
    if selector is None:
        return None
    return faiss.SearchParameters(sel=selector)  # type: ignore[call-arg, unused-ignore]


def _tied(dist: np.ndarray, want: int) -> bool:
    """Whether FAISS's last score may equal the want-th one (at ranking precision, plus its
    own float32 noise)."""
    return bool(want and dist[-1] >= dist[want - 1] - 2 * THRESHOLD_SLACK)


def _check_dim(got: int, want: int, what: str) -> None:
    if want and got != want:
        raise IndexError_(
            f"the {what} gives {got}-dimensional vectors but the index holds {want}-dimensional "
            f"ones: the models do not match the index (re-index, or use the matching --models)"
        )


def _combine(parts: list[np.ndarray], weights: list[float]) -> np.ndarray | None:
    v = np.zeros_like(parts[0], dtype=np.float64)
    for p, w in zip(parts, weights, strict=True):
        v += w * p
    n = np.linalg.norm(v)
    if n < 1e-6:
        return None
    return (v / n).astype(np.float32)


def _as_list(v) -> list:
    if v is None:
        return []
    if isinstance(v, str | Path):
        return [v]
    return [x for x in v if x]


def _glob_matcher(pattern: str):
    """No "/": match the file name; with "/": the path (relative patterns match a tail)."""
    check_glob(pattern)
    pat = os.path.expanduser(pattern).lower()
    if "/" not in pat:
        return lambda path: fnmatch.fnmatchcase(os.path.basename(path).lower(), pat)
    if not pat.startswith("/"):
        pat = "*/" + pat
    return lambda path: fnmatch.fnmatchcase(path.lower(), pat)


def _sort(hits: list[Hit], key: str, reverse: bool) -> None:
    if key == "score":
        hits.sort(key=lambda h: h.rank, reverse=reverse)
    elif key == "date":
        hits.sort(key=lambda h: (-(h.mtime_ns or 0), h.rank), reverse=reverse)
    elif key == "taken":  # newest photo first; equal times keep the relevance order
        hits.sort(key=lambda h: h.rank)
        hits.sort(key=lambda h: h.taken_key or "", reverse=True)
        if reverse:
            hits.reverse()
    elif key == "path":
        hits.sort(key=lambda h: h.path, reverse=reverse)
    elif key == "size":
        hits.sort(key=lambda h: (-(h.size or 0), h.rank), reverse=reverse)
