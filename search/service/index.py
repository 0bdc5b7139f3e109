"""`index` (and its --watch loop) and `status` as library calls.

``index`` returns an ``IndexResult`` (``to_dict()``: schemas/index.schema.json);
following a folder afterwards reports each batch that changed something as a
``WatchBatch`` (schemas/watch.schema.json). ``status`` returns a ``StatusResult``
(schemas/status.schema.json, or the damaged-catalog form with only ``check``).
Neither imports torch: both must start fast.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wherein.schemas.errors import WhereinError
from wherein.search.service.feedback import QUIET, Feedback

if TYPE_CHECKING:
    from wherein.indexer.ingest.run import RunStats
    from wherein.indexer.models.modeldir import ModelDir
    from wherein.indexer.store.index_store import CheckReport, IndexStore, Rebuilt
    from wherein.indexer.store.status import IndexStatus


# -- index ----------------------------------------------------------------------------------
@dataclass
class IndexRequest:
    paths: Sequence[Path]
    index_dir: Path | None = None
    models_dir: Path | None = None
    hidden: bool = False  # also hidden files and folders
    retry_skipped: bool = False
    verify: bool = False  # re-read and hash every file
    rebuild_catalog: bool = False  # set a damaged catalog aside and build a new one
    workers: int | None = None  # decode threads
    threads: int | None = None  # model threads
    draft: bool = True  # JPEG draft decoding
    frame_every: float = 2.0  # videos: a frame at least this often, seconds (and at cuts)
    max_frames: int = 600  # videos: at most this many frames each
    regions: bool = False  # cut large photos into regions from now on (the index keeps it)
    wait: bool = False  # wait for another writer instead of failing with IndexLocked


@dataclass
class IndexResult:
    stats: RunStats
    images: int  # what the index holds after the run
    rebuilt: Rebuilt | None = None
    watched: bool | None = None  # after --watch: True when Ctrl-C ended it; None: no watch

    def to_dict(self) -> dict[str, Any]:
        out = self.stats.to_dict(self.images)
        if self.rebuilt is not None:
            out["rebuilt_catalog"] = {
                "set_aside": str(self.rebuilt.aside),
                "rows_salvaged": self.rebuilt.salvaged,
                "rows_reused": self.rebuilt.reused,
                "ids_unreadable": self.rebuilt.unreadable,
                "settings_unknown": self.rebuilt.unknown,
            }
        return out


# The counts a watch batch reports, in the order its line shows them.
WATCH_COUNTS = ("embedded", "moved", "copied", "touched", "deleted", "skipped")


@dataclass
class WatchBatch:
    """One batch of settled changes a watch applied."""

    folders: list[str]
    changed: dict[str, int]  # WATCH_COUNTS -> files
    images: int  # what the index holds after it
    problems: list[Any] = field(default_factory=list)  # WalkProblem: path, reason
    at: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        when = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(self.at))
        # "images": the old word for items, for one release.
        out = {"time": when, "folders": self.folders, **self.changed, "items": self.images}
        return {**out, "images": self.images}


@dataclass
class Watch:
    """Follow the roots after indexing them: what to call, and how long a file must settle."""

    settle: float = 1.0
    on_indexed: Callable[[IndexResult], object] = lambda _r: None  # before following
    on_batch: Callable[[WatchBatch], object] = lambda _b: None
    on_ready: Callable[[], object] = lambda: None  # every change from now on is seen


def index(
    req: IndexRequest,
    feedback: Feedback = QUIET,
    watch: Watch | None = None,
    on_rebuilt: Callable[[Rebuilt], object] | None = None,
) -> IndexResult:
    """Index the images under req.paths (incremental); then, with watch, follow them until
    Ctrl-C (``result.watched``). A run interrupted or with unreadable roots is not followed.

    feedback.say gets the waiting-for-the-lock and re-verification notes; on_rebuilt is
    called as soon as a damaged catalog has been set aside (the run takes a while).
    """
    from wherein.indexer import paths as P
    from wherein.indexer.ingest.run import Indexer
    from wherein.indexer.ingest.videos import FrameSettings
    from wherein.indexer.ingest.walk import NOT_INDEXABLE, ignored_root

    paths = list(req.paths)
    if all(ignored_root(p) for p in paths):  # before an index folder is made for nothing
        raise WhereinError(f"{', '.join(map(str, paths))}: {NOT_INDEXABLE}")
    from wherein.indexer.models.modeldir import ModelDir
    from wherein.indexer.models.registry import load_image_embedder
    from wherein.indexer.store.index_store import IndexStore

    models = ModelDir(P.models_dir(req.models_dir))
    feedback.models(models)
    if models.image_reverify_pending():  # verified on the bundled sample only: now on these photos
        from wherein.indexer.models.optimize.service import reverify_image

        line = reverify_image(models, paths)
        if line:
            feedback.say(line)
    tower = load_image_embedder(models, req.threads)
    with IndexStore.open(
        P.index_dir(req.index_dir),
        write=True,
        create=True,
        wait=req.wait,
        on_wait=feedback.say,
        rebuild=req.rebuild_catalog,
    ) as store:
        rebuilt = store.rebuilt
        if rebuilt is not None and on_rebuilt is not None:
            on_rebuilt(rebuilt)
        frames = FrameSettings(every=req.frame_every, max_frames=req.max_frames)
        indexer = Indexer(
            store,
            tower,
            workers=req.workers,
            draft=req.draft,
            frames=frames,
            regions=req.regions,
        )
        stats = indexer.run(
            paths,
            include_hidden=req.hidden,
            retry_skipped=req.retry_skipped,
            progress=feedback.progress,
            on_total=feedback.on_total,
            verify=req.verify or rebuilt is not None,
        )
        result = IndexResult(stats, store.catalog.count_embedded(), rebuilt)
        if watch is not None and not stats.interrupted and not stats.bad_roots:
            watch.on_indexed(result)
            result.watched = _follow(indexer, [str(p) for p in paths], req.hidden, watch)
    return result


def _follow(indexer, roots: list[str], hidden: bool, watch: Watch) -> bool:
    """Follow roots until Ctrl-C (True) or a stop (False); a WatchBatch per batch that
    changed something or met a problem."""
    from wherein.indexer.ingest.watch import WatchOptions, follow

    def on_batch(folders: list[str], stats) -> None:
        changed = {k: getattr(stats, k) for k in WATCH_COUNTS}
        if not any(changed.values()) and not stats.problems:
            return
        images = indexer.store.catalog.count_embedded()
        watch.on_batch(WatchBatch(folders, changed, images, list(stats.problems)))

    return follow(
        indexer,
        roots,
        WatchOptions(quiet=watch.settle, include_hidden=hidden),
        on_batch=on_batch,
        on_ready=watch.on_ready,
    )


# -- status ---------------------------------------------------------------------------------
@dataclass
class StatusResult:
    index: Path
    status: IndexStatus | None  # None when the catalog is damaged: nothing could be counted
    check: CheckReport | None = None  # with check or repair

    @property
    def ok(self) -> bool:
        return self.check is None or self.check.ok

    @property
    def damaged(self) -> bool:
        return self.status is None

    def to_dict(self) -> dict[str, Any]:
        if self.status is None:
            problems = [] if self.check is None else self.check.problems
            return {"index": str(self.index), "check": {"ok": False, "problems": problems}}
        return self.status.to_dict()


def describe(store: IndexStore, models: ModelDir) -> IndexStatus:
    """What `wherein status --json` and the web app's /api/status say of an open index:
    its counts and the models beside it (schemas/status.schema.json)."""
    from wherein.indexer.store.status import index_status, models_report

    st = index_status(store)
    st.models = models_report(models, st.model_id)
    return st


def status(
    index_dir: Path | None = None,
    models_dir: Path | None = None,
    check: bool = False,
    repair: bool = False,
    feedback: Feedback = QUIET,
) -> StatusResult:
    """Counts, model, vectors and disk use of an index; with check, whether catalog and
    vectors agree (reads only); with repair, as check and saves what is behind (writes)."""
    from wherein.indexer import paths as P
    from wherein.indexer.models.modeldir import ModelDir
    from wherein.indexer.store.index_store import IndexStore

    d = P.index_dir(index_dir)
    check = check or repair
    # --check reports catalog damage as its problem; plain status refuses a damaged catalog
    store = IndexStore.open(
        d, write=repair, load_vectors=check, read_only=not repair, check_rows=not check
    )
    models = ModelDir(P.models_dir(models_dir))
    with store:
        report = store.check(repair=repair) if check else None
        if report is not None and report.damaged:
            return StatusResult(d, None, report)  # counting would read the damaged pages
        st = describe(store, models)
    feedback.models(models, space=st.space, index=d)
    if report is not None:
        st.check = {
            "ok": report.ok,
            "problems": report.problems,
            "repaired": report.repaired,
            "to_repair": report.to_repair,
        }
        if report.notes:
            st.check["notes"] = report.notes
    return StatusResult(d, st, report)
