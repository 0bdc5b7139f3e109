"""One indexing run: walk, plan against the catalog, then the ingest pipeline, then deletions.

plan.py decides what happens to each file (pure); pipeline.py reads, embeds and
batches (the same loop `wherein embed` runs); commit.py writes each batch as
one SQLite transaction holding the images' rows and vectors together. Rows
whose file is gone are deleted only after every file was committed, so a move
found late in the run still claims its row. FAISS is brought in line at the end
(and on the next open, if the run never reached its end).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from wherein.indexer.imaging import JPEG_DRAFT, Prepared
from wherein.indexer.ingest.commit import Routed, commit_batch, finish
from wherein.indexer.ingest.pipeline import CommitPolicy, Step, default_workers, run_pipeline
from wherein.indexer.ingest.plan import Kind, Known, Plan, SkipEntry, Work, plan, route
from wherein.indexer.ingest.read import Unsettled, load_file
from wherein.indexer.ingest.tile import cut_photos
from wherein.indexer.ingest.videos import FrameChunk, FrameFeed, FrameSettings, VideoJob
from wherein.indexer.ingest.walk import WalkProblem, under_any, walk
from wherein.indexer.kinds.registry import named
from wherein.indexer.models.registry import ImageEmbedder, refuse_other_family
from wherein.indexer.photometa import fill_photos
from wherein.indexer.regions import DEFAULT_TILING, Tiling, tiling_named
from wherein.indexer.store.catalog import Catalog
from wherein.indexer.store.index_store import IndexStore


@dataclass
class RunStats:
    seen: int = 0
    unchanged: int = 0
    embedded: int = 0
    moved: int = 0
    copied: int = 0
    touched: int = 0
    deleted: int = 0
    skipped: int = 0
    skipped_known: int = 0
    unsettled: int = 0  # changed while being read: left for the next run
    photos: int = 0  # images whose EXIF metadata was read (new, changed, or backfilled)
    invalidated: int = 0
    regions: int = 0  # region items embedded this run (photos cut into tiles)
    tiled: int = 0  # photos embedded before regions were on, cut this run
    # Files of each timed kind (a video, an animation) sampled to their end this run
    sampled: dict[str, int] = field(default_factory=dict)
    frames: int = 0  # their frames embedded this run
    damage: list[tuple[str, str]] = field(default_factory=list)  # (path, why the rest was skipped)
    seconds: float = 0.0
    interrupted: bool = False
    vectors_note: str = ""
    problems: list[WalkProblem] = field(default_factory=list)

    @property
    def bad_roots(self) -> list[WalkProblem]:
        """Paths the user named that could not be read at all (the run should fail)."""
        return [p for p in self.problems if p.root]

    def file_counts(self) -> dict[str, int]:
        """What became of each file the run saw, by the names `index --json` uses: every
        file is in exactly one count, so they add up to ``seen`` (less what an
        interrupted run never reached)."""
        return {
            "embedded": self.embedded,
            "copied": self.copied,
            "moved": self.moved,
            "touched": self.touched,
            "unchanged": self.unchanged,
            "skipped": self.skipped,
            "skipped_earlier": self.skipped_known,
            "changed_during_read": self.unsettled,
        }

    @property
    def files_per_second(self) -> float:
        """Files embedded per second (a video is one file, however many frames)."""
        return self.embedded / self.seconds if self.seconds else 0.0

    images_per_second = files_per_second  # the old word, for one release

    def to_dict(self, images: int) -> dict:
        """The run as `wherein index --json` prints it (schemas/index.schema.json);
        images: how many items the index holds after it."""
        return {
            "items": images,
            "images": images,  # deprecated: items
            "seen": self.seen,
            **self.file_counts(),
            "deleted": self.deleted,
            "invalidated": self.invalidated,
            "seconds": round(self.seconds, 2),
            "files_per_second": round(self.files_per_second, 2),
            "images_per_second": round(self.files_per_second, 2),  # deprecated
            "interrupted": self.interrupted,
            "problems": [{"path": p.path, "reason": p.reason} for p in self.problems],
            "bad_roots": [p.path for p in self.bad_roots],
            "photo_metadata_read": self.photos,
            "regions": self.regions,
            "photos_cut": self.tiled,
            "videos": self.sampled.get("video", 0),
            "sampled": dict(self.sampled),
            "frames": self.frames,
            "video_damage": [{"path": p, "damage": d} for p, d in self.damage],
        }

    def count(self, kind: Kind) -> None:
        name = {
            Kind.EMBED: "embedded",
            Kind.COPY: "copied",
            Kind.MOVE: "moved",
            Kind.TOUCH: "touched",
            Kind.SKIP: "skipped",
            Kind.LATER: "unsettled",
            Kind.RESUME: "embedded",
        }[kind]
        setattr(self, name, getattr(self, name) + 1)


def known_rows(cat: Catalog, roots: Sequence[str]) -> dict[str, Known]:
    unfinished = cat.incomplete_videos(roots)
    return {
        path: Known(*row, complete=row[0] not in unfinished)
        for path, row in cat.known_files(roots).items()
    }


def skip_entries(cat: Catalog, roots: Sequence[str]) -> dict[str, SkipEntry]:
    return {s["path"]: SkipEntry(s["size"], s["mtime_ns"]) for s in cat.skipped(roots)}


def donor_outside(cat: Catalog, roots: Sequence[str]) -> Callable[[str], int | None]:
    """sha -> an embedded row outside roots with those bytes (one indexed query per file
    that needs one), so the plan loads only the rows under roots."""

    def find(sha256: str) -> int | None:
        return next((i for i, p in cat.embedded_with_hash(sha256) if not under_any(p, roots)), None)

    return find


class _Run:
    """The state of one run's pipeline: the plan, the moves claimed, the counts."""

    def __init__(
        self, indexer: Indexer, plan: Plan, stats: RunStats, progress, pool: ThreadPoolExecutor
    ) -> None:
        self.indexer, self.plan, self.stats, self.progress = indexer, plan, stats, progress
        self.frames = FrameFeed(pool, indexer.tower.spec.image, indexer.frames)
        self.claimed: set[int] = set()
        # A byte-identical copy has its original's size: only files whose size another
        # file of the run shares can be one, so only their hashes are kept.
        sizes = Counter(w.found.size for w in plan.todo)
        self.shared_sizes = {size for size, n in sizes.items() if n > 1}
        self.embedding: set[str] = set()  # hashes routed to EMBED so far (shared sizes only)
        # Videos a stopped run left unfinished whose file moved: finished where they land.
        self.unfinished = {row.id for row in plan.gone.values() if not row.complete}

    def load(self, work: Work) -> Prepared | Unsettled:
        i = self.indexer
        return load_file(work.found, i.tower.spec.image, i.draft, i.tiling)

    def route(self, work: Work, read: Prepared | Unsettled) -> Step[Routed | FrameChunk]:
        d = route(work, read, self.plan, self.claimed, self.embedding)
        if d.kind is Kind.MOVE:
            self.claimed.add(d.named_row)
        elif (
            d.kind is Kind.EMBED
            and isinstance(read, Prepared)
            and read.sha256
            and read.video is None  # a copy of a video embedded this run is embedded again
            and work.found.size in self.shared_sizes
        ):
            self.embedding.add(read.sha256)
        job = self._video_job(work, read, d)
        # route() embeds only a file it read (never an Unsettled one).
        pixels = (
            read.tower_pixels() if d.kind is Kind.EMBED and isinstance(read, Prepared) else None
        )
        return Step(Routed(work, read, d, job), pixels)

    def _video_job(self, work: Work, read: Prepared | Unsettled, d) -> VideoJob | None:
        """A video to sample: new or changed (EMBED), or resumed (its stored frames kept: its
        own row, or an unfinished one that moved here)."""
        if not isinstance(read, Prepared) or read.video is None:
            return None
        resume = d.kind is Kind.RESUME or (d.kind is Kind.MOVE and d.row in self.unfinished)
        if d.kind is not Kind.EMBED and not resume:
            return None
        job = VideoJob(work.found.path, read.size, read.mtime_ns, named(read.kind))
        if resume:
            job.file_id = d.named_row
            job.have = self.indexer.store.catalog.frame_times(d.named_row)
        self.frames.start(job)
        return job

    def commit(self, steps: list[Step[Routed | FrameChunk]]) -> None:
        self.stats.photos += commit_batch(
            self.indexer.store.catalog, steps, self.indexer.tower.model_id
        )
        files = 0
        for s in steps:
            if isinstance(s.item, FrameChunk):
                self._count_frames(s.item)
            else:
                self.stats.count(s.item.decision.kind)
                if s.item.decision.kind is Kind.EMBED and isinstance(s.item.read, Prepared):
                    self.stats.regions += s.item.read.regions or 0
                files += 1
        if self.progress and files:
            self.progress(files)

    def _count_frames(self, chunk: FrameChunk) -> None:
        st = self.stats
        st.frames += len(chunk.times)
        chunk.job.embedded += len(chunk.times)
        if chunk.error is not None:  # counted as embedded when its row went in
            st.embedded, st.skipped = st.embedded - 1, st.skipped + 1
        elif chunk.last:
            kind = chunk.job.kind.name
            st.sampled[kind] = st.sampled.get(kind, 0) + 1
            if chunk.damage:
                st.damage.append((chunk.job.path, chunk.damage))


