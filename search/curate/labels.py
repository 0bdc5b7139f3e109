"""Zero-shot labelling: per-image SigLIP probabilities for each label, stored in the catalog.

SigLIP scores every (image, label) pair with its own sigmoid,
``p = sigmoid(exp(logit_scale) * cos + logit_bias)``: the probabilities of
one image's labels are independent and need not sum to 1 (an image can be
both "cat" and "sofa", or neither). Each label becomes the prompt
``template.format(label)`` ("This is a photo of {}." by default, "{}" for the
label as typed); cosines are a matrix product of the catalog's vectors (read
batch by batch) with the label text embeddings.

Results go to the catalog's labels (Catalog.store_labels), one row per (image,
label, template, model_id): re-running replaces the rows, and rows go with their
image when the indexer drops it. ``model_id`` is the index's image model, so
labels from an older model are not mistaken for current ones.

Labels are per file: a video's frames are items of one file, so its probability for a label
is the best of its frames' (``per_file``), and its row names the frame where its most likely
label is likeliest (its time is the hit's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from wherein.indexer.normalize import unit_rows
from wherein.indexer.store.catalog import CatalogReadOnly
from wherein.schemas.errors import IndexError_, UsageError
from wherein.schemas.records import Hit
from wherein.search.query import is_text
from wherein.search.ranking import rank_order, tie_key

RAW_TEMPLATE = "{}"


class LabelError(UsageError):
    """Bad labels or template."""


@dataclass
class LabelRun:
    labels: list[str]
    template: str
    prompts: list[str]
    model_id: str
    ids: np.ndarray  # [n] catalog ids
    cosines: np.ndarray  # [n, L] image . label-text
    probabilities: np.ndarray  # [n, L] calibrated, independent per label


def parse_labels(labels: str | Sequence[str]) -> list[str]:
    """'cat, dog,car' (or a list of such strings) -> ['cat', 'dog', 'car'], duplicates dropped."""
    parts = [labels] if isinstance(labels, str) else list(labels)
    out: list[str] = []
    for part in parts:
        for label in part.split(","):
            label = " ".join(label.split())
            if not is_text(label):
                raise LabelError(f"label {label!r}: not text (it holds bytes that are not UTF-8)")
            if label and label not in out:
                out.append(label)
    if not out:
        raise LabelError("no labels given (e.g. --labels 'cat,dog,car')")
    return out


def check_template(template: str) -> str:
    if not is_text(template):
        raise LabelError(f"template {template!r}: not text (it holds bytes that are not UTF-8)")
    try:
        filled = template.format("\0")
    except (IndexError, KeyError, ValueError):
        raise LabelError(
            f"template {template!r}: use {{}} for the label and nothing else in braces"
        ) from None
    if filled.count("\0") != 1:
        raise LabelError(
            f"template {template!r} must contain {{}} exactly once, where the label goes"
        )
    return template


def prompt_for(template: str, label: str) -> str:
    # Same clean-up as search's prompts: "cat." must not become "... of cat.."
    return template.format(label.strip().rstrip(".!?;,").strip())


def compute_labels(searcher, labels: Sequence[str], template: str, batch: int = 4096) -> LabelRun:
    """Probabilities of every indexed image for every label (searcher: wherein.search.searcher.Searcher)."""
    labels = parse_labels(labels)
    template = check_template(template)
    searcher.check_space()
    tower = searcher.text_tower
    prompts = [prompt_for(template, label) for label in labels]
    text = unit_rows(tower.encode(prompts))  # [L, d]
    dim = searcher.dim
    if dim and text.shape[1] != dim:
        raise IndexError_(
            f"the text tower gives {text.shape[1]}-dimensional vectors but the index holds "
            f"{dim}-dimensional ones: use the models the index was built with"
        )
    cat = searcher.store.catalog
    ids, cosines = [], []
    for batch_ids, vecs in cat.iter_vectors(batch):
        ids.append(batch_ids)
        cosines.append(unit_rows(vecs) @ text.T)
    all_ids = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)
    cos = np.concatenate(cosines) if cosines else np.zeros((0, len(labels)), dtype=np.float32)
    probs = np.asarray(tower.probability(cos), dtype=np.float64).reshape(cos.shape)
    run = LabelRun(
        labels, template, prompts, str(cat.get_meta("model_id") or ""), all_ids, cos, probs
    )
    return per_file(run, cat.item_files(all_ids.tolist())) if cat.holds_videos() else run


def per_file(run: LabelRun, file_of: dict[int, int]) -> LabelRun:
    """One row per file: each label's best probability (and cosine) over the file's items, on
    the row of the item whose best label is likeliest (equal: the smaller item id); items no
    longer in the catalog (file_of lacks them) are left out."""
    files = np.array([file_of.get(int(i), -1) for i in run.ids], dtype=np.int64)
    kept = np.flatnonzero(files >= 0)
    if not len(kept):
        return LabelRun(
            run.labels,
            run.template,
            run.prompts,
            run.model_id,
            run.ids[:0],
            run.cosines[:0],
            run.probabilities[:0],
        )
    best = tie_key(run.probabilities[kept].max(axis=1))
    # By file, then the best item first: each file's first row names it.
    order = kept[np.lexsort((run.ids[kept], -best, files[kept]))]
    starts = np.flatnonzero(np.r_[True, np.diff(files[order]) != 0])
    return LabelRun(
        run.labels,
        run.template,
        run.prompts,
        run.model_id,
        run.ids[order[starts]],
        np.maximum.reduceat(run.cosines[order], starts, axis=0),
        np.maximum.reduceat(run.probabilities[order], starts, axis=0),
    )


def store_labels(catalog, run: LabelRun) -> int:
    """Write the run's rows to the catalog in one transaction; returns the number of rows written.

    An image the indexer dropped since its vector was read is left out, not an error.
    """
    rows = (
        (int(item_id), label, float(run.probabilities[i, j]), run.template, run.model_id)
        for i, item_id in enumerate(run.ids)
        for j, label in enumerate(run.labels)
    )
    try:
        with catalog.transaction():
            return catalog.store_labels(rows)
    except CatalogReadOnly:
        raise IndexError_(
            f"{catalog.path}: the catalog is read-only; use --no-store to only export"
        ) from None


def read_labels(
    catalog, label: str | None = None, template: str | None = None, model_id: str | None = None
) -> list[dict]:
    """Stored label rows (image_id, path, label, probability, template, model_id), by path then label."""
    return catalog.read_labels(label, template, model_id)


def label_hits(catalog, run: LabelRun) -> list[Hit]:
    """One hit per image, listed by path: probability/score of its best label, all labels in
    extra. ``rank`` is the relevance rank, as a search's hits sorted by path keep it: 1 for
    the image most sure of its best label (equal probabilities: the smaller id first)."""
    rows = catalog.hit_rows(run.ids)
    present = [i for i in range(len(run.ids)) if int(run.ids[i]) in rows]
    best = {i: int(np.argmax(tie_key(run.probabilities[i]))) for i in present}  # equal: first
    by_relevance = rank_order(
        [run.probabilities[i, best[i]] for i in present], [run.ids[i] for i in present]
    )
    rank = {present[int(pos)]: n + 1 for n, pos in enumerate(by_relevance)}
    hits: list[Hit] = []
    for i in sorted(present, key=lambda i: rows[int(run.ids[i])]["path"]):
        extra = {
            "label": run.labels[best[i]],
            "labels": {label: float(run.probabilities[i, j]) for j, label in enumerate(run.labels)},
        }
        hits.append(
            Hit.from_row(
                rows[int(run.ids[i])],
                rank[i],
                float(run.cosines[i, best[i]]),
                float(run.probabilities[i, best[i]]),
                extra=extra,
            )
        )
    return hits
