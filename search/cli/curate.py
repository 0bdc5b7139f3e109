"""`wherein select | label | dupes | unique`: dataset curation commands (library: wherein.search.curate)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path

import click

from wherein.search.cli.options import (
    check_export_options,
    engine_option,
    export_keep,
    export_options,
    filter_options,
    format_options,
    friendly_errors,
    index_option,
    kind_options,
    models_option,
    progress,
    raw_option,
    ray_address_option,
    standin_banner,
    top_option,
)


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
            )
            return f(*args, **kwargs)

        return checked

    return decorate


def _emit(
    hits,
    fmt: str,
    export_path,
    export_fmt,
    table: Callable[[list], str],
    prompt: str | None = None,
    labels=None,
    index_dir=None,
) -> str:
    """Export (when asked), then print in the chosen format; returns the format used.

    prompt/labels: what the masks show, for label exports (see write_export). An export
    to - (standard output) is what stdout holds: the rows are not printed as well.
    """
    from wherein.search import output
    from wherein.search.export.formats import export_format
    from wherein.search.export.hits import write_export

    to_stdout = str(export_path) == "-"
    if export_path:
        keep = export_keep(index_dir)
        write_export(hits, export_path, export_fmt, prompt=prompt, labels=labels, keep=keep)
        where = "standard output" if to_stdout else export_path
        if export_format(export_path, export_fmt).kind == "labels":
            masked = sum(1 for h in hits if h.mask_path)
            click.echo(f"exported the masks of {masked} image(s) to {where}", err=True)
        else:
            click.echo(f"exported {len(hits)} row(s) to {where}", err=True)
    if to_stdout:
        return fmt
    if fmt == "table":
        text = table(hits)
        sys.stdout.write(text + ("\n" if text else ""))
    else:
        sys.stdout.write(output.render(hits, fmt))
    return fmt


def _stored_labels(searcher, hits):
    """Each hit's most likely label from `wherein label`, to name its mask in an export."""
    from wherein.search.export.labels import best_labels

    return best_labels(searcher.store.catalog, [h.id for h in hits])


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
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder for masks and overlays [default: ./wherein-masks].",
)
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
def select(
    query,
    min_probability,
    k,
    under,
    glob,
    taken,
    camera,
    near,
    kind,
    frames,
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
    from wherein.search.api import MODEL_TEMPLATE, Query, add_masks, open_index
    from wherein.search.curate import select as S

    if copy_to and link_to:
        raise click.UsageError("use --copy-to or --link-to, not both")
    if flat and not (copy_to or link_to):
        raise click.UsageError("--flat only applies with --copy-to or --link-to")
    if out_dir and not mask:
        raise click.UsageError("--out only applies with --mask")
    if category_from_labels and not (mask and export_path):
        raise click.UsageError("--category-from-labels only applies with --mask --export")
    _check_engine(engine, ray_address, mask, out_dir, export_path, export_fmt)
    q = Query.build(list(query))
    q.validate()
    if not q.has_text:
        raise click.UsageError("select needs a text term (the probability is calibrated for text)")
    with open_index(index_dir, models_dir, template=None if raw else MODEL_TEMPLATE) as searcher:
        standin_banner(searcher.models)
        hits = S.select(
            searcher,
            q,
            min_probability,
            k,
            under=list(under),
            glob=list(glob),
            taken=taken,
            camera=camera,
            near=near,
            kind=kind,
            frames=frames,
        )
        for warning in searcher.last_warnings:
            click.echo(f"warning: {warning}", err=True)
        models_root, index_root = searcher.models.root, searcher.store.dir
        labels = _stored_labels(searcher, hits) if category_from_labels else None
    dest = copy_to or link_to
    placements = (
        S.plan(hits, dest, "flat" if flat else "tree") if dest else []
    )  # checked before any work
    prompt = q.mask_prompt() if mask else None
    shown = output.photo_columns(None, taken, camera, near)

    def render_table(hs) -> str:
        return output.to_table(hs, shown, near)

    if prompt and engine == "ray":
        hits = _masks_on_ray(
            hits, prompt, export_path, export_fmt, models_root, labels, ray_address, fmt, index_dir
        )
        _emit(hits, fmt, None, None, render_table)
    else:
        if prompt:
            hits = add_masks(
                hits, prompt, out_dir or Path("wherein-masks"), models_root, index_dir=index_root
            )
        _emit(hits, fmt, export_path, export_fmt, render_table, prompt, labels, index_dir)
    if dest:
        made = S.materialise(placements, "link" if link_to else "copy")
        click.echo(f"{'linked' if link_to else 'copied'} {len(made)} file(s) into {dest}", err=True)
    if not hits:
        click.echo(f"no image reaches probability {min_probability}", err=True)


def _check_engine(engine, ray_address, mask, out_dir, export_path, export_fmt) -> None:
    """--engine ray masks into a label export only; a bad --ray-address fails before the search."""
    from wherein.search.export.formats import LABEL_FORMATS, export_format, listing

    if engine != "ray":
        if ray_address:
            raise click.UsageError("--ray-address only applies with --engine ray")
        return
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
    if ray_address:
        from wherein.indexer.scale.ray_connect import check_reachable, resolve

        # Now, not after the search: a wrong address is one line in seconds, and no work
        # folder is left behind. The token is checked when the cluster is joined.
        check_reachable(resolve(ray_address))


def _masks_on_ray(
    hits, prompt, export_path, export_fmt, models_root, labels, address, fmt, index_dir
):
    """Every hit's mask on Ray into the label export (resumable); the hits with mask fields."""
    from wherein.search.curate.masks_at_scale import export_masks
    from wherein.search.export.formats import export_format

    bar = progress(False, fmt)
    try:
        hits, stats = export_masks(
            hits,
            prompt,
            export_path,
            export_format(export_path, export_fmt).name,
            models_root,
            labels,
            address,
            say=bar.write,
            progress=bar.update,
            on_total=bar.reset,
            keep=export_keep(index_dir),
        )
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] == "ray":
            raise click.ClickException(
                "ray is not installed: pip install 'wherein[scale]'"
            ) from None
        raise
    finally:
        bar.close()
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
    return hits


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
def label(labels, template, raw, no_store, fmt, export_path, export_fmt, index_dir, models_dir):
    """Zero-shot labels: each image's probability for each label, stored in the catalog.

    SigLIP's probabilities are independent per label (a sigmoid, not a softmax):
    they need not sum to 1. The table shows the most likely label per image.

    \b
      wherein label --labels "cat,dog,car"
      wherein label -l "indoor,outdoor" --template "a photo taken {}" --export io.parquet
    """
    from wherein.search.api import open_index
    from wherein.search.curate import labels as L

    if raw and template:
        raise click.UsageError("use --raw or --template, not both")
    names = L.parse_labels(labels)
    if template:
        L.check_template(template)
    with open_index(index_dir, models_dir) as searcher:
        tmpl = L.check_template(L.RAW_TEMPLATE if raw else (template or searcher.template or "{}"))
        standin_banner(searcher.models)
        run = L.compute_labels(searcher, names, tmpl)
        stored = 0 if no_store else L.store_labels(searcher.store.catalog, run)
        hits = L.label_hits(searcher.store.catalog, run)

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

    _emit(hits, fmt, export_path, export_fmt, render_table, index_dir=index_dir)
    if not no_store:
        click.echo(
            f"stored {stored} probabilities ({len(names)} label(s) x {len(run.ids)} image(s)) "
            f"in the catalog's labels table",
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
def dupes(threshold, exact, redundant, fmt, export_path, export_fmt, index_dir, models_dir):
    """Groups of duplicate and near-duplicate images, with a suggested keeper.

    Keeper: largest resolution, then largest file, then the oldest file. Compares the
    stored vectors: no model is loaded (--models is accepted like everywhere else).

    \b
      wherein dupes
      wherein dupes --threshold 0.97 --export dupes.csv
      wherein dupes --redundant --paths0 | xargs -0 gio trash
    """
    from wherein.indexer import paths as P
    from wherein.indexer.models.modeldir import is_standin_space
    from wherein.indexer.store.index_store import IndexStore
    from wherein.search.curate.dupes import find_duplicates
    from wherein.search.output import human_bytes
    from wherein.search.output import table as tbl

    if exact and threshold is not None:
        raise click.UsageError("--threshold does not apply with --exact")
    with IndexStore.open(P.index_dir(index_dir)) as store:
        space = store.catalog.get_meta("space")
        standin_banner(space=space, index=store.dir)
        if redundant and not exact and is_standin_space(space):
            raise click.ClickException(
                "--redundant would suggest deleting photos that only share colours: this index "
                "was made with the stand-in models, which see nothing else (byte-identical "
                "copies: --exact --redundant; real models: `wherein models pull`, then "
                "`wherein index` again)"
            )
        report = find_duplicates(store, threshold, exact_only=exact)
    hits = [h for h in report.hits if not (redundant and h.extra["keeper"])]

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

    out_fmt = _emit(hits, fmt, export_path, export_fmt, render_table, index_dir=index_dir)
    if out_fmt == "table":
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
def unique(k, show_all, neighbours, fmt, export_path, export_fmt, index_dir, models_dir):
    """The oddest images: mean cosine distance to their nearest neighbours, highest first.

    Compares the stored vectors: no model is loaded (--models is accepted like everywhere else).

    \b
      wherein unique -k 20 --neighbours 10
      wherein unique --all --export uniqueness.csv
    """
    from wherein.indexer import paths as P
    from wherein.indexer.store.index_store import IndexStore
    from wherein.search.curate.unique import unique_hits
    from wherein.search.output import table as tbl

    with IndexStore.open(P.index_dir(index_dir)) as store:
        standin_banner(space=store.catalog.get_meta("space"), index=store.dir)
        hits = unique_hits(store, neighbours, None if show_all else k)

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

    _emit(hits, fmt, export_path, export_fmt, render_table, index_dir=index_dir)
