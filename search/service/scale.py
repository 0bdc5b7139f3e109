"""`embed` and `build-index` as library calls: the scale-out path of indexer/scale/.

``embed`` returns the run's ``EmbedStats`` (``to_dict()``: schemas/embed.schema.json),
``build_index`` its ``BuildStats`` (schemas/build-index.schema.json). Both need the
``wherein[scale]`` extra (pyarrow; Ray for the ray engine): a missing one is the one
MissingExtra error.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from wherein.schemas.errors import UsageError
from wherein.search.service.engine import Engine
from wherein.search.service.errors import needs_extra
from wherein.search.service.feedback import QUIET, Feedback

if TYPE_CHECKING:
    from wherein.indexer.scale.build_index import BuildStats
    from wherein.indexer.scale.embed import EmbedStats


def embed(
    sources: Sequence[str],
    out: Path,
    models_dir: Path | None = None,
    engine: Engine | None = None,
    shard_size: int | None = None,
    actors: int | None = None,
    actor_cpus: float | None = None,
    workers: int | None = None,
    threads: int | None = None,
    draft: bool = True,
    feedback: Feedback = QUIET,
    frame_every: float = 2.0,
    max_frames: int = 600,
    regions: bool = False,
    index_dir: Path | None = None,
) -> EmbedStats:
    """Embed the images and videos SOURCES list into parquet shards in out (a re-run
    resumes). frame_every/max_frames: how videos are sampled, as IndexRequest's; regions:
    also cut large photos into regions, as IndexRequest's (fixed by the first run).
    index_dir: the index the shards are for: its photos' regions are cut the same way
    (as `wherein index` into it would), read before anything is written.

    actors/actor_cpus apply on Ray, workers/threads to the local engine. feedback.say gets
    which Ray cluster and token were used; an interrupted run (stats.interrupted) keeps
    its completed shards.
    """
    from wherein.indexer import paths as P
    from wherein.indexer.ingest.videos import FrameSettings
    from wherein.indexer.models.modeldir import ModelDir
    from wherein.indexer.scale.embed import embed as run_embed
    from wherein.indexer.scale.embed import index_tiling

    # The index's setting first: a folder that is no index is refused before --out is made.
    tiling = None if index_dir is None else index_tiling(Path(index_dir).expanduser())
    frames = FrameSettings(every=frame_every, max_frames=max_frames)
    engine = engine or Engine()
    root = P.models_dir(models_dir)
    feedback.models(ModelDir(root))
    engine.check()  # a wrong address: one line now, before the embed folder is made

    def run(name: str) -> EmbedStats:
        return run_embed(
            list(sources),
            out,
            root,
            engine=name,
            ray_address=engine.address,
            shard_size=shard_size,
            workers=workers,
            actors=actors,
            actor_cpus=actor_cpus,
            threads=threads,
            draft=draft,
            progress=feedback.progress,
            on_total=feedback.on_total,
            say=feedback.say,
            frames=frames,
            regions=regions,
            tiling=tiling,
        )

    return engine.run(local=lambda: run("local"), ray=lambda: run("ray"))


def memory_budget(text: str | None) -> int | None:
    """--max-memory's '4G', '512M' as bytes (None: no limit); a UsageError when it is no size
    or below the smallest budget a build can keep."""
    from wherein.indexer.scale.build_index import MIN_MEMORY_BUDGET, parse_bytes

    if text is None:
        return None
    try:
        return parse_bytes(text, MIN_MEMORY_BUDGET)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def build_index(
    embed_dirs: Sequence[Path],
    index_dir: Path | None = None,
    max_memory: str | int | None = None,
    append: bool = False,
    rescore: str = "float16",
    feedback: Feedback = QUIET,
) -> BuildStats:
    """Build (or --append to) the index at index_dir from the shards of embed_dirs.

    max_memory: the vectors' memory budget, bytes or a size such as '4G' [no limit].
    feedback.say gets the build's progress lines.
    """
    from wherein.indexer import paths as P
    from wherein.indexer.scale.build_index import build_index as run_build

    budget = memory_budget(max_memory) if isinstance(max_memory, str) else max_memory
    with needs_extra():
        return run_build(
            list(embed_dirs),
            P.index_dir(index_dir),
            budget,
            progress=feedback.say,
            append=append,
            rescore=rescore,
        )
