"""`models optimize` and `models pull` as library calls, and the semantic self-test both
end with (`models check --self-test` runs it too).

``optimize`` builds, verifies and (where they pass their gates) switches to the faster
graphs, then runs the self-test; ``pull`` downloads the models and, unless asked not to,
optimizes them the same way. Both return typed results whose ``to_dict()`` follows
schemas/models.schema.json (``$defs/optimize``, ``$defs/pull``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wherein.schemas.errors import ModelError
from wherein.schemas.models import SIGLIP_TEXT
from wherein.search.service.feedback import QUIET, Feedback

if TYPE_CHECKING:
    from wherein.indexer.models.optimize.selftest import SelfTest
    from wherein.indexer.models.optimize.service import Report


# -- what the registered families offer (the CLI's choices) -------------------------------------
def _families() -> list[Any]:
    """Every registered family; a plugin that fails to load is left out here (the CLI's
    choices are made at import) and named when a command asks for it."""
    from wherein.indexer.models.registry import families
    from wherein.schemas.errors import ModelError

    try:
        return families()
    except ModelError:
        return families(plugins=False)


def pullable() -> list[str]:
    """The families `models pull --model` downloads."""
    return [f.key for f in _families() if f.pull is not None]


def convertible() -> list[str]:
    """The families `models convert FAMILY --random-weights` builds whole."""
    return [f.key for f in _families() if f.convert_random is not None]


def model_folders() -> list[str]:
    """Every folder a pull writes (`models pull --only`): each family's, then CLIPSeg's."""
    from wherein.schemas.models import CLIPSEG

    return list(dict.fromkeys([m.key for f in _families() for m in f.layout] + [CLIPSEG.key]))


def optimize_parts() -> list[str]:
    """What `models optimize` can build, over all families, in the order it runs them."""
    return list(dict.fromkeys(p for f in _families() for p in f.parts()))


# confirm(estimate) -> switch the image tower now (the next index re-embeds)? None: nobody
# can be asked, and a switch that re-embeds an index is not made.
Confirm = Callable[[dict], bool] | None


def self_test(models_dir: Path) -> SelfTest:
    """Whether the models see what is drawn in generated photos (captions, masks)."""
    from wherein.indexer.models.modeldir import ModelDir
    from wherein.indexer.models.optimize.selftest import run_self_test

    return run_self_test(ModelDir(Path(models_dir)))


@dataclass
class OptimizeResult:
    report: Report  # what each graph's optimization did (indexer/models/optimize/service.py)
    self_test: SelfTest | None = None  # None: not run

    @property
    def root(self) -> Path:
        return self.report.root

    @property
    def ok(self) -> bool:
        """False only when the self-test ran and failed (a rejected graph is not a failure:
        the graph in use stays)."""
        return self.self_test is None or self.self_test.ok

    def to_dict(self) -> dict[str, Any]:
        out = self.report.to_json()
        if self.self_test is not None:
            out["self_test"] = self.self_test.to_json()
        return out


def optimize(
    models_dir: Path | None = None,
    index_dir: Path | None = None,
    parts: Sequence[str] = (),
    confirm: Confirm = None,
    force: bool = False,
    count: int = 32,
    min_speedup: float | None = None,
    run_self_test: bool = True,
    feedback: Feedback = QUIET,
) -> OptimizeResult:
    """Faster graphs of the models in models_dir, each verified on the photos of index_dir
    (the bundled sample when it is empty) before use; then the self-test.

    confirm: who says yes to an image-tower switch that re-embeds the index (None: nobody,
    the switch is not made). feedback.say gets the steps as they run.
    """
    from wherein.indexer import paths as P
    from wherein.indexer.models.modeldir import ModelDir
    from wherein.indexer.models.optimize.service import optimize_models

    md = ModelDir(P.models_dir(models_dir))
    report = optimize_models(
        md,
        P.index_dir(index_dir),
        parts or None,
        confirm,
        force,
        count,
        min_speedup,
        feedback.say,
    )
    return OptimizeResult(report, self_test(report.root) if run_self_test else None)


@dataclass
class PullResult:
    root: Path
    pulled: list[Path] = field(default_factory=list)  # the model folders written
    optimized: OptimizeResult | None = None  # None: pulled only (optimize=False)
    self_test: SelfTest | None = None  # after a pull without optimize (optimized has its own)

    @property
    def ok(self) -> bool:
        if self.optimized is not None:
            return self.optimized.ok
        return self.self_test is None or self.self_test.ok

    def to_dict(self) -> dict[str, Any]:
        return {
            "models": str(self.root),
            "pulled": [str(p) for p in self.pulled],
            "optimized": None if self.optimized is None else self.optimized.to_dict(),
            "self_test": None if self.self_test is None else self.self_test.to_json(),
        }


def pull(
    models_dir: Path | None = None,
    only: Sequence[str] = (),
    optimize: bool = True,
    feedback: Feedback = QUIET,
    model: str | None = None,
) -> PullResult:
    """Download the real models (resumable), then switch to the fastest set-up verified here.

    model: the family to pull (a registry key; default: the one models_dir holds, else
    SigLIP 2 B/16). only: these folders only (then no self-test: it needs all of them). The
    switch of the image tower is accepted: pulling asked for the set-up. The verification
    photos are those of the default index (WHEREIN_INDEX or the per-user one), else the
    bundled sample.
    """
    from wherein.indexer import paths as P
    from wherein.indexer.models.optimize.service import setup_models
    from wherein.indexer.models.registry import entry

    root = P.models_dir(models_dir)
    family = entry(model) if model else None
    written, report = setup_models(
        root, list(only) or None, P.index_dir(None), optimize, feedback.say, family
    )
    result = PullResult(root, written)
    testable = not only and (family is None or family.self_test)
    if report is not None:
        result.optimized = OptimizeResult(report, self_test(root) if testable else None)
    elif testable:
        result.self_test = self_test(root)
    return result


# -- check ----------------------------------------------------------------------------------
@dataclass
class CheckResult:
    root: Path
    rows: list[dict]  # per file: model, file, status, found, expected
    contracts_ok: bool
    self_test: SelfTest | None = None  # with self_test, when every contract held

    @property
    def ok(self) -> bool:
        return self.contracts_ok and (self.self_test is None or self.self_test.ok)

    def problem(self) -> str | None:
        """The first file that breaks its contract, as one line; None when all hold."""
        from wherein.indexer.models.optimize.report import NOT_USED

        if self.contracts_ok:
            return None
        bad = next(r for r in self.rows if r["status"] not in ("ok", NOT_USED))
        return f"{bad['file']}: {bad['found']} (expected {bad['expected']})"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"models": str(self.root), "ok": self.ok, "checks": self.rows}
        if self.self_test is not None:
            out["self_test"] = self.self_test.to_json()
        return out


def check(
    models_dir: Path | None = None, run_self_test: bool = False, feedback: Feedback = QUIET
) -> CheckResult:
    """Load each model and verify its input/output contract; then (run_self_test, and every
    contract held) whether they see what is drawn in generated photos."""
    from wherein.indexer import paths as P
    from wherein.indexer.models.check import check_models
    from wherein.indexer.models.modeldir import ModelDir
    from wherein.indexer.models.registry import entry_for

    root = P.models_dir(models_dir)
    if not root.is_dir() or not any(root.iterdir()):
        # Every check would fail the same way: say it once.
        raise ModelError(
            f"{root}: no models here (run `wherein models pull`, or point --models / "
            "WHEREIN_MODELS at a models directory)"
        )
    feedback.models(ModelDir(root))
    rows, ok = check_models(root)
    result = CheckResult(root, rows, ok)
    # A family whose contract held is registered: its entry says whether the test applies.
    if ok and run_self_test and entry_for(ModelDir(root)).self_test:
        result.self_test = self_test(root)
    return result


# -- convert --------------------------------------------------------------------------------
IMAGE_TOWER, TEXT_TOWER = "siglip2", "siglip2-text"


@dataclass
class ConvertResult:
    tower: str
    manifest: dict  # what the converted graph's manifest.json says (the graph, its checks)

    def to_dict(self) -> dict[str, Any]:
        return self.manifest


def convert(
    tower: str,
    models_dir: Path | None = None,
    batches: Sequence[int] = (1, 8),
    precision: str = "fp32",
    source: str | None = None,
    random_weights: bool = False,
    config: str = "full",
    seed: int = 0,
    feedback: Feedback = QUIET,
) -> ConvertResult:
    """Convert a SigLIP 2 tower to LiteRT in models_dir and prove it equal to PyTorch.

    The text tower converts from real weights only; its source defaults to the siglip2-text
    folder of models_dir (the graph must sit beside its tokenizer files). At int8 (dynamic
    range, as the image tower's) its packed weights take about a quarter of fp32's memory
    in `wherein serve` (bench/results/serve.md); the query vectors differ slightly, within
    the parity gate. A registered family that converts whole (tower: its key,
    convertible()) builds the directory `models pull --model KEY` makes, both towers, with
    random weights.
    """
    from wherein.indexer import paths as P
    from wherein.indexer.models.convert import build as C
    from wherein.indexer.models.convert.towers import parse_source
    from wherein.schemas.errors import UsageError

    root = P.models_dir(models_dir)
    if tower not in (IMAGE_TOWER, TEXT_TOWER):
        return _convert_family(tower, root, random_weights, config, seed, feedback)
    if tower == IMAGE_TOWER:
        src = parse_source(source, random_weights, config, seed)
        manifest = C.convert_image_tower(src, root, list(batches), precision, log=feedback.say)
        return ConvertResult(tower, manifest)
    if random_weights:
        raise UsageError("the text tower converts from real weights (see --source)")
    if source is None:
        source = f"local-dir:{root / SIGLIP_TEXT.key}"
    manifest = C.convert_text_tower(parse_source(source), root, precision, log=feedback.say)
    return ConvertResult(tower, manifest)


def _convert_family(
    key: str, root: Path, random_weights: bool, config: str, seed: int, feedback: Feedback
) -> ConvertResult:
    from wherein.indexer.models.registry import entry
    from wherein.schemas.errors import UsageError

    family = entry(key)
    if family.convert_random is None:
        raise UsageError(f"the {key} models do not convert here")
    if not random_weights:
        raise UsageError(
            f"{key} converts with --random-weights (tests, benches); its trained weights come "
            f"with `wherein models pull --model {key}`"
        )
    return ConvertResult(key, family.convert_random(root, config, seed, feedback.say))


# -- verify ---------------------------------------------------------------------------------
@dataclass
class VerifyResult:
    root: Path
    rows: list[dict]  # per graph and signature: the figures and a status
    ok: bool
    thresholds: str  # the pass marks, in words

    def to_dict(self) -> dict[str, Any]:
        return {
            "models": str(self.root),
            "ok": self.ok,
            "thresholds": self.thresholds,
            "graphs": self.rows,
        }


def verify_columns() -> list[str]:
    """The columns of a VerifyResult's rows, in the order a table shows them."""
    from wherein.indexer.models.convert.verify import COLUMNS

    return list(COLUMNS)


def verify(
    models_dir: Path | None = None,
    images: Path | None = None,
    count: int = 32,
    feedback: Feedback = QUIET,
) -> VerifyResult:
    """Run each LiteRT graph beside its PyTorch reference on count inputs (images: these
    instead of random ones); ok when every graph passes its marks."""
    from wherein.indexer import paths as P
    from wherein.indexer.models.convert.verify import thresholds_text, verify_models

    root = P.models_dir(models_dir)
    rows, ok = verify_models(root, images, count, log=feedback.say)
    return VerifyResult(root, rows, ok, thresholds_text())


# -- the demo's models ----------------------------------------------------------------------
def real_models(models_dir: Path | None) -> tuple[Path, bool]:
    """(the models directory, whether it holds real models: not absent, not stand-ins)."""
    from wherein.indexer import paths as P
    from wherein.indexer.models.modeldir import ModelDir

    models = ModelDir(P.models_dir(models_dir))
    return models.root, models.image_dir.is_dir() and not models.is_standin


def build_standins(folder: Path) -> Path:
    """Tiny stand-in models in folder (the same I/O contracts; they only know colours)."""
    from wherein.indexer.models.standins import build_standin_models

    return build_standin_models(folder)


def built_standins(folder: Path) -> bool:
    """Whether folder holds the stand-ins a run built before: their marker and every graph."""
    from wherein.indexer.models.modeldir import ModelDir
    from wherein.indexer.models.standins import GRAPH_FILES

    return ModelDir(folder).is_standin and all(
        (folder / key / name).is_file() for name, key in GRAPH_FILES.items()
    )


def sample_photos(folder: Path) -> list[Path]:
    """Write the bundled sample photos (and two broken files indexing must skip) into folder."""
    from wherein.indexer.samples import write_sample

    return write_sample(folder)
