"""`wherein models optimize`: faster graphs from the files `pull` wrote, verified before use.

- SigLIP 2 image tower: fp16 graph -> widen to fp32 -> dynamic-range int8
  (ai-edge-quantizer, FULLY_CONNECTED and CONV_2D only, as `models convert` does:
  an int8 BATCH_MATMUL makes LiteRT fail to prepare the graph). Every signature
  of the source (batch_8 of a converted tower) is kept. Used through the image
  manifest's `file` key, which changes the index's model id: the next
  `wherein index` re-embeds, as after any model change.
- CLIPSeg vision graph: the same recipe; the text graph and the decoder stay.
  Used when clipseg/manifest.json says the candidate passed.
- CLIPSeg text graph at 16 positions instead of 77 (shorten.py: exact, the text
  transformer is causal): a new prompt of up to 14 tokens costs a fraction of the
  77-position run. Its record sits beside the vision one in clipseg/manifest.json.
- SigLIP 2 text tower: `models convert siglip2-text` (LiteRT, no torch at query
  time); litert-torch is a base dependency (it was the [convert] extra).

A candidate is compared with its own full-precision source on the user's
indexed photos (or the bundled sample) and is used only when it meets the pass
marks; the figures go into the manifest either way, and `models check` shows them.
Re-running is safe: a candidate that is current is left alone.
"""

from __future__ import annotations

import importlib.util
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from wherein.indexer.models.convert.build import INSTALL_CONVERTERS, tool_versions
from wherein.indexer.models.image_tower import file_digest
from wherein.indexer.models.modeldir import IMAGE_MANIFEST, REVERIFY, ModelDir
from wherein.indexer.models.optimize.inputs import Sample
from wherein.indexer.models.optimize.shorten import DEFAULT_LENGTH, short_name, shorten
from wherein.indexer.models.optimize.widen import fp16_constant_count, weight_types, widen
from wherein.indexer.store.atomic import write_atomic
from wherein.schemas.errors import ModelError
from wherein.schemas.models import CLIPSEG, SIGLIP_IMAGE, SIGLIP_TEXT

FORMAT = "wherein-optimized/1"
CLIPSEG_MANIFEST = "manifest.json"
RECIPE = "widen fp16 constants to fp32, then dynamic-range int8 (FULLY_CONNECTED, CONV_2D)"
# What the LiteRT text tower gains, measured in bench/results/convert.md (full-size
# ViT-B-16-SigLIP2 text tower, 2 cores): cold start of a query process, then per query.
TEXT_GAIN = {"torch_cold_s": 9.96, "litert_cold_s": 0.37, "torch_ms": 155, "litert_ms": 68}
# A switch must pay for itself (the image tower's costs a full re-embedding). Dynamic int8
# is ~3x faster where the CPU has int8 dot-product instructions (AVX-512 VNNI / AVX-VNNI) and
# about fp32 speed on AVX2-only CPUs (bench/results/optimize.md): measured, not assumed.
MIN_SPEEDUP = 1.25


def speed_matters(md: ModelDir) -> bool:
    """Stand-in graphs are too small to time: their int8 overhead outweighs the arithmetic."""
    return not md.is_standin


def too_slow(ms: dict, min_speedup: float | None) -> bool:
    need = MIN_SPEEDUP if min_speedup is None else min_speedup
    return bool(ms["candidate"] * need > ms["source"])


def speed_failures(
    md: ModelDir, name: str, ms: dict, min_speedup: float | None, unit: str = "image"
) -> list[str]:
    need = MIN_SPEEDUP if min_speedup is None else min_speedup
    if speed_matters(md) and too_slow(ms, min_speedup):
        return [
            f"{name}: not faster on this CPU ({ms['source']:.0f} -> {ms['candidate']:.0f} "
            f"ms/{unit}; switching needs {need}x)"
        ]
    return []


SPEED_EXEMPT = "speed_exempt"


def exempt_note(figures: dict) -> str:
    """Said beside a switch the speed gate would have refused: a slower graph is no surprise."""
    if figures.get(SPEED_EXEMPT):
        return (
            " (slower here, but stand-in graphs are exempt from the speed gate: too small to time)"
        )
    return ""


