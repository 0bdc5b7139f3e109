"""The fast set-up as one call: what `models optimize`, `models pull` and the demo run.

- optimize_models: every optimization step over a models directory, each graph kept
  only when it passes its gate. Switching the image tower of a non-empty index re-embeds
  it, so that switch needs the caller's yes (confirm); without a way to ask, it is
  not made and the outcome says how to accept.
- setup_models: `models pull` then optimize_models, the switch accepted (the user asked
  for the set-up by pulling).
- reverify_image: the first `wherein index` after an image tower was verified only on
  the bundled sample (the index was empty) compares it again with its source on the
  photos about to be indexed, and switches back to the source when it fails there.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from wherein.indexer.models.family import ModelEntry
from wherein.indexer.models.modeldir import IMAGE_MANIFEST, REVERIFY, ModelDir
from wherein.indexer.models.optimize import build as O
from wherein.indexer.models.optimize.inputs import load_sample, photos_sample
from wherein.indexer.models.registry import entry_for
from wherein.schemas.errors import UsageError

Log = Callable[[str], None]
# confirm(estimate) -> switch now? None: nobody can be asked (no terminal, no --yes).
Confirm = Callable[[dict], bool] | None


def always(_estimate: dict) -> bool:
    return True


@dataclass
class Report:
    root: Path
    outcomes: list[O.Outcome]
    estimate: dict | None
    verified_on: str | None

    def to_json(self) -> dict:
        return {
            "models": str(self.root),
            "verified_on": self.verified_on,
            "optimized": [o.to_json() for o in self.outcomes],
            "reembed": self.estimate,
        }


def optimize_models(
    md: ModelDir,
    index: Path | None,
    parts: Sequence[str] | None = None,
    confirm: Confirm = always,
    force: bool = False,
    count: int = 32,
    min_speedup: float | None = None,
    log: Log = print,
) -> Report:
    """Build, verify and (where they pass) switch to the faster graphs of md (parts: of the
    family's, as parts_of names them; None: all)."""
    family = entry_for(md)
    known = family.parts()
    parts = known if not parts else list(parts)
    if unknown := [p for p in parts if p not in known]:
        raise UsageError(
            f"{', '.join(unknown)}: not a part of the {family.key} models in {md.root} "
            f"(optimize builds {', '.join(known)})"
        )
    steps = {p.step for p in family.optimize if p.name in parts}
    outcomes, estimate = [], None
    samples = functools.cache(lambda: load_sample(index, count))
    if "image" in steps:
        out = O.prepare_image(md, samples, force, log, min_speedup)
        if out.status == "ready":
            estimate = O.reembed_estimate(samples(), out, len(os.sched_getaffinity(0)))
            _announce_switch(out, estimate, index, log)
            _switch_image(md, out, estimate, confirm)
        outcomes.append(out)
    if "clipseg" in parts:
        outcomes.append(O.optimize_clipseg(md, samples, force, log, min_speedup))
        outcomes.append(O.optimize_clipseg_text(md, force, log, min_speedup))
    if "text" in steps:
        outcomes.append(O.optimize_text(md, force, log))
    verified_on = samples().origin if samples.cache_info().currsize else None
    return Report(md.root, outcomes, estimate, verified_on)


def _switch_image(md: ModelDir, out: O.Outcome, estimate: dict, confirm: Confirm) -> None:
    if not estimate["images"]:  # nothing to re-embed: nothing to ask
        O.adopt_image(md, out)
        return
    if confirm is None:
        O.discard(md, out)
        out.status = "not switched"
        out.message = (
            f"{out.message}; switching re-embeds {estimate['images']:,} images and needs a yes "
            "(stdin is no terminal): run `wherein models optimize --yes` to accept"
        )
    elif confirm(estimate):
        O.adopt_image(md, out)
    else:
        O.discard(md, out)
        out.status, out.message = "declined", "kept the current image tower"


def setup_models(
    root: Path,
    keys: list[str] | None,
    index: Path | None,
    optimize: bool = True,
    log: Log = print,
    family: ModelEntry | None = None,
) -> tuple[list[Path], Report | None]:
    """Download the family's models (default: the one root holds, else SigLIP 2 B/16) and
    CLIPSeg into root, then (optimize) switch to the fastest verified graphs."""
    from wherein.indexer.models.registry import SIGLIP2_ENTRY
    from wherein.indexer.models.siglip_family import claim

    if family is None:  # the family the directory holds; stand-ins give way to SigLIP 2
        family = entry_for(ModelDir(root))
        family = family if family.pull is not None else SIGLIP2_ENTRY
    if family.pull is None:
        raise UsageError(f"the {family.key} models are not downloaded: nothing to pull")
    claim(root, family)
    written = family.pull(root, keys, log)
    for d in written:
        log(f"ok  {d}")
    if not optimize:
        return written, None
    parts = [p for p in family.parts() if keys is None or p in keys]
    return written, optimize_models(ModelDir(root), index, parts, always, log=log)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _announce_switch(out: O.Outcome, estimate: dict, index: Path | None, log: Log) -> None:
    """Say what switching costs before it happens: the whole catalog re-embeds."""
    ms = out.figures["ms_per_image"]
    log(
        f"verified: {out.file} passes ({ms['source']:.0f} -> {ms['candidate']:.0f} ms/image "
        f"on {ms['threads']} threads)"
    )
    n = estimate["images"]
    if not n:
        log("switching the image tower (the index is empty: nothing to re-embed)")
        return
    log(
        f"Switching the image tower is a model change: the index at {index} holds {n:,} images, "
        f"and the next `wherein index` drops their vectors and re-embeds every one, about "
        f"{_duration(estimate['seconds'])} here ({estimate['model_ms']:.0f} ms/image model, measured "
        f"now, + {estimate['decode_ms']:.0f} ms/image decoding spread over the cores). "
        "Searches use the old vectors until then."
    )


# -- the first index: verify again on the user's photos ---------------------------
def reverify_image(md: ModelDir, roots: Sequence[str | Path], count: int = 32) -> str | None:
    """Compare the image tower in use with its source on the photos under roots.

    Returns the one line to tell the user, or None when there was nothing to do (no
    pending re-verification, or no photo under roots decodes: it stays pending). Only
    the agreement is gated here, not the speed: the speed was measured at the switch
    and does not depend on the photos.
    """
    if not md.image_reverify_pending():
        return None
    from wherein.indexer.ingest.walk import walk
    from wherein.indexer.models.litert_graph import LiteRTGraph
    from wherein.indexer.models.optimize.compare import image_tower_figures

    paths = []
    for found in walk(roots):
        paths.append(found.path)
        if len(paths) >= count * 30:  # enough to spread over without walking everything
            break
    sample = photos_sample(paths, count)
    if sample is None:
        return None
    manifest = O.read_manifest(md.image_dir / IMAGE_MANIFEST) or {}
    record = dict(manifest["optimize"])
    source, candidate = md.image_dir / record["from"], md.image_dir / manifest["file"]
    if not (source.is_file() and candidate.is_file()):
        return None  # loading the tower says what is missing; nothing to compare here
    figures = image_tower_figures(LiteRTGraph(source), LiteRTGraph(candidate), sample.images)
    worst = min(f["pearson"] for f in figures["signatures"].values())
    record.pop(REVERIFY)
    record.update(bundled_figures=record["figures"], figures=figures, verified_on=sample.origin)
    try:
        if not figures["failed"]:
            O.write_image_record(md, manifest, record)
            return (
                f"verified the int8 image tower again on {sample.origin} "
                f"(correlation {worst:.4f}): kept"
            )
        O.revert_image(md, manifest, {**record, "passed": False})
    except OSError as exc:  # a read-only models folder: say so, index with what is there
        return f"re-verifying the int8 image tower: could not update {md.image_dir} ({exc})"
    return (
        f"the int8 image tower failed on {sample.origin} ({'; '.join(figures['failed'])}): "
        f"switched back to {source.name}"
    )
