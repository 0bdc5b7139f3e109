"""`select`, `label`, `dupes` and `unique` as library calls: the orchestration around the
model-free logic of search/curate/ (what to select, how to group, how unique).

Each returns a typed result; its ``to_dict()`` follows schemas/curate.schema.json
(``$defs/select``, ``label``, ``dupes``, ``unique``). The hits themselves are
``Hit`` records (schemas/hit.schema.json) in ``result.hits``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wherein.schemas.errors import UsageError, WhereinError
from wherein.schemas.records import Hit
from wherein.search.selection import Selection
from wherein.search.service.engine import Engine
from wherein.search.service.errors import only_with
from wherein.search.service.export import Exported, ExportTo, export_hits, export_keep, exported
from wherein.search.service.feedback import QUIET, Feedback


# -- select ---------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class SelectRequest(Selection):
    """Every file whose calibrated probability reaches min_probability: a Selection (its query
    the terms as typed; k: at most this many, the most likely [None: all]) and what to do with
    the hits: mask, export, copy or link them. Options that only apply with another are
    refused on construction."""

    min_probability: float = field(kw_only=False)  # required, second: SelectRequest(q, 0.5)
    raw: bool = False  # the text as typed, without the model's prompt template
    copy_to: Path | None = None
    link_to: Path | None = None
    flat: bool = False
    mask: bool = False
    out_dir: Path | None = None  # masks and overlays (local engine) [search's: ./wherein-masks]
    category_from_labels: bool = False
    engine: Engine = field(default_factory=Engine)
    export_path: Path | None = None
    export_fmt: str | None = None
    overwrite: bool = False  # --overwrite: the export may replace a user's regular file
    index_dir: Path | None = None
    models_dir: Path | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.copy_to and self.link_to:
            raise UsageError("use --copy-to or --link-to, not both")
        only_with("--copy-to or --link-to", bool(self.dest), {"--flat": self.flat})
        only_with("--mask", self.mask, {"--out": self.out_dir})
        only_with(
            "--mask --export",
            self.mask and self.export_path is not None,
            {"--category-from-labels": self.category_from_labels},
        )

    @property
    def dest(self) -> Path | None:
        return self.copy_to or self.link_to

    @property
    def mode(self) -> str:
        return "link" if self.link_to else "copy"


@dataclass
class Placed:
    mode: str  # "copy" | "link"
    dest: Path
    files: int

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "dest": str(self.dest), "files": self.files}


@dataclass
class MaskStep:
    prompt: str
    engine: str
    out: Path | None  # the local engine's mask files; None on Ray (masks in the export)
    masked: int
    ray: Any = None  # RayMaskStats (search/curate/masks_at_scale.py) on --engine ray

    def to_dict(self) -> dict[str, Any]:
        r = self.ray
        return {
            "prompt": self.prompt,
            "engine": self.engine,
            "out": None if self.out is None else str(self.out),
            "masked": self.masked,
            "ray": None
            if r is None
            else {
                "work": r.work,
                "shards": r.shards,
                "done_before": r.done_before,
                "written": r.written,
                "failed": r.failed,
                "restarted": r.restarted,
                "interrupted": r.interrupted,
                "seconds": round(r.seconds, 2),
            },
        }


@dataclass
class SelectResult:
    query: str
    min_probability: float
    hits: list[Hit]
    warnings: list[str] = field(default_factory=list)
    mask: MaskStep | None = None
    export: Exported | None = None
    placed: Placed | None = None

    @property
    def interrupted(self) -> bool:
        """The Ray mask step was interrupted: its finished shards are kept for a re-run."""
        return bool(self.mask and self.mask.ray and self.mask.ray.interrupted)

    def to_dict(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "min_probability": self.min_probability,
            "selected": len(self.hits),
            "warnings": list(self.warnings),
            "mask": None if self.mask is None else self.mask.to_dict(),
            "export": None if self.export is None else self.export.to_dict(),
            "placed": None if self.placed is None else self.placed.to_dict(),
            "interrupted": self.interrupted,
        }


def select(req: SelectRequest, feedback: Feedback = QUIET) -> SelectResult:
    """Every image whose calibrated probability for the query reaches req.min_probability;
    masked, exported and copied or linked as asked.

    Everything that can fail without work fails first: the query, a Ray address, then
    (after the search, before masks or files) where the copies or links would go.
    """
    from wherein.search.curate import select as S
    from wherein.search.searcher import MODEL_TEMPLATE, open_index

    q = req.check().parsed
    if not q.has_text:
        raise UsageError("select needs a text term (the probability is calibrated for text)")
    req.engine.check()
    template = None if req.raw else MODEL_TEMPLATE
    with open_index(req.index_dir, req.models_dir, template=template) as searcher:
        feedback.models(searcher.models)
        hits = searcher.search(req)
        warnings = list(searcher.last_warnings)
        for warning in warnings:
            feedback.say(f"warning: {warning}")
        models_root, index_root = searcher.models.root, searcher.store.dir
        labels = _stored_labels(searcher, hits) if req.category_from_labels else None
    result = SelectResult(str(q), req.min_probability, hits, warnings)
    dest = req.dest
    placements = S.plan(hits, dest, "flat" if req.flat else "tree") if dest else []
    prompt = q.mask_prompt() if req.mask else None
    if prompt:
        skipped: list[str] = []
        result.hits, result.mask = req.engine.run(
            local=lambda: _masks_here(req, hits, prompt, models_root, index_root, skipped),
            ray=lambda: _masks_on_ray(req, hits, prompt, models_root, labels, feedback),
        )
        for warning in skipped:  # hits whose file could not be read any more: no mask
            feedback.say(f"warning: {warning}")
        result.warnings += skipped
    if result.interrupted:
        return result  # nothing exported, nothing copied: a re-run resumes
    if req.export_path and result.mask and result.mask.engine == "ray":
        f = _format(req.export_path, req.export_fmt)  # written by the Ray mask step
        result.export = exported(result.hits, req.export_path, f.name, f.kind, result.mask.masked)
    elif req.export_path:
        result.export = export_hits(
            result.hits,
            req.export_path,
            req.export_fmt,
            prompt=prompt,
            labels=labels,
            index_dir=req.index_dir,
            overwrite=req.overwrite,
        )
    if dest:
        made = S.materialise(placements, req.mode)
        result.placed = Placed(req.mode, dest, len(made))
    return result


def _format(path: Path, fmt: str | None):
    from wherein.search.export.formats import export_format

    return export_format(path, fmt)


def _stored_labels(searcher, hits):
    """Each hit's most likely label from `wherein label`, to name its mask in an export."""
    from wherein.search.export.labels import best_labels

    return best_labels(searcher.store.catalog, [h.id for h in hits])