@dataclass
class Outcome:
    """One model's result. status: ready | switched | up to date | rejected | unavailable | missing."""

    model: str
    status: str
    message: str
    file: str | None = None
    figures: dict = field(default_factory=dict)
    record: dict = field(default_factory=dict)  # what goes into the manifest

    def to_json(self) -> dict:
        return {
            "model": self.model,
            "status": self.status,
            "message": self.message,
            "file": self.file,
            "figures": self.figures,
        }


def quantizer_available() -> bool:
    return importlib.util.find_spec("ai_edge_quantizer") is not None


def text_converter_available() -> bool:
    return all(importlib.util.find_spec(m) for m in ("litert_torch", "ai_edge_quantizer"))


def text_gain_note() -> str:
    g = TEXT_GAIN
    return (
        "litert-torch is missing from this install (a base dependency of wherein: "
        f"{INSTALL_CONVERTERS}); re-run to get a LiteRT "
        f"text tower: a search then starts in {g['litert_cold_s']} s instead of {g['torch_cold_s']} s "
        f"and encodes a query in {g['litert_ms']} ms instead of {g['torch_ms']} ms, without torch "
        "(measured: bench/results/convert.md)"
    )


def candidate_name(source: Path) -> str:
    stem, n = re.subn(r"_(fp16|fp32)", "_int8", source.stem, count=1)
    return f"{stem if n else source.stem + '_int8'}_opt.tflite"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _read_json(path: Path) -> dict | None:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ModelError(f"{path}: unreadable manifest ({exc})") from exc


def _write_json(path: Path, data: dict) -> None:
    write_atomic(path, (json.dumps(data, indent=2) + "\n").encode())


def make_int8(source: Path, out: Path, log: Callable[[str], None]) -> dict:
    """source (fp16 or fp32 weights) -> out (int8 dynamic range); return what was done."""
    from wherein.indexer.models.convert.build import reduce_precision

    wide = out.with_name(out.name + ".fp32.tmp")
    tmp = out.with_name(out.name + ".tmp")
    t0 = time.perf_counter()
    done: dict = {}
    try:
        quantize_from = source
        if fp16_constant_count(source):
            log(f"  widening {source.name} (fp16 weights -> fp32)")
            done["widen"] = widen(source, wide).to_json()
            quantize_from = wide
        log("  quantizing (dynamic-range int8)")
        reduce_precision(quantize_from, tmp, "int8")
        weights = weight_types(tmp)
        if not weights.get("INT8"):  # the recipe found no constant weights to quantize
            raise ModelError(
                f"{source.name}: quantization reached no FULLY_CONNECTED/CONV_2D weights "
                f"(weight types {weights or 'none'})"
            )
        done["weights"] = weights
        tmp.chmod(0o644)
        tmp.replace(out)
    finally:
        wide.unlink(missing_ok=True)
        tmp.unlink(missing_ok=True)
    done.update(seconds=round(time.perf_counter() - t0, 1), bytes=out.stat().st_size)
    return done


def _current(record: dict, source_sha: str, graph: Path, graph_sha: str | None) -> bool:
    """A passed candidate built from this very source, unchanged on disk: nothing to redo."""
    return bool(
        record.get("passed")
        and record.get("from_sha256") == source_sha
        and graph.is_file()
        and file_digest(graph) == graph_sha
    )


def _candidate(key: str, source: Path, log: Callable[[str], None]) -> tuple[Path, dict] | Outcome:
    """Build the int8 candidate beside source: (its path, what was done), or why there is none."""
    if not quantizer_available():
        return Outcome(
            key, "unavailable", f"needs ai-edge-quantizer (a base dependency): {INSTALL_CONVERTERS}"
        )
    out = source.with_name(candidate_name(source))
    log(f"{key}: {source.name} -> {out.name}")
    try:
        return out, make_int8(source, out, log)
    except ModelError as exc:
        return Outcome(key, "rejected", str(exc))


def _verify(
    candidate: Path,
    figures_of: Callable[[], dict],
    md: ModelDir,
    name: str,
    min_speedup: float | None,
    unit: str = "image",
) -> dict:
    """The candidate's figures against its source, the speed check included.

    A candidate that cannot even be compared is removed: only a verified file may stay
    beside the graph in use.
    """
    try:
        figures = figures_of()
    except Exception:
        candidate.unlink(missing_ok=True)
        raise
    ms = figures[f"ms_per_{unit}"]
    figures["failed"] += speed_failures(md, name, ms, min_speedup, unit)
    if not speed_matters(md) and too_slow(ms, min_speedup):
        figures[SPEED_EXEMPT] = True
    return figures