class Indexer:
    def __init__(
        self,
        store: IndexStore,
        tower: ImageEmbedder,
        workers: int | None = None,
        commit_every: int = 32,
        commit_seconds: float = 10.0,
        commit_model_seconds: float = 2.0,
        draft: bool = JPEG_DRAFT,
        frames: FrameSettings = FrameSettings(),  # noqa: B008 - frozen, shared safely
        regions: bool = False,
    ) -> None:
        """regions: cut large photos into regions from now on (the index keeps the setting:
        later runs of any command that writes it cut them too)."""
        self.store = store
        self.tower = tower
        self.workers = workers or default_workers()
        self.policy = CommitPolicy(
            every=commit_every, model_seconds=commit_model_seconds, seconds=commit_seconds
        )
        self.draft = draft
        self.frames = frames
        self.regions = regions
        self.tiling: Tiling | None = None  # set by run(): the index's setting

    def _prepare_regions(self) -> None:
        """The index's regions setting: turned on by this indexer's ``regions``, kept by the
        index for every later run."""
        cat = self.store.catalog
        if self.regions and cat.get_meta("regions") is None:
            with cat.transaction():
                cat.set_meta("regions", DEFAULT_TILING.name)
        name = cat.get_meta("regions")
        # The tiling the index names, not today's default: its photos are all cut one way.
        self.tiling = tiling_named(name) if name is not None else None

    def _prepare_model(self, stats: RunStats) -> None:
        cat = self.store.catalog
        old = cat.get_meta("model_id")
        family = self.tower.spec.key
        refuse_other_family(cat.get_meta("family"), family, self.store.dir)
        if old == self.tower.model_id:
            # An index from before families were recorded, or a catalog rebuilt from one whose
            # settings were lost (salvage.settings_back): these models' are its settings.
            ours = {"family": family, "space": self.tower.space, "model_file": self.tower.path.name}
            lost = {k: v for k, v in ours.items() if cat.get_meta(k) is None}
            if lost:
                with cat.transaction():
                    for key, value in lost.items():
                        cat.set_meta(key, value)
            return
        with cat.transaction():
            if old is not None:
                stats.invalidated = cat.clear_embeddings()
            cat.set_meta("family", family)
            cat.set_meta("model_id", self.tower.model_id)
            cat.set_meta("space", self.tower.space)
            cat.set_meta("dim", self.tower.dim)
            cat.set_meta("model_file", self.tower.path.name)
            cat.bump_generation()

    def run(
        self,
        roots: Sequence[str | Path],
        include_hidden: bool = False,
        progress: Callable[[int], object] | None = None,
        on_total: Callable[[int], None] | None = None,
        retry_skipped: bool = False,
        persist_vectors: bool = True,
        verify: bool = False,
    ) -> RunStats:
        """One incremental run over roots. persist_vectors=False leaves the FAISS file for
        later (a watch saves it now and then): the catalog is the truth, and readers and
        the next open catch up from it by id difference. verify: re-hash every file, not
        only those whose stat changed (a file rewritten with its old size and mtime)."""
        stats = RunStats()
        t0 = time.perf_counter()
        cat = self.store.catalog
        self._prepare_model(stats)
        self._prepare_regions()
        abs_roots = [os.path.abspath(os.path.expanduser(str(r))) for r in roots]
        found = list(walk(abs_roots, include_hidden, stats.problems))
        stats.seen = len(found)
        p = plan(
            found,
            known_rows(cat, abs_roots),
            skip_entries(cat, abs_roots),
            abs_roots,
            unreadable=[pr.path for pr in stats.problems],
            retry_skipped=retry_skipped,
            outside_donor=donor_outside(cat, abs_roots),
            verify=verify,
        )
        stats.unchanged, stats.skipped_known = len(p.unchanged), len(p.skipped_known)
        if on_total:
            on_total(len(p.todo))
        pool = ThreadPoolExecutor(self.workers, thread_name_prefix="decode")
        r = _Run(self, p, stats, progress, pool)
        try:
            run_pipeline(
                p.todo,
                r.load,
                r.route,
                r.commit,
                self.tower,
                self.workers,
                self.policy,
                pool=pool,
                side=r.frames,
            )
            stats.deleted = finish(cat, p, r.claimed)
            if self.tiling is not None:  # the photos indexed before regions were on
                stats.tiled = self._cut(abs_roots, pool, stats)
            # What this run read went in with its rows; this reads the EXIF of rows under
            # the roots indexed before the photos table existed (headers only, no embedding).
            stats.photos += fill_photos(cat, self.workers, under=abs_roots)
        except KeyboardInterrupt:
            stats.interrupted = True
        finally:
            r.frames.close()
            pool.shutdown(wait=True, cancel_futures=True)
            stats.seconds = time.perf_counter() - t0
            stats.vectors_note = self.store.ensure_vectors(persist=persist_vectors)
        return stats

    def _cut(self, roots: list[str], pool: ThreadPoolExecutor, stats: RunStats) -> int:
        """Cut the photos under roots that were indexed before regions were on."""
        assert self.tiling is not None
        before = self.store.catalog.count_tiled()[1]
        n = cut_photos(
            self.store.catalog,
            self.tower,
            self.tower.spec.image,
            self.tiling,
            self.workers,
            roots,
            self.draft,
            self.policy,
            pool,
        )
        stats.regions += self.store.catalog.count_tiled()[1] - before
        return n