def _masks_here(req: SelectRequest, hits, prompt, models_root, index_root, skipped: list[str]):
    """A mask PNG and overlay per hit in req.out_dir (never inside the index folder); the
    vision passes kept in the index. skipped: a warning per hit whose file could not be
    read any more."""
    from wherein.indexer.outputs import refuse_in_index
    from wherein.search.cache.vision_store import VisionStore
    from wherein.search.service.mask import MaskSession
    from wherein.search.service.search import DEFAULT_MASK_DIR  # search --mask's, the same

    out = req.out_dir or DEFAULT_MASK_DIR
    refuse_in_index(out, index_root)
    session = MaskSession(models_root, store=VisionStore.in_index(Path(index_root)))
    hits = session.add_masks(hits, prompt, out, skipped=skipped)
    return hits, MaskStep(prompt, "local", out, sum(1 for h in hits if h.mask_path))


def _masks_on_ray(req: SelectRequest, hits, prompt, models_root, labels, feedback: Feedback):
    """Every hit's mask on Ray into the label export (resumable); the hits with mask fields."""
    from wherein.search.curate.masks_at_scale import export_masks

    if req.export_path is None:
        raise UsageError("--engine ray writes the masks as labels: add --export")
    hits, stats = export_masks(
        hits,
        prompt,
        req.export_path,
        _format(req.export_path, req.export_fmt).name,
        models_root,
        labels,
        req.engine.address,
        say=feedback.say,
        progress=feedback.progress,
        on_total=feedback.on_total,
        keep=export_keep(req.index_dir, overwrite=req.overwrite),
    )
    return hits, MaskStep(prompt, "ray", None, stats.masked, stats)