def _signatures(graph) -> dict:
    return {
        s.key: {
            "batch": s.batch,
            "inputs": {n: list(sh) for n, sh in zip(s.inputs, s.input_shapes, strict=True)},
            "outputs": {n: list(sh) for n, sh in zip(s.outputs, s.output_shapes, strict=True)},
        }
        for s in graph.signatures.values()
    }


# -- image tower -------------------------------------------------------------------
def image_source(md: ModelDir) -> tuple[Path, dict | None]:
    """The full-precision graph to start from, and the current manifest (if any)."""
    manifest = _read_json(md.image_dir / IMAGE_MANIFEST)
    if manifest and manifest.get("optimize", {}).get("from"):
        return md.image_dir / manifest["optimize"]["from"], manifest
    if manifest and manifest.get("file"):
        return md.image_dir / manifest["file"], manifest
    return md.image_dir / SIGLIP_IMAGE.graphs[0].filename, manifest


def _torch_source(md: ModelDir, manifest: dict | None) -> dict:
    """The PyTorch reference `models verify` rebuilds for this tower."""
    if manifest and manifest.get("source"):
        return manifest["source"]
    if md.is_standin:
        return {"kind": "standin", "ref": "", "config": "full", "seed": 0}
    from wherein.indexer.models.convert.towers import REAL_SOURCE

    return {"kind": "hub", "ref": REAL_SOURCE, "config": "full", "seed": 0}


def prepare_image(
    md: ModelDir,
    samples: Callable[[], Sample],
    force: bool = False,
    log: Callable[[str], None] = print,
    min_speedup: float | None = None,
) -> Outcome:
    """Build and verify an int8 image tower; nothing switches until adopt_image.

    samples() loads the verification images (only called when a candidate is built).
    """
    from wherein.indexer.models.litert_graph import LiteRTGraph
    from wherein.indexer.models.optimize.compare import image_tower_figures

    key = SIGLIP_IMAGE.key
    source, manifest = image_source(md)
    if not source.is_file():
        return Outcome(key, "missing", f"{source}: not found (run `wherein models pull`)")
    if manifest and manifest.get("precision") == "int8" and "optimize" not in manifest:
        return Outcome(key, "up to date", f"{manifest['file']} is already int8 (models convert)")
    source_sha = file_digest(source)
    record = (manifest or {}).get("optimize", {})
    current = md.image_dir / str(manifest.get("file", "")) if manifest else None
    if (
        not force
        and manifest
        and current is not None
        and current.name == record.get("candidate")
        and _current(record, source_sha, current, manifest.get("sha256"))
    ):
        return Outcome(
            key, "up to date", f"{current.name} is in use", current.name, record["figures"], record
        )
    built = _candidate(key, source, log)
    if isinstance(built, Outcome):
        return built
    out, done = built
    sample = samples()
    log(f"  verifying on {sample.origin}")
    figures = _verify(
        out,
        lambda: image_tower_figures(LiteRTGraph(source), LiteRTGraph(out), sample.images),
        md,
        "image tower",
        min_speedup,
    )
    record = {
        "from": source.name,
        "from_sha256": source_sha,
        "candidate": out.name,
        "recipe": RECIPE,
        "passed": not figures["failed"],
        "verified_on": sample.origin,
        REVERIFY: sample.bundled,
        "figures": figures,
        **done,
        "created": _now(),
    }
    if figures["failed"]:
        out.unlink(missing_ok=True)
        _record_rejection(md, source, manifest, record)
        return Outcome(key, "rejected", "; ".join(figures["failed"]), None, figures, record)
    ms = figures["ms_per_image"]
    return Outcome(
        key,
        "ready",
        f"{ms['source']:.0f} -> {ms['candidate']:.0f} ms/image{exempt_note(figures)}",
        out.name,
        figures,
        record,
    )


