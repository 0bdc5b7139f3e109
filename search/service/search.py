"""Search from Python: the one public entry point, which `wherein search` and the web app's
/api/search call too. A query in, ranked hits out, with their masks and export when asked.

    from wherein.search.service.search import SearchRequest, open_index, search

    with open_index() as index:  # index/models dirs: args > env > per-user dirs
        result = search(index, SearchRequest("a red car", k=20, kind="video"))
        for h in result.hits:
            print(h.rank, h.score, h.probability, h.path, h.time)
        print(result.to_dict())  # schemas/search.schema.json

A ``SearchRequest`` is a ``Selection`` (wherein.search.selection: the query, -k, thresholds,
folders, patterns, dates, camera, place, kind, frames-or-files, sort) plus what to do with
its hits: ``mask`` (a ``MaskRequest``) and ``export`` (an ``ExportRequest``). The query is a
string of the query algebra or a ``Query`` (wherein.search.query, which also says what
``score`` and ``probability`` mean). The request is checked before any model loads: the
selection, a mask prompt to segment, and the export's format and destination (never into the
index folder, never over an input of the query). ``open_index(index_dir, models_dir,
template)`` opens an index read-only; one open index may serve many searches, from several
threads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wherein.schemas.errors import UsageError
from wherein.schemas.records import Hit
from wherein.search.query import Query, QueryError
from wherein.search.searcher import (
    MODEL_TEMPLATE,
    Searcher,
    Template,
    open_index,
)
from wherein.search.selection import Selection
from wherein.search.service.errors import only_with
from wherein.search.service.export import check_destination, export_keep

__all__ = [
    "MODEL_TEMPLATE",
    "DEFAULT_MASK_DIR",
    "ExportRequest",
    "Hit",
    "MaskRequest",
    "Query",
    "QueryError",
    "SearchRequest",
    "SearchResult",
    "Searcher",
    "Selection",
    "Template",
    "models_used",
    "open_index",
    "search",
]

DEFAULT_MASK_DIR = Path("wherein-masks")


@dataclass(frozen=True)
class MaskRequest:
    """Segment where the match is in each hit (CLIPSeg). prompt: what to segment (None: the
    query's first positive text term); min_area: drop hits whose mask covers less of the
    image; full_size_overlays: overlays at the image's size, not a preview."""

    prompt: str | None = None
    out_dir: Path = DEFAULT_MASK_DIR
    min_area: float | None = None
    full_size_overlays: bool = False


@dataclass(frozen=True)
class ExportRequest:
    """Write the hits to path (- for standard output) as fmt (None: from the suffix);
    category_from_labels: a mask export names each mask by the image's best stored label."""

    path: Path | str
    fmt: str | None = None
    category_from_labels: bool = False
    overwrite: bool = False  # --overwrite: a user's regular file may be replaced


@dataclass(frozen=True, kw_only=True)
class SearchRequest(Selection):
    """One search: a Selection (what to find; wherein.search.selection) and what to do with
    its hits: segment them (mask) and write them out (export). A mask's options with no mask
    are refused on construction, as the CLI's are."""

    mask: MaskRequest | None = None
    export: ExportRequest | None = None
    check_exists: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        e = self.export
        only_with(
            "--mask --export",
            self.mask is not None and e is not None,
            {"--category-from-labels": e is not None and e.category_from_labels},
        )


@dataclass
class SearchResult:
    """What a search found: the hits (ranked, then sorted as asked), what the user should
    hear about it, where its time went (ms), and the models that answered."""

    query: str
    hits: Sequence[Hit]  # a list; from search(lazy=True), a Ranked built as it is read
    warnings: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    models: dict[str, Any] = field(default_factory=dict)
    mask_prompt: str | None = None
    exported: Path | None = None  # where the export went (None: no export)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (schemas/search.schema.json); each hit as hit.schema.json says."""
        return {
            "query": self.query,
            "mask_prompt": self.mask_prompt,
            "hits": [h.to_dict() for h in self.hits],
            "warnings": list(self.warnings),
            "timings": dict(self.timings),
            "models": dict(self.models),
            "export": None if self.exported is None else str(self.exported),
        }


def search(searcher: Searcher, request: SearchRequest, *, lazy: bool = False) -> SearchResult:
    """Run one search on an open Searcher (see the module docstring).

    lazy: the hits are built from their catalog rows only as they are read
    (``Searcher.ranked``): a web page reads one page of a block. A mask or an export reads
    them all at once."""
    q = request.check().parsed
    prompt = _mask_prompt(q, request.mask)
    keep = _check_export(searcher, q, request)
    if request.mask is not None:  # before the search, not after it
        from wherein.indexer.outputs import refuse_in_index

        refuse_in_index(request.mask.out_dir, searcher.store.dir)
    hits: Sequence[Hit]
    if lazy and request.mask is None and request.export is None:
        hits = searcher.ranked(request, check_exists=request.check_exists)
    else:
        hits = searcher.search(request, check_exists=request.check_exists)
    timings, warnings = dict(searcher.last_timings), list(searcher.last_warnings)
    labels = None
    if request.export is not None and request.export.category_from_labels:
        from wherein.search.export.labels import best_labels

        labels = best_labels(searcher.store.catalog, [h.id for h in hits])
    if request.mask is not None:
        assert prompt is not None  # _mask_prompt refuses a mask with nothing to segment
        hits = _masks(searcher, list(hits), prompt, request.mask, warnings)
    exported = None
    if request.export is not None:
        from wherein.search.export.hits import write_export

        e = request.export
        exported = write_export(list(hits), e.path, e.fmt, prompt=prompt, labels=labels, keep=keep)
    return SearchResult(
        query=str(q),
        hits=hits,
        warnings=warnings,
        timings=timings,
        models=models_used(searcher),
        mask_prompt=prompt if request.mask is not None else q.mask_prompt(),
        exported=exported,
    )


def models_used(searcher: Searcher) -> dict[str, Any]:
    """The models that answer a Searcher's queries: folder, embedding space, stand-ins or
    not, the prompt template (None: raw text)."""
    return {
        "root": str(searcher.models.root),
        "space": searcher.models.space,
        "standin": searcher.models.is_standin,
        "template": searcher.template if isinstance(searcher.template, str) else None,
    }


def _masks(
    searcher: Searcher, hits: list[Hit], prompt: str, mask: MaskRequest, warnings: list[str]
) -> list[Hit]:
    """The hits with their masks; a hit whose file cannot be read any more gets none, and
    a warning naming it joins warnings."""
    from wherein.search.cache.vision_store import VisionStore
    from wherein.search.service.mask import MaskSession

    # The index's vision store: another prompt on these hits later runs only the decoder.
    session = MaskSession(searcher.models.root, store=VisionStore.in_index(searcher.store.dir))
    return session.add_masks(
        hits,
        prompt,
        mask.out_dir,
        mask.min_area,
        full_size_overlays=mask.full_size_overlays,
        skipped=warnings,
    )


def _mask_prompt(q: Query, mask: MaskRequest | None) -> str | None:
    if mask is None:
        return None
    prompt = q.mask_prompt(mask.prompt)
    if not prompt:
        raise UsageError("--mask needs a text term or --mask-prompt to know what to segment")
    return prompt


def _check_export(searcher: Searcher, q: Query, request: SearchRequest) -> list[Any]:
    """What the export may not write (the index folder, the query's photos), after checking
    that it can be written at all: before the search, not after it."""
    export = request.export
    if export is None:
        return []
    photos = [t.value for t in q.image_terms if t.kind == "image"]
    keep = export_keep(searcher.store.dir, photos, export.overwrite)
    check_destination(export.path, export.fmt, request.mask is not None, keep)
    return keep
