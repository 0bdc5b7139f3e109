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
from functools import cached_property
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


def _signatures(graph) -> dict:
    return {
        s.key: {
            "batch": s.batch,
            "inputs": {n: list(sh) for n, sh in zip(s.inputs, s.input_shapes, strict=True)},
            "outputs": {n: list(sh) for n, sh in zip(s.outputs, s.output_shapes, strict=True)},
        }
        for s in graph.signatures.values()
    }


# -- the template: the steps every graph goes through ------------------------------
Gate = Callable[[bool], Outcome | None]


class Pipeline:
    """One graph's optimization, its steps written once (run), in this order:

    1. gates (force: bool -> Outcome or None), in the order gates() gives: the source is
       there, no verified candidate of it is already in use, the tool that builds one is
       installed. The first that answers is the outcome.
    2. build: the candidate beside its source; a ModelError rejects it (refuse).
    3. verify: its figures against the source (figures), the speed gate included; an
       error that keeps it from being compared removes it.
    4. record: what goes into the manifest, passed or not.
    5. settle: failed, the candidate is deleted and its record written where `models
       check` finds it (write); passed, it is used or made ready (passed).

    A subclass is one graph's spec: its source, how a candidate is built and measured,
    what its record holds and where it is written.
    """

    key: str  # the outcome's model
    name: str = ""  # the speed gate's name for the graph
    unit = "image"  # what the ms figures are per
    use = "switched"  # a passed candidate's status: used at once
    source: Path
    # Errors of verification that reject the candidate (else they are raised).
    verify_refusals: tuple[type[Exception], ...] = ()

    def __init__(self, md: ModelDir, log: Callable[[str], None], min_speedup: float | None):
        self.md, self.log, self.min_speedup = md, log, min_speedup

    def run(self, force: bool = False) -> Outcome:
        for gate in self.gates():
            if (early := gate(force)) is not None:
                return early
        try:
            out, done = self.build()
        except ModelError as exc:
            return self.refuse(str(exc))
        try:
            figures = self.verify(out)
        except self.verify_refusals as exc:
            return self.refuse(str(exc))
        return self.settle(out, self.record(out, done, figures))

    # -- the steps, as most graphs take them -----------------------------------------
    def gates(self) -> tuple[Gate, ...]:
        return (self.missing, self.in_use, self.unavailable)

    def missing(self, force: bool) -> Outcome | None:
        if self.source.is_file():
            return None
        return Outcome(self.key, "missing", f"{self.source}: not found (run `wherein models pull`)")

    def in_use(self, force: bool) -> Outcome | None:
        """A passed candidate built from this very source, unchanged on disk: nothing to redo."""
        kept = None if force else self.kept()
        if kept is None:
            return None
        record, graph, sha = kept
        current = (
            record.get("passed")
            and record.get("from_sha256") == self.source_sha
            and graph.is_file()
            and file_digest(graph) == sha
        )
        return self.up_to_date(graph, record) if current else None

    def up_to_date(self, graph: Path, record: dict) -> Outcome:
        return Outcome(
            self.key, "up to date", f"{graph.name} is in use", graph.name, record["figures"], record
        )

    def unavailable(self, force: bool) -> Outcome | None:
        if quantizer_available():
            return None
        return Outcome(
            self.key,
            "unavailable",
            f"needs ai-edge-quantizer (a base dependency): {INSTALL_CONVERTERS}",
        )

    @cached_property
    def source_sha(self) -> str:
        return file_digest(self.source)

    def verify(self, out: Path) -> dict:
        """A candidate that cannot even be compared is removed: only a verified file may stay
        beside the graph in use."""
        try:
            figures = self.figures(out)
        except Exception:
            out.unlink(missing_ok=True)
            raise
        ms = figures[f"ms_per_{self.unit}"]
        figures["failed"] += speed_failures(self.md, self.name, ms, self.min_speedup, self.unit)
        if not speed_matters(self.md) and too_slow(ms, self.min_speedup):
            figures[SPEED_EXEMPT] = True
        return figures

    def refuse(self, reason: str) -> Outcome:
        return Outcome(self.key, "rejected", reason)

    def settle(self, out: Path, record: dict) -> Outcome:
        if record["passed"]:
            return self.passed(out, record)
        figures = record["figures"]
        out.unlink(missing_ok=True)
        record.pop("stamps", None)  # no file left to match
        self.write(record)
        return Outcome(self.key, "rejected", "; ".join(figures["failed"]), None, figures, record)

    # -- the spec: what each graph says for itself -----------------------------------
    def kept(self) -> tuple[dict, Path, str | None] | None:
        """The record of the candidate in use, its graph and the sha256 it was verified with."""
        return None

    def build(self) -> tuple[Path, dict]:
        """Write the candidate; (its path, what was done)."""
        raise NotImplementedError

    def figures(self, out: Path) -> dict:
        """The candidate compared with its source: ms_per_<unit> and "failed" (reasons)."""
        raise NotImplementedError

    def record(self, out: Path, done: dict, figures: dict) -> dict:
        raise NotImplementedError

    def write(self, record: dict) -> None:
        """Write the record where `models check` and the loaders read it."""
        raise NotImplementedError

    def passed(self, out: Path, record: dict) -> Outcome:
        figures = record["figures"]
        message = self.gain(figures) + exempt_note(figures)
        return Outcome(self.key, self.use, message, out.name, figures, record)

    def gain(self, figures: dict) -> str:
        """How a passed candidate compares with its source, in one line."""
        raise NotImplementedError