def _source_manifest(md: ModelDir, source: Path, sha256: str, torch_source: dict) -> dict:
    """A manifest that makes the full-precision source the image tower."""
    from wherein.indexer.models.litert_graph import LiteRTGraph

    return {
        "format": FORMAT,
        "model": SIGLIP_IMAGE.key,
        "file": source.name,
        "sha256": sha256,
        "source": torch_source,
        "standin": md.is_standin,
        "precision": "fp16" if fp16_constant_count(source) else "fp32",
        "signatures": _signatures(LiteRTGraph(source)),
        "output": "L2-normalised",
    }


def _record_rejection(md: ModelDir, source: Path, manifest: dict | None, record: dict) -> None:
    """Keep the graph in use; write the failed figures where `models check` finds them."""
    if manifest is None:
        manifest = _source_manifest(md, source, record["from_sha256"], _torch_source(md, None))
    write_image_record(md, manifest, record)


def write_image_record(md: ModelDir, manifest: dict, record: dict) -> None:
    """The image manifest with record as its optimize record."""
    _write_json(md.image_dir / IMAGE_MANIFEST, {**manifest, "optimize": record})


def revert_image(md: ModelDir, manifest: dict, record: dict) -> None:
    """Back from the candidate in use to the graph it was built from (the failed record
    stays in the manifest, for `models check`); the candidate's file is deleted."""
    source = md.image_dir / record["from"]
    back = _source_manifest(md, source, record["from_sha256"], _torch_source(md, manifest))
    write_image_record(md, back, record)
    (md.image_dir / manifest["file"]).unlink(missing_ok=True)


def read_manifest(path: Path) -> dict | None:
    return _read_json(path)


def adopt_image(md: ModelDir, outcome: Outcome) -> None:
    """Make the verified candidate the image tower (the index re-embeds on its next run)."""
    from wherein.indexer.models.litert_graph import LiteRTGraph

    path = md.image_dir / str(outcome.file)
    _, manifest = image_source(md)
    manifest = {
        "format": FORMAT,
        "model": SIGLIP_IMAGE.key,
        "file": path.name,
        "sha256": file_digest(path),
        "source": _torch_source(md, manifest),
        "standin": md.is_standin,
        "precision": "int8",
        "signatures": _signatures(LiteRTGraph(path)),
        "output": "L2-normalised",
        "optimize": outcome.record,
        "tools": tool_versions(),
        "created": _now(),
    }
    _write_json(md.image_dir / IMAGE_MANIFEST, manifest)
    outcome.status = "switched"


def discard(md: ModelDir, outcome: Outcome) -> None:
    if outcome.file:
        (md.image_dir / outcome.file).unlink(missing_ok=True)


# -- CLIPSeg vision -------------------------------------------------------------
def optimize_clipseg(
    md: ModelDir,
    samples: Callable[[], Sample],
    force: bool = False,
    log: Callable[[str], None] = print,
    min_speedup: float | None = None,
) -> Outcome:
    """Build, verify and (when it passes) switch to an int8 CLIPSeg vision graph."""
    from wherein.indexer.models.clipseg import DECODER_FILE, TEXT_FILE, VISION_FILE, ClipSeg
    from wherein.indexer.models.litert_graph import LiteRTGraph
    from wherein.indexer.models.optimize.compare import clipseg_figures

    key = CLIPSEG.key
    d = md.clipseg_dir
    source = d / VISION_FILE
    if not source.is_file():
        return Outcome(key, "missing", f"{source}: not found (run `wherein models pull`)")
    manifest_path = d / CLIPSEG_MANIFEST
    manifest = _read_json(manifest_path) or {}
    vision = manifest.get("vision", {})
    source_sha = file_digest(source)
    cand = d / str(vision.get("file", ""))
    if not force and _current(vision, source_sha, cand, vision.get("sha256")):
        return Outcome(
            key, "up to date", f"{cand.name} is in use", cand.name, vision["figures"], vision
        )
    built = _candidate(key, source, log)
    if isinstance(built, Outcome):
        return built
    out, done = built
    sample = samples()
    log(f"  verifying masks on {len(sample.prompts)} images of {sample.origin}")
    text, decoder = LiteRTGraph(d / TEXT_FILE), LiteRTGraph(d / DECODER_FILE)
    src_model = ClipSeg.from_parts(LiteRTGraph(source), text, decoder, d)
    cand_model = ClipSeg.from_parts(LiteRTGraph(out), text, decoder, d)
    n = len(sample.prompts)
    figures = _verify(
        out,
        lambda: clipseg_figures(src_model, cand_model, sample.images[:n], sample.prompts),
        md,
        "CLIPSeg vision",
        min_speedup,
    )
    passed = not figures["failed"]
    record = {
        "file": out.name,
        "sha256": file_digest(out),
        "from": source.name,
        "from_sha256": source_sha,
        "recipe": RECIPE,
        "passed": passed,
        "verified_on": f"the first {n} of {sample.origin}, {figures['pairs']} image x prompt pairs",
        "figures": figures,
        **done,
        "created": _now(),
    }
    return _settle(
        d,
        "vision",
        key,
        out,
        record,
        lambda f: (
            f"vision {f['ms_per_image']['source']:.0f} -> "
            f"{f['ms_per_image']['candidate']:.0f} ms/image, mask IoU {f['mask_iou']:.3f}"
        ),
    )


