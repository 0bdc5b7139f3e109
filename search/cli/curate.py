"""`wherein select | label | dupes | unique`: dataset curation commands (library: wherein.search.curate)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path

import click

from wherein.search.cli.options import (
    check_export_options,
    choose_engine,
    engine_option,
    export_options,
    filter_options,
    format_options,
    friendly_errors,
    gathers_selection,
    index_option,
    kind_options,
    mask_out_option,
    models_option,
    progress,
    raw_option,
    ray_address_option,
    standin_banner,
    top_option,
)
from wherein.search.service.export import export_to
from wherein.search.service.feedback import Feedback

# The CLI's feedback: the stand-in banner and notes on stderr (no progress bar).
NOTES = Feedback(say=lambda m: click.echo(m, err=True), on_models=standin_banner)


def register(cli: click.Group) -> None:
    for command in (select, label, dupes, unique):
        cli.add_command(command)


def output_options(masks: bool, rows: str = "rows") -> Callable[[Callable], Callable]:
    """The same output switches as `wherein search`, plus --export/--format, --index, --models.

    masks: whether the command has --mask (label exports need it).
    """

    def decorate(f: Callable) -> Callable:
        options: list[Callable[[Callable], Callable]] = [
            format_options(),
            export_options(masks, rows),
            index_option,
            models_option,
        ]
        for opt in reversed(options):
            f = opt(f)

        @functools.wraps(f)
        @friendly_errors
        def checked(*args, **kwargs):
            # A bad export path or a missing pyarrow should fail now, not after the work.
            check_export_options(
                kwargs.get("export_path"),
                kwargs.get("export_fmt"),
                kwargs.get("mask", False) if masks else None,
                kwargs.get("index_dir"),
                overwrite=kwargs.get("overwrite", False),
            )
            return f(*args, **kwargs)

        return checked

    return decorate


def _show(hits, fmt: str, export, table: Callable[[list], str]) -> None:
    """Say what was exported (when asked), then print the hits in the chosen format.

    export: the service's Exported record, or None. An export to - (standard output) is
    what stdout holds: the rows are not printed as well.
    """
    from wherein.search import output

    if export is not None:
        where = "standard output" if export.to_stdout else export.path
        if export.kind == "labels":
            click.echo(f"exported the masks of {export.masked} image(s) to {where}", err=True)
        else:
            click.echo(f"exported {export.rows} row(s) to {where}", err=True)
        if export.to_stdout:
            return
    if fmt == "table":
        text = table(hits)
        sys.stdout.write(text + ("\n" if text else ""))
    else:
        sys.stdout.write(output.render(hits, fmt))


def _pixels(h) -> str:
    return f"{h.width}x{h.height}" if h.width and h.height else ""


def _path(h) -> str:
    return h.path + ("" if h.exists else "  [missing]")


# -- select ---------------------------------------------------------------------------------
@click.command()
@click.argument("query", nargs=-1, required=True)
@click.option(
    "--min-probability",
    "-p",
    required=True,
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    help="Every image whose calibrated probability is at least P.",
)
@top_option(None, "At most N images (the most likely) [default: all of them].", "--max")
@filter_options
@kind_options
@raw_option
@click.option(
    "--copy-to",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Copy the selected files into DIR (never overwrites: any existing target stops everything).",
)
@click.option(
    "--link-to",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Symlink the selected files into DIR (same rules as --copy-to).",
)
@click.option(
    "--flat",
    is_flag=True,
    help="Put every file directly in DIR (name clashes get -ID appended) instead of keeping "
    "their folders below the common root.",
)
@click.option(
    "--mask", is_flag=True, help="Also segment where the match is in each image (CLIPSeg)."
)
@mask_out_option
@click.option(
    "--category-from-labels",
    is_flag=True,
    help="In a mask export, name each image's mask by its most likely label from "
    "`wherein label` instead of by the query.",
)
@engine_option(
    "Where --mask runs. local: this process, mask PNGs and overlays in --out; ray: Ray actors "
    "(local mode, or the cluster at --ray-address), every mask straight into the --export "
    "labels, in shards a re-run resumes."
)
@ray_address_option
@output_options(masks=True)
@friendly_errors
@gathers_selection
def select(
    query,
    selection,
    raw,
    copy_to,
    link_to,
    flat,
    mask,
    out_dir,
    category_from_labels,
    engine,
    ray_address,
    fmt,
    export_path,
    export_fmt,
    overwrite,
    index_dir,
    models_dir,
):
    """Every image matching QUERY above a calibrated probability; export, copy or link them.

    \b
      wherein select red car -p 0.5 --export cars.csv
      wherein select "a cat" -p 0.3 -k 500 --copy-to ~/datasets/cats
      wherein select dog -p 0.5 --link-to ./dogs --flat --nl
      wherein select "a red car" -p 0.5 --mask --out masks/ --export cars.parquet
      wherein select dog -p 0.5 --mask --export dogs.coco.json
      wherein select dog -p 0.5 --mask --engine ray --export dogs.coco.json
    """
    from wherein.search import output
    from wherein.search.service import curate as C

    chosen = _check_engine(engine, ray_address, mask, out_dir, export_path, export_fmt)
    request = C.SelectRequest(
        query,
        **selection,
        raw=raw,
        copy_to=copy_to,
        link_to=link_to,
        flat=flat,
        mask=mask,
        out_dir=out_dir,
        category_from_labels=category_from_labels,
        engine=chosen,
        export_path=export_path,
        export_fmt=export_fmt,
        overwrite=overwrite,
        index_dir=index_dir,
        models_dir=models_dir,
    )
    bar = progress(False, fmt)
    feedback = Feedback(bar.write, bar.update, bar.reset, on_models=standin_banner)
    try:
        result = C.select(request, feedback)
    finally:
        bar.close()
    shown = output.photo_columns(request)
    step = result.mask
    if step is not None and step.ray is not None:
        _ray_lines(step.ray, export_path)
    ray_export = step is not None and step.ray is not None
    _show(
        result.hits,
        fmt,
        None if ray_export else result.export,
        lambda hs: output.to_table(hs, shown, request.near),
    )
    if result.placed:
        placed = result.placed
        verb = "linked" if placed.mode == "link" else "copied"
        click.echo(f"{verb} {placed.files} file(s) into {placed.dest}", err=True)
    if not result.hits:
        click.echo(f"no file reaches probability {request.min_probability}", err=True)


def _check_engine(engine, ray_address, mask, out_dir, export_path, export_fmt):
    """--engine ray masks into a label export only (usage errors); the chosen Engine."""
    from wherein.search.export.formats import LABEL_FORMATS, export_format, listing

    chosen = choose_engine(engine, ray_address)
    if not chosen.on_ray:
        return chosen
    if not mask:
        raise click.UsageError("--engine ray runs the mask step: add --mask")
    if out_dir:
        raise click.UsageError(
            "--out applies to --engine local; --engine ray writes the masks into --export only"
        )
    if not export_path or export_format(export_path, export_fmt).kind != "labels":
        raise click.UsageError(
            f"--engine ray writes the masks as labels: add --export {listing(LABEL_FORMATS)}"
        )
    if str(export_path) == "-":
        raise click.UsageError(
            "--engine ray keeps its shards beside the export: --export a file or folder, not -"
        )
    return chosen


def _ray_lines(stats, export_path) -> None:
    """What the Ray mask step did; an interrupted one exits 130 (its shards are kept)."""
    kept = stats.done_before + stats.written
    if stats.interrupted:
        click.echo(
            f"interrupted: {kept} of {stats.shards} shard(s) kept in {stats.work}; "
            "run the same command again to resume",
            err=True,
        )
        sys.exit(130)
    before = f", {stats.done_before} from an earlier run" if stats.done_before else ""
    failed = f"; {stats.failed} could not be read" if stats.failed else ""
    click.echo(
        f"exported the masks of {stats.masked} image(s) to {export_path} "
        f"({stats.shards} shard(s) on Ray{before}{failed})",
        err=True,
    )


# -- label ----------------------------------------------------------------------------------
@click.command()
@click.option(
    "--labels",
    "-l",
    "labels",
    required=True,
    multiple=True,
    help="Comma-separated labels, e.g. 'cat,dog,car' (repeatable).",
)
@click.option(
    "--template",
    default=None,
    help="Prompt for each label, {} = the label [default: 'This is a photo of {}.'].",
)
@raw_option
@click.option(
    "--no-store", is_flag=True, help="Do not write the probabilities to the catalog's labels table."
)
@output_options(masks=False)
@friendly_errors
def label(
    labels, template, raw, no_store, fmt, export_path, export_fmt, overwrite, index_dir, models_dir
):
    """Zero-shot labels: each image's probability for each label, stored in the catalog.

    SigLIP's probabilities are independent per label (a sigmoid, not a softmax):
    they need not sum to 1. The table shows the most likely label per image.

    \b
      wherein label --labels "cat,dog,car"
      wherein label -l "indoor,outdoor" --template "a photo taken {}" --export io.parquet
    """
    from wherein.search.service import curate as C

    if raw and template:
        raise click.UsageError("use --raw or --template, not both")
    to = export_to(export_path, export_fmt, index_dir, overwrite)
    result = C.label(labels, template, raw, not no_store, index_dir, models_dir, to, NOTES)
    names = result.labels

    def render_table(hs) -> str:
        from wherein.search.output import table as tbl

        # A label may be called "path" or "best": its column must not replace ours.
        cols = {n: (n if n not in ("rank", "best", "path") else f"{n}*") for n in names}
        rows = [
            {
                "rank": h.rank,
                "best": h.extra["label"],
                "path": _path(h),
                **{cols[n]: p for n, p in h.extra["labels"].items()},
            }
            for h in hs
        ]
        return tbl(rows, ["rank", "best", *cols.values(), "path"])

    _show(result.hits, fmt, result.export, render_table)
    if not no_store:
        click.echo(
            f"stored {result.stored} probabilities ({len(names)} label(s) x {result.images} "
            "image(s)) in the catalog's labels table",
            err=True,
        )


# -- dupes ----------------------------------------------------------------------------------
@click.command()
@click.option(
    "--threshold",
    "-t",
    type=click.FloatRange(-1, 1),
    default=None,
    help="Cosine at or above which two images are near-duplicates "
    "[default: 0.95; 0.998 for the stand-in models].",
)
@click.option("--exact", is_flag=True, help="Only byte-identical files (same SHA-256).")
@click.option(
    "--redundant", is_flag=True, help="List only the files that are not their group's keeper."
)
@output_options(masks=False)
@friendly_errors
def dupes(
    threshold, exact, redundant, fmt, export_path, export_fmt, overwrite, index_dir, models_dir
):
    """Groups of duplicate and near-duplicate images, with a suggested keeper.

    Keeper: largest resolution, then largest file, then the oldest file. Compares the
    stored vectors: no model is loaded (--models is accepted like everywhere else).

    \b
      wherein dupes
      wherein dupes --threshold 0.97 --export dupes.csv
      wherein dupes --redundant --paths0 | xargs -0 gio trash
    """
    from wherein.search.output import human_bytes
    from wherein.search.output import table as tbl
    from wherein.search.service import curate as C

    if exact and threshold is not None:
        raise click.UsageError("--threshold does not apply with --exact")
    to = export_to(export_path, export_fmt, index_dir, overwrite)
    report = C.dupes(threshold, exact, redundant, index_dir, to, NOTES)

    def render_table(hs) -> str:
        rows = [
            {
                "group": h.extra["group"],
                "size": h.extra["group_size"],
                "keep": "KEEP" if h.extra["keeper"] else "",
                "match": h.extra["match"],
                "cosine": h.score,
                "pixels": _pixels(h),
                "bytes": h.size,
                "path": _path(h),
            }
            for h in hs
        ]
        return tbl(rows, ["group", "size", "keep", "match", "cosine", "pixels", "bytes", "path"])

    _show(report.hits, fmt, report.export, render_table)
    if fmt == "table":
        how = "exact copies" if report.threshold is None else f"cosine >= {report.threshold:g}"
        click.echo(
            f"{report.groups} group(s) ({how}); {report.redundant} redundant file(s), "
            f"{human_bytes(report.redundant_bytes)}",
            err=True,
        )


# -- unique ---------------------------------------------------------------------------------
@click.command()
@top_option(20, "At most N images, the most unique first (as `search -k`).")
@click.option(
    "--all", "show_all", is_flag=True, help="Every image, most unique first (for exports)."
)
@click.option(
    "--neighbours",
    "neighbours",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="How many nearest neighbours each image's uniqueness averages over.",
)
@output_options(masks=False)
@friendly_errors
def unique(k, show_all, neighbours, fmt, export_path, export_fmt, overwrite, index_dir, models_dir):
    """The oddest images: mean cosine distance to their nearest neighbours, highest first.

    Compares the stored vectors: no model is loaded (--models is accepted like everywhere else).

    \b
      wherein unique -k 20 --neighbours 10
      wherein unique --all --export uniqueness.csv
    """
    from wherein.search.output import table as tbl
    from wherein.search.service import curate as C

    to = export_to(export_path, export_fmt, index_dir, overwrite)
    result = C.unique(neighbours, None if show_all else k, index_dir, to, NOTES)

    def render_table(hs) -> str:
        rows = [
            {
                "rank": h.rank,
                "uniqueness": h.extra["uniqueness"],
                "pixels": _pixels(h),
                "path": _path(h),
            }
            for h in hs
        ]
        return tbl(rows, ["rank", "uniqueness", "pixels", "path"])

    _show(result.hits, fmt, result.export, render_table)
