"""`wherein embed` and `wherein build-index`: the scale-out path (indexer/scale/)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from wherein.search.cli.options import (
    choose_engine,
    decode_options,
    echo_json,
    engine_option,
    frame_options,
    friendly_errors,
    index_option,
    json_option,
    models_option,
    progress,
    quiet_option,
    ray_address_option,
    standin_banner,
)


def register(cli: click.Group) -> None:
    cli.add_command(embed)
    cli.add_command(build_index)


@click.command()
@click.argument("sources", nargs=-1, required=True)
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory for the parquet shards and manifest.json (re-run to resume).",
)
@engine_option("local: one process; ray: Ray Data (local mode, or the cluster at --ray-address).")
@ray_address_option
@click.option(
    "--shard-size",
    type=click.IntRange(1),
    default=None,
    help="Files per shard [10000; fixed by the first run]. A video is one file of up to "
    "--max-frames rows, all held until its shard is written: use fewer for a folder of videos.",
)
@click.option(
    "--actors",
    type=click.IntRange(1),
    default=None,
    help="Ray: towers in the actor pool [CPUs / 2].",
)
@click.option(
    "--actor-cpus", type=click.FloatRange(0.05), default=None, help="Ray: CPUs per actor [1]."
)
@decode_options  # the local engine's (Ray's actors: --actors, --actor-cpus)
@frame_options
@click.option(
    "--regions",
    is_flag=True,
    help="Also embed each large photo as a few overlapping regions, as `index --regions` "
    "does (rows of their own in the shards). Fixed by the first run; an index with regions "
    "takes only shards embedded with it.",
)
@click.option(
    "--for-index",
    "index_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The index these shards will be added to: its large photos' regions are cut as it "
    "cuts them (its tiling; none where it keeps none, unless --regions). Only read. Not "
    "--index: WHEREIN_INDEX never changes what embed writes.",
)
@models_option
@quiet_option
@json_option
@friendly_errors
def embed(
    sources,
    out,
    engine,
    ray_address,
    shard_size,
    actors,
    actor_cpus,
    workers,
    threads,
    no_draft,
    frame_every,
    max_frames,
    regions,
    index_dir,
    models_dir,
    quiet,
    fmt,
):
    """Embed images and videos from SOURCES into parquet shards: folders, .txt/.parquet lists
    of paths or URIs, and uncompressed webdataset .tar shards (photos and animations: videos
    are read from files). A video's or an animation's sampled frames are rows of their own
    (--frame-every, --max-frames as for `index`)."""
    from wherein.search.service import scale as S
    from wherein.search.service.feedback import Feedback

    chosen = choose_engine(engine, ray_address)
    bar = progress(quiet, fmt)
    # Notes go through the bar while one is drawn: not inside it.
    feedback = Feedback(bar.write, bar.update, bar.reset, on_models=standin_banner)
    try:
        stats = S.embed(
            sources,
            out,
            models_dir,
            chosen,
            shard_size=shard_size,
            actors=actors,
            actor_cpus=actor_cpus,
            workers=workers,
            threads=threads,
            draft=not no_draft,
            feedback=feedback,
            frame_every=frame_every,
            max_frames=max_frames,
            regions=regions,
            index_dir=index_dir,
        )
    finally:
        bar.close()
    if fmt == "json":
        echo_json(stats.to_dict())
    else:
        click.echo(
            f"{stats.items} items in {stats.shards} shards: {stats.written} written now, "
            f"{stats.done_before} done before; {stats.embedded} embedded"
            + (f" ({stats.frames} video frames)" if stats.frames else "")
            + (f", {stats.regions} regions of photos" if stats.regions else "")
            + f", {stats.failed} failed ({stats.images_per_second:.1f} images/s)"
        )
        for p in stats.problems:
            click.echo(f"  could not read {p.path}: {p.reason}", err=True)
        if stats.failed:
            click.echo(f"  failed items and reasons: {stats.out}/shards/*.errors.parquet")
        if stats.complete:
            into = "INDEX" if index_dir is None else f"{index_dir} --append"
            click.echo(f"next: wherein build-index {stats.out} --index {into}")
    if stats.interrupted:
        click.echo("interrupted: completed shards are kept; run again to resume", err=True)
        sys.exit(130)


@click.command("build-index")
@click.argument(
    "embed_dirs",
    nargs=-1,
    required=True,
    type=click.Path(file_okay=False, exists=True, path_type=Path),
)
@index_option
@click.option(
    "--max-memory",
    default=None,
    help="Memory budget for the vectors, e.g. 4G, 512M (at least 32K) [no limit].",
)
@click.option(
    "--append",
    is_flag=True,
    help="Add the shards to the index built earlier, keeping its trained IVF quantizer "
    "(retrained only if the measured recall falls below target).",
)
@click.option(
    "--rescore",
    type=click.Choice(["float16", "float32"]),
    default="float16",
    show_default=True,
    help="How a new index keeps the vectors search re-scores its candidates with: float16 "
    "in vectors.f16 (1.5 KB/vector at 768-d), or float32 in the catalog (3-4 KB/vector). "
    "An --append keeps what the index has.",
)
@quiet_option
@json_option
@friendly_errors
def build_index(embed_dirs, index_dir, max_memory, append, rescore, quiet, fmt):
    """Build a wherein index (catalog + FAISS) from the shards `wherein embed` wrote into
    one or more EMBED_DIRS.

    The index goes to --index (or WHEREIN_INDEX, or the per-user dir), which must not
    hold an index yet, unless --append. A path in several shards keeps the newest
    shard's row.
    """
    from wherein.schemas.errors import UsageError
    from wherein.search.service import scale as S
    from wherein.search.service.feedback import Feedback

    try:
        budget = S.memory_budget(max_memory)
    except UsageError as exc:
        raise click.BadParameter(str(exc), param_hint="--max-memory") from None
    say = (lambda m: None) if quiet or fmt == "json" else (lambda m: click.echo(m, err=True))
    stats = S.build_index(embed_dirs, index_dir, budget, append, rescore, Feedback(say=say))
    standin_banner(space=stats.space, index=stats.index)
    if fmt == "json":
        echo_json(stats.to_dict())
    else:
        _echo_build(stats)


def _echo_build(stats) -> None:
    verb = "appended" if stats.appended else "built"
    click.echo(
        f"{stats.index}: {verb} {stats.added} vectors from {stats.shards} shards of "
        f"{len(stats.embed_dirs)} embed dir(s); {stats.vectors} in the index "
        f"[{stats.kind}: {stats.factory}, nprobe {stats.nprobe}] in {stats.seconds:.1f}s; "
        f"{stats.skipped} failed items recorded as skipped"
    )
    if stats.region_items:
        click.echo(f"{stats.region_items} of the vectors are regions of large photos")
    if stats.duplicates:
        replaced = f" ({stats.replaced} replaced rows of the index)" if stats.replaced else ""
        click.echo(
            f"{stats.duplicates} path(s) were in more than one place; the newest shard's row "
            f"was kept{replaced}:"
        )
        for src in stats.duplicate_sources[:3]:
            click.echo(f"  {src['paths']}: kept {src['kept']}, dropped {src['dropped']}")
        if len(stats.duplicate_sources) > 3:
            rest = sum(s["paths"] for s in stats.duplicate_sources[3:])
            click.echo(f"  {rest}: {len(stats.duplicate_sources) - 3} other pairs of sources")
    if stats.reclaimed_bytes:
        from wherein.search.output import human_bytes

        click.echo(f"vectors.f16: gave back {human_bytes(stats.reclaimed_bytes)} of dead rows")
    if stats.recall:
        r = stats.recall
        line = (
            f"quantizer reused: recall@10 {r['recall_at_10']:.3f} for {r['queries']} appended "
            f"vectors (target {r['target']:.2f})"
        )
        after = stats.recall_after_retrain
        if after:
            line += f"; below target: retrained, recall@10 now {after['recall_at_10']:.3f}"
        click.echo(line)
    elif stats.appended and stats.quantizer:
        click.echo(f"quantizer {stats.quantizer}")