def _settle(
    d: Path, name: str, key: str, out: Path, record: dict, switched: Callable[[dict], str]
) -> Outcome:
    """Write a verified CLIPSeg candidate's manifest record `name`. Passed: switched to it
    (switched(figures) says how it compares). Failed: its file deleted, the source stays."""
    figures = record["figures"]
    if not record["passed"]:
        out.unlink(missing_ok=True)
        record.pop("stamps", None)  # no file left to match
    _write_clipseg_record(d, name, record)
    if not record["passed"]:
        return Outcome(key, "rejected", "; ".join(figures["failed"]), None, figures, record)
    return Outcome(
        key, "switched", switched(figures) + exempt_note(figures), out.name, figures, record
    )


def _write_clipseg_record(d: Path, key: str, record: dict) -> None:
    """One record of clipseg/manifest.json ("vision" or "text_short"); the others stay."""
    path = d / CLIPSEG_MANIFEST
    manifest = _read_json(path) or {}
    manifest.update({"format": FORMAT, "model": CLIPSEG.key, key: record, "tools": tool_versions()})
    _write_json(path, manifest)


# -- CLIPSeg text at fewer positions ----------------------------------------------
TEXT_SHORT = "text_short"
TEXT_SHORT_RECIPE = "text graph cut from 77 to {n} token positions (causal: exact for eot < {n})"


