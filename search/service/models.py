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

from wherein.schemas.models import CLIPSEG, SIGLIP_IMAGE, SIGLIP_TEXT
from wherein.search.service.feedback import QUIET, Feedback

if TYPE_CHECKING:
    from wherein.indexer.models.optimize.selftest import SelfTest
    from wherein.indexer.models.optimize.service import Report

# What optimize can build, in the order it runs them (indexer/models/optimize/service.py
# has the same tuple; it is not imported here: the CLI's import must stay light).
PARTS = (SIGLIP_IMAGE.key, CLIPSEG.key, SIGLIP_TEXT.key)
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
    parts: Sequence[str] = PARTS,
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
        parts or PARTS,
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
) -> PullResult:
    """Download the real models (resumable), then switch to the fastest set-up verified here.

    only: these models only (then no self-test: it needs all of them). The switch of the
    image tower is accepted: pulling asked for the set-up. The verification photos are
    those of the default index (WHEREIN_INDEX or the per-user one), else the bundled
    sample.
    """
    from wherein.indexer import paths as P
    from wherein.indexer.models.optimize.service import setup_models

    root = P.models_dir(models_dir)
    written, report = setup_models(
        root, list(only) or None, P.index_dir(None), optimize, feedback.say
    )
    result = PullResult(root, written)
    if report is not None:
        result.optimized = OptimizeResult(report, None if only else self_test(root))
    elif not only:
        result.self_test = self_test(root)
    return result