class _Int8(Pipeline):
    """A graph made dynamic-range int8 (make_int8), verified on sample photos."""

    def __init__(
        self,
        md: ModelDir,
        log: Callable[[str], None],
        min_speedup: float | None,
        samples: Callable[[], Sample],
    ):
        super().__init__(md, log, min_speedup)
        self.samples = samples

    @cached_property
    def sample(self) -> Sample:
        """The verification images, loaded only once a candidate is built."""
        return self.samples()

    def build(self) -> tuple[Path, dict]:
        out = self.source.with_name(candidate_name(self.source))
        self.log(f"{self.key}: {self.source.name} -> {out.name}")
        return out, make_int8(self.source, out, self.log)


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


class _ImageTower(_Int8):
    """Used only once adopt_image switches to it (the index re-embeds): passed is "ready"."""

    key, name, use = SIGLIP_IMAGE.key, "image tower", "ready"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.key = self.md.image_dir.name  # the family's image folder
        self.source, self.manifest = image_source(self.md)

    def gates(self) -> tuple[Gate, ...]:
        return (self.missing, self.converted, self.in_use, self.unavailable)

    def converted(self, force: bool) -> Outcome | None:
        """A tower `models convert` made int8 already: nothing to gain."""
        m = self.manifest
        if m and m.get("precision") == "int8" and "optimize" not in m:
            return Outcome(self.key, "up to date", f"{m['file']} is already int8 (models convert)")
        return None

    def kept(self) -> tuple[dict, Path, str | None] | None:
        if not self.manifest:
            return None
        record = self.manifest.get("optimize", {})
        current = self.md.image_dir / str(self.manifest.get("file", ""))
        if current.name != record.get("candidate"):
            return None
        return record, current, self.manifest.get("sha256")

    def figures(self, out: Path) -> dict:
        from wherein.indexer.models.litert_graph import LiteRTGraph
        from wherein.indexer.models.optimize.compare import image_tower_figures

        self.log(f"  verifying on {self.sample.origin}")
        return image_tower_figures(LiteRTGraph(self.source), LiteRTGraph(out), self.sample.images)

    def record(self, out: Path, done: dict, figures: dict) -> dict:
        return {
            "from": self.source.name,
            "from_sha256": self.source_sha,
            "candidate": out.name,
            "recipe": RECIPE,
            "passed": not figures["failed"],
            "verified_on": self.sample.origin,
            REVERIFY: self.sample.bundled,
            "figures": figures,
            **done,
            "created": _now(),
        }

    def write(self, record: dict) -> None:
        """Keep the graph in use; write the failed figures where `models check` finds them."""
        manifest = self.manifest
        if manifest is None:
            manifest = _source_manifest(
                self.md, self.source, self.source_sha, _torch_source(self.md, None)
            )
        write_image_record(self.md, manifest, record)

    def gain(self, figures: dict) -> str:
        ms = figures["ms_per_image"]
        return f"{ms['source']:.0f} -> {ms['candidate']:.0f} ms/image"


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
    return _ImageTower(md, log, min_speedup, samples).run(force)