def optimize_clipseg_text(
    md: ModelDir,
    force: bool = False,
    log: Callable[[str], None] = print,
    min_speedup: float | None = None,
    length: int = DEFAULT_LENGTH,
) -> Outcome:
    """Build, verify and (when cond matches the 77-position graph) use a short text graph."""
    from wherein.indexer.models.clipseg import (
        TEXT_FILE,
        ClipSeg,
        LeftOut,
        ShortTextGraph,
        short_text_spec,
    )
    from wherein.indexer.models.litert_graph import LiteRTGraph
    from wherein.indexer.models.modeldir import file_stamp
    from wherein.indexer.models.optimize.compare import text_gate_prompts, text_short_figures

    key = f"{CLIPSEG.key} text"
    d = md.clipseg_dir
    source = d / TEXT_FILE
    if not source.is_file():
        return Outcome(key, "missing", f"{source}: not found (run `wherein models pull`)")
    rec = (_read_json(d / CLIPSEG_MANIFEST) or {}).get(TEXT_SHORT, {})
    source_sha = file_digest(source)
    cand = d / str(rec.get("file", ""))
    if (
        not force
        and rec.get("length") == length
        and _current(rec, source_sha, cand, rec.get("sha256"))
    ):
        stamps = {"file": file_stamp(cand), "from": file_stamp(source)}
        if rec.get("stamps") != stamps:  # same bytes, copied or touched: vouch for them again
            rec = {**rec, "stamps": stamps}
            _write_clipseg_record(d, TEXT_SHORT, rec)
        return Outcome(key, "up to date", f"{cand.name} is in use", cand.name, rec["figures"], rec)
    out = d / short_name(source, length)
    log(f"{key}: {source.name} -> {out.name} ({length} token positions)")
    record: dict = {
        "from": source.name,
        "from_sha256": source_sha,
        "length": length,
        "recipe": TEXT_SHORT_RECIPE.format(n=length),
        "created": _now(),
    }

    def reject(reason: str) -> Outcome:
        """Keep the 77 graph; say why where `models check` finds it."""
        record.update(passed=False, figures={"failed": [reason]})
        return _settle(d, TEXT_SHORT, key, out, record, str)

    try:
        done = shorten(source, out, length).to_json()
    except ModelError as exc:  # a graph the rewrite cannot shorten exactly
        return reject(f"{source.name}: {exc}")

    src_model = ClipSeg.from_parts(LeftOut("vision"), LiteRTGraph(source), LeftOut("decoder"), d)

    def make():
        g = LiteRTGraph(out)
        g.check(short_text_spec(out.name, length))
        return g

    m = src_model  # the same graphs and assets; only the short graph added
    cand_model = ClipSeg(
        m.vision,
        m.text,
        m.decoder,
        m.token_table,
        m.projection,
        m.tokenizer,
        short_text=ShortTextGraph(length, make),
    )
    prompts = text_gate_prompts(src_model, length)
    log(f"  verifying cond on {len(prompts)} prompts of 1-{length - 2} tokens")
    try:
        figures = _verify(
            out,
            lambda: text_short_figures(src_model, cand_model, prompts),
            md,
            "CLIPSeg text",
            min_speedup,
            unit="prompt",
        )
    except ModelError as exc:  # the short graph does not load or breaks its contract
        return reject(str(exc))
    passed = not figures["failed"]
    record.update(
        file=out.name,
        sha256=file_digest(out),
        passed=passed,
        verified_on=f"{figures['prompts']} prompts of {length - 2} tokens or fewer",
        figures=figures,
        stamps={"file": file_stamp(out), "from": file_stamp(source)},
        **done,
    )
    return _settle(
        d,
        TEXT_SHORT,
        key,
        out,
        record,
        lambda f: (
            f"new prompt {f['ms_per_prompt']['source']:.1f} -> "
            f"{f['ms_per_prompt']['candidate']:.1f} ms (up to {length - 2} tokens), "
            f"cond corr {f['cond_pearson_min']:.6f}"
        ),
    )


# -- text tower ----------------------------------------------------------------
def optimize_text(md: ModelDir, force: bool = False, log: Callable[[str], None] = print) -> Outcome:
    from wherein.indexer.models.text_tower_litert import TEXT_GRAPH, TEXT_MANIFEST, has_litert_text

    key = SIGLIP_TEXT.key
    if has_litert_text(md.root) and not force:
        manifest = _read_json(md.text_dir / TEXT_MANIFEST) or {}
        fig = manifest.get("parity", {}).get("figures", {}).get("serving_default", {})
        return Outcome(key, "up to date", f"{TEXT_GRAPH} is in use", TEXT_GRAPH, fig)
    if not text_converter_available():
        return Outcome(key, "unavailable", text_gain_note())
    if not (md.text_dir / "open_clip_config.json").is_file():
        return Outcome(
            key, "missing", f"{md.text_dir}: no open_clip model (run `wherein models pull`)"
        )
    from wherein.indexer.models.convert.build import convert_text_tower
    from wherein.indexer.models.convert.towers import parse_source

    log(f"{key}: converting the open_clip text tower to LiteRT")
    try:
        manifest = convert_text_tower(
            parse_source(f"local-dir:{md.text_dir}"), md.root, log=lambda s: log("  " + s)
        )
    except ModelError as exc:  # the converter's own check against open_clip failed
        return Outcome(key, "rejected", str(exc))
    fig = manifest["parity"]["figures"]["serving_default"]
    return Outcome(
        key,
        "switched",
        f"correlation {fig['pearson']:.6f} vs open_clip; queries no longer import torch",
        TEXT_GRAPH,
        fig,
    )


def reembed_estimate(sample: Sample, outcome: Outcome, cores: int) -> dict:
    """Seconds the next `wherein index` needs to re-embed the catalog with the candidate."""
    model_ms = outcome.figures["ms_per_image"]["candidate"]
    per_image = model_ms + sample.decode_ms / max(cores, 1)  # decode overlaps on the other cores
    return {
        "images": sample.catalog_images,
        "model_ms": model_ms,
        "decode_ms": round(sample.decode_ms, 1),
        "seconds": round(sample.catalog_images * per_image / 1000, 1),
    }
