"""`wherein index` and `wherein status`: build the local index and report on it.

Neither imports torch: both must start fast.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from wherein.search.cli.options import (
    decode_options,
    echo_json,
    frame_options,
    friendly_errors,
    index_option,
    json_option,
    models_option,
    progress,
    quiet_option,
    standin_banner,
)


def register(cli: click.Group) -> None:
    cli.add_command(index)
    cli.add_command(status)


# -- index ---------------------------------------------------------------------
@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@index_option
@models_option
@click.option("--hidden", is_flag=True, help="Also index hidden files and folders.")
@click.option("--retry-skipped", is_flag=True, help="Try again files skipped in earlier runs.")
@click.option(
    "--verify",
    is_flag=True,
    help="Re-read and hash every file, not only those whose size or time changed "
    "(changed content is re-embedded; nothing else is).",
)
@click.option(
    "--rebuild-catalog",
    is_flag=True,
    help="Set a damaged catalog.db aside (kept as catalog.db.damaged-TIME) and build a new "
    "one, reusing the vectors of unchanged files it can still read; implies --verify.",
)
@decode_options
@frame_options
@click.option(
    "--regions",
    is_flag=True,
    help="Also embed each large photo as a few overlapping regions (tiles), so that small "
    "things in it are found and a hit says where (its region). The index keeps the setting: "
    "later runs cut new photos too, and photos indexed before are cut without re-embedding.",
)
@quiet_option
@click.option(
    "--wait",
    is_flag=True,
    help="If another wherein process is writing this index, wait for it instead of exiting 75.",
)
@click.option(
    "--watch",
    is_flag=True,
    help="After indexing, keep following PATHS: new, changed, moved and deleted files are "
    "applied as they settle (Ctrl-C stops).",
)
@click.option(
    "--settle",
    type=click.FloatRange(0.05, 3600),
    default=1.0,
    show_default=True,
    metavar="SECONDS",
    help="With --watch: how long a file must stay unchanged before it is indexed.",
)
@json_option
@friendly_errors
def index(
    paths,
    index_dir,
    models_dir,
    hidden,
    retry_skipped,
    verify,
    rebuild_catalog,
    workers,
    threads,
    no_draft,
    frame_every,
    max_frames,
    regions,
    quiet,
    wait,
    watch,
    settle,
    fmt,
):
    """Index the photos and videos under PATHS (incremental: re-run any time).

    \b
      wherein index ~/Photos
      wherein index ~/Photos --watch        (then follow changes until Ctrl-C)
    """
    from wherein.search.service import index as I
    from wherein.search.service.feedback import Feedback

    request = I.IndexRequest(
        paths,
        index_dir,
        models_dir,
        hidden=hidden,
        retry_skipped=retry_skipped,
        verify=verify,
        rebuild_catalog=rebuild_catalog,
        workers=workers,
        threads=threads,
        draft=not no_draft,
        frame_every=frame_every,
        max_frames=max_frames,
        regions=regions,
        wait=wait,
    )
    bar = progress(quiet, fmt)
    following = None
    if watch:
        following = I.Watch(
            settle,
            on_indexed=lambda result: (bar.close(), _report(result, fmt)),
            on_batch=lambda batch: _watch_line(batch, fmt),
            # After the catch-up run: every change from now on is seen.
            on_ready=lambda: click.echo(
                f"watching {', '.join(map(str, paths))} (Ctrl-C to stop)", err=True
            ),
        )
    with bar:
        feedback = Feedback(
            say=lambda line: click.echo(line, err=True),
            progress=bar.update,
            on_total=bar.reset,
            on_models=standin_banner,
        )
        result = I.index(request, feedback, following, None if fmt == "json" else _rebuilt_line)
    if result.watched is None:
        _report(result, fmt)
    elif result.watched:  # Ctrl-C is the way a watch ends: 130, as for any interrupted command
        click.echo("stopped watching: everything committed so far is kept", err=True)
        sys.exit(130)
    else:
        click.echo("stopped watching", err=True)


def _rebuilt_line(rebuilt) -> None:
    click.echo(
        f"catalog set aside as {rebuilt.aside}; {rebuilt.salvaged} rows read back "
        f"({rebuilt.unreadable} lost), {rebuilt.reused} of them kept (file unchanged)",
        err=True,
    )
    if rebuilt.unknown:
        click.echo(f"not known after the rebuild: {_unknown_words(rebuilt.unknown)}", err=True)


def _unknown_words(unknown: list[str]) -> str:
    """What each setting salvage could not tell means for the user, in one line."""
    words = {
        "model_id": "which models built it (every file is embedded again)",
        "regions": "whether it cut photos into regions (run `wherein index --regions` if so)",
    }
    return "; ".join(words[k] for k in unknown)


# How the summary line names each of RunStats.file_counts().
_COUNT_WORDS = {
    "embedded": "embedded",
    "copied": "copied (vector reused)",
    "moved": "moved",
    "touched": "re-stamped (same bytes, new mtime)",
    "unchanged": "unchanged",
    "skipped": "skipped",
    "skipped_earlier": "skipped earlier (not retried)",
    "changed_during_read": "changed while being read (the next run indexes them)",
}


def _summary(stats, total: int) -> str:
    """One line in which every file the run saw is counted once (zero counts left out)."""
    counts = stats.file_counts()
    parts = [f"{n} {_COUNT_WORDS[k]}" for k, n in counts.items() if n or k == "embedded"]
    gone = f"; {stats.deleted} removed (gone from disk)" if stats.deleted else ""
    videos = ""
    if stats.sampled or stats.frames:
        sampled = ", ".join(
            f"{n} {k}{'' if n == 1 else 's'}" for k, n in sorted(stats.sampled.items())
        )
        videos = f"; {sampled or 'nothing'} sampled ({stats.frames} frames embedded)"
    regions = ""
    if stats.regions or stats.tiled:
        cut = f", {stats.tiled} indexed earlier cut now" if stats.tiled else ""
        regions = f"; {stats.regions} regions embedded{cut}"
    # One vocabulary: a file (photo, video) yields items (a photo one, a video its frames,
    # a large photo with --regions its regions too); the index searches items.
    return (
        f"{stats.seen} files: {', '.join(parts)}{gone}{videos}{regions}; {total} items in the "
        f"index ({stats.files_per_second:.1f} files/s)"
    )


def _report(result, fmt: str | None) -> None:
    stats, total = result.stats, result.images
    if fmt == "json":
        echo_json(result.to_dict())
    else:
        if stats.invalidated:
            click.echo(f"model changed: {stats.invalidated} old vectors dropped and re-embedded")
        if stats.seen or not stats.bad_roots:  # nothing read at all: the error says it all
            click.echo(_summary(stats, total))
        for p in stats.problems:
            if not p.root and not p.ignored:  # those are the lines below
                click.echo(f"  could not read {p.path}: {p.reason}", err=True)
        for path, damage in stats.damage:
            click.echo(f"  damaged video {path}: {damage}", err=True)
        if stats.skipped:
            click.echo("  see `wherein status` for skipped files and reasons")
    if stats.interrupted:
        click.echo(
            "interrupted: everything committed so far is kept; run again to resume", err=True
        )
        sys.exit(130)
    for p in stats.problems:  # a shell glob passing a notes file along with the photos
        if p.ignored:
            click.echo(f"  ignored {p.path}: {p.reason}", err=True)
    if stats.bad_roots:
        # After indexing the other roots; a missing root deletes nothing it held (plan.py).
        raise click.ClickException(
            "; ".join(f"cannot read {p.path}: {p.reason}" for p in stats.bad_roots)
        )


def _watch_line(batch, fmt: str | None) -> None:
    """One line (or JSON object) per batch that changed something."""
    import json
    import time

    if fmt == "json":
        click.echo(json.dumps(batch.to_dict()))
    else:
        parts = ", ".join(f"{n} {k}" for k, n in batch.changed.items() if n)
        clock = time.strftime("%H:%M:%S", time.localtime(batch.at))
        click.echo(f"{clock}  {parts or 'no change'}; {batch.images} items in the index")
    for p in batch.problems:
        click.echo(f"  could not read {p.path}: {p.reason}", err=True)


# -- status --------------------------------------------------------------------
@click.command()
@index_option
@models_option
@click.option(
    "--check",
    is_flag=True,
    help="Verify catalog and vectors agree; exit 1 if not. Reads only (also on a full disk "
    "or a read-only folder).",
)
@click.option(
    "--repair",
    is_flag=True,
    help="As --check, and save vectors.faiss where it is behind the catalog (takes the "
    "writer lock).",
)
@json_option
@friendly_errors
def status(index_dir, models_dir, check, repair, fmt):
    """Counts, model, index type and size, skipped files; whether --models matches the index."""
    from wherein.search.service import index as I
    from wherein.search.service.feedback import Feedback

    result = I.status(index_dir, models_dir, check, repair, Feedback(on_models=standin_banner))
    report = result.check
    if result.damaged:  # no counts to show: they would read damaged pages
        _damaged_report(result, fmt)
    info = result.to_dict()
    if fmt == "json":
        echo_json(info)
    else:
        from wherein.search.output import human_bytes

        vi = info["vector_index"] or {}
        click.echo(f"index      {info['index']}")
        click.echo(f"files      {info['files']}")
        click.echo(
            f"items      {info['searchable']}"
            + (f" ({info['pending']} pending)" if info["pending"] else "")
        )
        click.echo(f"model      {info['model_file']} [{info['space']}, dim {info['dim']}]")
        click.echo(f"models     {_models_line(info['models'])}")
        click.echo(
            f"vectors    {vi.get('kind', '-')} ({vi.get('factory', '-')}), {info['vectors_in_faiss']} in FAISS"
            + ("" if info["vectors_current"] else ", behind catalog (synced on next open)")
        )
        click.echo(f"disk       {human_bytes(info['disk_total_bytes'])}")
        if vf := info.get("vector_file"):
            click.echo(
                f"  vectors.f16 {human_bytes(vf['apparent_bytes'])} apparent, "
                f"{human_bytes(vf['allocated_bytes'])} allocated "
                f"(about {human_bytes(vf['dead_bytes'])} in dead rows)"
            )
        if info.get("regions"):
            click.echo(
                f"regions    {info['region_items']} regions of {info['photos_cut']} photos cut "
                f"({info['regions']})"
            )
        for name, n in info["kinds"].items():
            if n["files"]:
                click.echo(f"{name + 's':<10} {n['files']}{_frames_note(n)}")
        for v in info["video_damage"]:
            click.echo(f"  damaged {v['path']}: {v['damage']}")
        click.echo(f"skipped    {info['skipped_count']}")
        for s in info["skipped"]:
            click.echo(f"  {s['path']}: {s['reason']}")
        if report is not None:
            for r in report.repaired:
                click.echo(f"repaired   {r}")
            for r in report.to_repair:
                click.echo(f"to repair  {r}")
            for r in report.notes:
                click.echo(f"note       {r}")
            for p in report.problems:
                click.echo(f"PROBLEM    {p}", err=True)
            click.echo("check      " + ("ok" if report.ok else "FAILED"))
    if report is not None and not report.ok:
        sys.exit(1)


def _frames_note(counts: dict[str, int]) -> str:
    """' (N frames, M not finished)' for a timed kind's counts; '' for another kind's."""
    if "frames" not in counts:
        return ""
    unfinished = f", {counts['incomplete']} not finished" if counts.get("incomplete") else ""
    return f" ({counts['frames']} frames{unfinished})"


def _damaged_report(result, fmt: str) -> None:
    if fmt == "json":
        echo_json(result.to_dict())
    else:
        for p in result.check.problems:
            click.echo(f"PROBLEM    {p}", err=True)
        click.echo("check      FAILED")
    sys.exit(1)


def _models_line(m: dict) -> str:
    kind = " (stand-ins)" if m["standin"] else ""
    if m["model_id"] is None:
        return f"{m['dir']}{kind}: no image tower here"
    if m["matches_index"] is None:
        return f"{m['dir']}{kind}"
    if m["matches_index"]:
        return f"{m['dir']}{kind}: the image tower that built this index"
    return f"{m['dir']}{kind}: another image tower (the next `wherein index` re-embeds every image)"