def _source_manifest(md: ModelDir, source: Path, sha256: str, torch_source: dict) -> dict:
    """A manifest that makes the full-precision source the image tower."""
    from wherein.indexer.models.litert_graph import LiteRTGraph

    return {
        "format": FORMAT,
        "model": md.image_dir.name,
        "file": source.name,
        "sha256": sha256,
        "source": torch_source,
        "standin": md.is_standin,
        "precision": "fp16" if fp16_constant_count(source) else "fp32",
        "signatures": _signatures(LiteRTGraph(source)),
        "output": "L2-normalised",
    }


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
        "model": md.image_dir.name,
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
def _write_clipseg_record(d: Path, key: str, record: dict) -> None:
    """One record of clipseg/manifest.json ("vision" or "text_short"); the others stay."""
    path = d / CLIPSEG_MANIFEST
    manifest = _read_json(path) or {}
    manifest.update({"format": FORMAT, "model": CLIPSEG.key, key: record, "tools": tool_versions()})
    _write_json(path, manifest)


class _ClipsegRecord(Pipeline):
    """A CLIPSeg graph whose record is one key of clipseg/manifest.json; passed, it is
    used at once (ClipSeg.load reads the record)."""

    record_key: str

    def kept(self) -> tuple[dict, Path, str | None] | None:
        d = self.md.clipseg_dir
        record = (_read_json(d / CLIPSEG_MANIFEST) or {}).get(self.record_key, {})
        return record, d / str(record.get("file", "")), record.get("sha256")

    def write(self, record: dict) -> None:
        _write_clipseg_record(self.md.clipseg_dir, self.record_key, record)

    def passed(self, out: Path, record: dict) -> Outcome:
        self.write(record)
        return super().passed(out, record)


class _ClipsegVision(_ClipsegRecord, _Int8):
    key, name, record_key = CLIPSEG.key, "CLIPSeg vision", "vision"

    def __init__(self, *args, **kwargs):
        from wherein.indexer.models.clipseg import VISION_FILE

        super().__init__(*args, **kwargs)
        self.source = self.md.clipseg_dir / VISION_FILE

    def figures(self, out: Path) -> dict:
        from wherein.indexer.models.clipseg import DECODER_FILE, TEXT_FILE, ClipSeg
        from wherein.indexer.models.litert_graph import LiteRTGraph
        from wherein.indexer.models.optimize.compare import clipseg_figures

        d, sample = self.md.clipseg_dir, self.sample
        n = len(sample.prompts)
        self.log(f"  verifying masks on {n} images of {sample.origin}")
        text, decoder = LiteRTGraph(d / TEXT_FILE), LiteRTGraph(d / DECODER_FILE)
        src_model = ClipSeg.from_parts(LiteRTGraph(self.source), text, decoder, d)
        cand_model = ClipSeg.from_parts(LiteRTGraph(out), text, decoder, d)
        return clipseg_figures(src_model, cand_model, sample.images[:n], sample.prompts)

    def record(self, out: Path, done: dict, figures: dict) -> dict:
        n = len(self.sample.prompts)
        return {
            "file": out.name,
            "sha256": file_digest(out),
            "from": self.source.name,
            "from_sha256": self.source_sha,
            "recipe": RECIPE,
            "passed": not figures["failed"],
            "verified_on": f"the first {n} of {self.sample.origin}, "
            f"{figures['pairs']} image x prompt pairs",
            "figures": figures,
            **done,
            "created": _now(),
        }

    def gain(self, figures: dict) -> str:
        ms = figures["ms_per_image"]
        return (
            f"vision {ms['source']:.0f} -> {ms['candidate']:.0f} ms/image, "
            f"mask IoU {figures['mask_iou']:.3f}"
        )