# -- label ----------------------------------------------------------------------------------
@dataclass
class LabelResult:
    labels: list[str]
    template: str
    model_id: str
    images: int
    stored: int  # probabilities written to the catalog's labels table (0 with store=False)
    hits: list[Hit]
    export: Exported | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "labels": list(self.labels),
            "template": self.template,
            "model_id": self.model_id,
            "images": self.images,
            "stored": self.stored,
            "export": None if self.export is None else self.export.to_dict(),
        }


def label(
    labels: str | Sequence[str],
    template: str | None = None,
    raw: bool = False,
    store: bool = True,
    index_dir: Path | None = None,
    models_dir: Path | None = None,
    export: ExportTo | None = None,
    feedback: Feedback = QUIET,
) -> LabelResult:
    """Each image's calibrated probability for each label; stored unless store=False.

    template: the prompt for each label ({} = the label) [the model's own]; raw: the label
    as typed (it wins over template).
    """
    from wherein.search.curate import labels as L
    from wherein.search.searcher import open_index

    names = L.parse_labels(labels)
    if template:
        L.check_template(template)
    with open_index(index_dir, models_dir) as searcher:
        tmpl = L.check_template(L.RAW_TEMPLATE if raw else (template or searcher.template or "{}"))
        feedback.models(searcher.models)
        run = L.compute_labels(searcher, names, tmpl)
        stored = L.store_labels(searcher.store.catalog, run) if store else 0
        hits = L.label_hits(searcher.store.catalog, run)
    done = None if export is None else export.write(hits)
    return LabelResult(names, tmpl, run.model_id, len(run.ids), stored, hits, done)


# -- dupes ----------------------------------------------------------------------------------
REDUNDANT_ON_STANDINS = (
    "--redundant would suggest deleting photos that only share colours: this index "
    "was made with the stand-in models, which see nothing else (byte-identical "
    "copies: --exact --redundant; real models: `wherein models pull`, then "
    "`wherein index` again)"
)


@dataclass
class DupesResult:
    threshold: float | None  # None: only byte-identical files were looked for
    groups: int
    redundant: int
    redundant_bytes: int
    hits: list[Hit]  # group by group, keeper first (only the non-keepers with redundant)
    export: Exported | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "threshold": self.threshold,
            "exact": self.threshold is None,
            "groups": self.groups,
            "redundant": self.redundant,
            "redundant_bytes": self.redundant_bytes,
            "rows": len(self.hits),
            "export": None if self.export is None else self.export.to_dict(),
        }


def dupes(
    threshold: float | None = None,
    exact: bool = False,
    redundant: bool = False,
    index_dir: Path | None = None,
    export: ExportTo | None = None,
    feedback: Feedback = QUIET,
) -> DupesResult:
    """Groups of duplicate and near-duplicate images from the stored vectors (no model)."""
    from wherein.indexer.models.modeldir import is_standin_space
    from wherein.search.curate.dupes import find_duplicates

    with _open_store(index_dir) as store:
        space = store.catalog.get_meta("space")
        feedback.models(space=space, index=store.dir)
        if redundant and not exact and is_standin_space(space):
            raise WhereinError(REDUNDANT_ON_STANDINS)
        report = find_duplicates(store, threshold, exact_only=exact)
    hits = [h for h in report.hits if not (redundant and h.extra["keeper"])]
    done = None if export is None else export.write(hits)
    return DupesResult(
        report.threshold, report.groups, report.redundant, report.redundant_bytes, hits, done
    )


def _open_store(index_dir: Path | None):
    from wherein.indexer import paths as P
    from wherein.indexer.store.index_store import IndexStore

    return IndexStore.open(P.index_dir(index_dir))


# -- unique ---------------------------------------------------------------------------------
@dataclass
class UniqueResult:
    neighbours: int
    hits: list[Hit]  # the most unique first
    export: Exported | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "neighbours": self.neighbours,
            "rows": len(self.hits),
            "export": None if self.export is None else self.export.to_dict(),
        }


def unique(
    neighbours: int = 10,
    limit: int | None = 20,
    index_dir: Path | None = None,
    export: ExportTo | None = None,
    feedback: Feedback = QUIET,
) -> UniqueResult:
    """The oddest images: mean cosine distance to their nearest neighbours, highest first."""
    from wherein.search.curate.unique import unique_hits

    with _open_store(index_dir) as store:
        feedback.models(space=store.catalog.get_meta("space"), index=store.dir)
        hits = unique_hits(store, neighbours, limit)
    return UniqueResult(neighbours, hits, None if export is None else export.write(hits))