def optimize_clipseg(
    md: ModelDir,
    samples: Callable[[], Sample],
    force: bool = False,
    log: Callable[[str], None] = print,
    min_speedup: float | None = None,
) -> Outcome:
    """Build, verify and (when it passes) switch to an int8 CLIPSeg vision graph."""
    return _ClipsegVision(md, log, min_speedup, samples).run(force)


# -- CLIPSeg text at fewer positions ----------------------------------------------
TEXT_SHORT = "text_short"
TEXT_SHORT_RECIPE = "text graph cut from 77 to {n} token positions (causal: exact for eot < {n})"


class _ClipsegShortText(_ClipsegRecord):
    """The text graph cut to fewer positions (shorten.py), gated on cond matching the
    77-position graph's; its record says which files it was verified with (stamps)."""

    key, name, unit, record_key = f"{CLIPSEG.key} text", "CLIPSeg text", "prompt", TEXT_SHORT
    verify_refusals = (ModelError,)  # the short graph does not load or breaks its contract

    def __init__(
        self, md: ModelDir, log: Callable[[str], None], min_speedup: float | None, length: int
    ):
        from wherein.indexer.models.clipseg import TEXT_FILE

        super().__init__(md, log, min_speedup)
        self.length = length
        self.source = md.clipseg_dir / TEXT_FILE
        self.out = md.clipseg_dir / short_name(self.source, length)
        self.base: dict = {}  # the record's first keys, written once the build starts

    def gates(self) -> tuple[Gate, ...]:
        return (self.missing, self.in_use)  # shorten.py needs no optional tool

    def kept(self) -> tuple[dict, Path, str | None] | None:
        kept = super().kept()
        return kept if kept is not None and kept[0].get("length") == self.length else None

    def up_to_date(self, graph: Path, record: dict) -> Outcome:
        from wherein.indexer.models.modeldir import file_stamp

        stamps = {"file": file_stamp(graph), "from": file_stamp(self.source)}
        if record.get("stamps") != stamps:  # same bytes, copied or touched: vouch for them again
            record = {**record, "stamps": stamps}
            self.write(record)
        return super().up_to_date(graph, record)

    def build(self) -> tuple[Path, dict]:
        self.log(
            f"{self.key}: {self.source.name} -> {self.out.name} ({self.length} token positions)"
        )
        self.base = {
            "from": self.source.name,
            "from_sha256": self.source_sha,
            "length": self.length,
            "recipe": TEXT_SHORT_RECIPE.format(n=self.length),
            "created": _now(),
        }
        try:
            return self.out, shorten(self.source, self.out, self.length).to_json()
        except ModelError as exc:  # a graph the rewrite cannot shorten exactly
            raise ModelError(f"{self.source.name}: {exc}") from exc

    def refuse(self, reason: str) -> Outcome:
        """Keep the 77 graph; say why where `models check` finds it."""
        self.base.update(passed=False, figures={"failed": [reason]})
        return self.settle(self.out, self.base)

    def figures(self, out: Path) -> dict:
        from wherein.indexer.models.clipseg import ClipSeg, LeftOut, ShortTextGraph, short_text_spec
        from wherein.indexer.models.litert_graph import LiteRTGraph
        from wherein.indexer.models.optimize.compare import text_gate_prompts, text_short_figures

        d, length = self.md.clipseg_dir, self.length
        src_model = ClipSeg.from_parts(
            LeftOut("vision"), LiteRTGraph(self.source), LeftOut("decoder"), d
        )

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
        self.log(f"  verifying cond on {len(prompts)} prompts of 1-{length - 2} tokens")
        return text_short_figures(src_model, cand_model, prompts)

    def record(self, out: Path, done: dict, figures: dict) -> dict:
        from wherein.indexer.models.modeldir import file_stamp

        self.base.update(
            file=out.name,
            sha256=file_digest(out),
            passed=not figures["failed"],
            verified_on=f"{figures['prompts']} prompts of {self.length - 2} tokens or fewer",
            figures=figures,
            stamps={"file": file_stamp(out), "from": file_stamp(self.source)},
            **done,
        )
        return self.base

    def gain(self, figures: dict) -> str:
        ms = figures["ms_per_prompt"]
        return (
            f"new prompt {ms['source']:.1f} -> {ms['candidate']:.1f} ms "
            f"(up to {self.length - 2} tokens), cond corr {figures['cond_pearson_min']:.6f}"
        )


def optimize_clipseg_text(
    md: ModelDir,
    force: bool = False,
    log: Callable[[str], None] = print,
    min_speedup: float | None = None,
    length: int = DEFAULT_LENGTH,
) -> Outcome:
    """Build, verify and (when cond matches the 77-position graph) use a short text graph."""
    return _ClipsegShortText(md, log, min_speedup, length).run(force)


# -- text tower ----------------------------------------------------------------
class _TextTower(Pipeline):
    """The open_clip text tower converted to LiteRT (`models convert siglip2-text`): the
    converter checks it against open_clip itself and writes its manifest, so passing that
    check is the gate, and the graph is used at once."""

    key = SIGLIP_TEXT.key

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.key = self.md.text_dir.name  # the family's text folder

    def gates(self) -> tuple[Gate, ...]:
        return (self.in_use, self.unavailable, self.missing)

    def in_use(self, force: bool) -> Outcome | None:
        from wherein.indexer.models.text_tower_litert import (
            TEXT_GRAPH,
            TEXT_MANIFEST,
            has_litert_text,
        )

        if force or not has_litert_text(self.md.root):
            return None
        manifest = _read_json(self.md.text_dir / TEXT_MANIFEST) or {}
        fig = manifest.get("parity", {}).get("figures", {}).get("serving_default", {})
        return Outcome(self.key, "up to date", f"{TEXT_GRAPH} is in use", TEXT_GRAPH, fig)

    def unavailable(self, force: bool) -> Outcome | None:
        return (
            None
            if text_converter_available()
            else Outcome(self.key, "unavailable", text_gain_note())
        )

    def missing(self, force: bool) -> Outcome | None:
        if (self.md.text_dir / "open_clip_config.json").is_file():
            return None
        return Outcome(
            self.key,
            "missing",
            f"{self.md.text_dir}: no open_clip model (run `wherein models pull`)",
        )

    def build(self) -> tuple[Path, dict]:
        from wherein.indexer.models.convert.build import convert_text_tower
        from wherein.indexer.models.convert.towers import parse_source
        from wherein.indexer.models.text_tower_litert import TEXT_GRAPH

        self.log(f"{self.key}: converting the open_clip text tower to LiteRT")
        manifest = convert_text_tower(
            parse_source(f"local-dir:{self.md.text_dir}"),
            self.md.root,
            log=lambda s: self.log("  " + s),
            folder=self.md.text_dir.name,
        )
        return self.md.text_dir / TEXT_GRAPH, manifest

    def verify(self, out: Path) -> dict:
        return {}  # done in build: convert_text_tower raises when open_clip disagrees

    def record(self, out: Path, done: dict, figures: dict) -> dict:
        return done  # the manifest the converter wrote

    def settle(self, out: Path, record: dict) -> Outcome:
        fig = record["parity"]["figures"]["serving_default"]
        return Outcome(
            self.key,
            "switched",
            f"correlation {fig['pearson']:.6f} vs open_clip; queries no longer import torch",
            out.name,
            fig,
        )


def optimize_text(md: ModelDir, force: bool = False, log: Callable[[str], None] = print) -> Outcome:
    return _TextTower(md, log, None).run(force)


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
