"""`wherein search`: parse options into a search request, call the search service, print with
wherein.search.output."""

from __future__ import annotations

import sys

import click

from wherein.search.cli.options import (
    SORT_KEYS,
    check_export_options,
    export_options,
    filter_options,
    format_options,
    friendly_errors,
    gathers_selection,
    index_option,
    kind_options,
    mask_out_option,
    models_option,
    raw_option,
    standin_banner,
    top_option,
)


def register(cli: click.Group) -> None:
    cli.add_command(search)


@click.command()
@click.argument("query", nargs=-1)
@top_option(None, "At most N hits [default: 10, or all above a --min-* threshold].")
@click.option(
    "--min-probability",
    "-p",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=None,
    help="Every hit whose calibrated probability is at least P (not just the top k).",
)
@click.option(
    "--min-score",
    type=click.FloatRange(-1, 1),
    default=None,
    help="Every hit whose cosine with the query is at least S.",
)
@click.option(
    "--add", "add", multiple=True, metavar="TEXT[:W]", help="Add a text term (repeatable)."
)
@click.option(
    "--subtract",
    "subtract",
    multiple=True,
    metavar="TEXT[:W]",
    help="Subtract a text term (repeatable).",
)
@click.option(
    "--like",
    "like",
    multiple=True,
    metavar="PHOTO[:W]",
    help="Add an image as a query term (repeatable).",
)
@click.option(
    "--unlike", "unlike", multiple=True, metavar="PHOTO[:W]", help="Subtract an image (repeatable)."
)
@filter_options
@kind_options
@click.option(
    "--sort",
    type=click.Choice(SORT_KEYS),
    default="score",
    show_default=True,
    help="Order of the hits after the cut: date = newest file, taken = newest photo "
    "(EXIF date), size = largest first.",
)
@click.option("--reverse", is_flag=True, help="Reverse the sort order.")
@raw_option
@format_options()
@click.option("--mask", is_flag=True, help="Also segment where the match is in each hit (CLIPSeg).")
@click.option(
    "--mask-prompt",
    default=None,
    help="What to segment [default: the query's first positive text].",
)
@mask_out_option
@click.option(
    "--min-mask-area",
    type=click.FloatRange(0, 1),
    default=None,
    help="Drop hits whose mask covers less than this fraction of the image.",
)
@click.option(
    "--full-size-overlays",
    is_flag=True,
    help="Overlays at the photo's size (slower) instead of a preview of at most 1024 px.",
)
@export_options(masks=True)
@click.option(
    "--category-from-labels",
    is_flag=True,
    help="In a mask export, name each image's mask by its most likely label from "
    "`wherein label` instead of by the mask prompt.",
)
@index_option
@models_option
@friendly_errors
@gathers_selection
def search(
    query,
    selection,
    add,
    subtract,
    like,
    unlike,
    raw,
    fmt,
    mask,
    mask_prompt,
    out_dir,
    min_mask_area,
    full_size_overlays,
    export_path,
    export_fmt,
    overwrite,
    category_from_labels,
    index_dir,
    models_dir,
):
    """Find images matching QUERY: text terms joined by lone + and - (weights as TERM:W).

    \b
      wherein search "a red car"
      wherein search beach - people            (beach, but not people)
      wherein search "sunset:2" + sea --like ref.jpg -k 20
      wherein search dog --min-probability 0.3 --under ~/Photos --sort date --json
      wherein search dog -p 0.5 --mask --export dogs.coco.json
      wherein search beach --taken 2024-06..2024-08 --near 43.7,7.26,20 --sort taken
      wherein search "a dog" --kind video         (one hit per video: the time, the moments)
    """
    from wherein.search import output
    from wherein.search.service.errors import only_with
    from wherein.search.service.search import (
        DEFAULT_MASK_DIR,
        MODEL_TEMPLATE,
        ExportRequest,
        MaskRequest,
        Query,
        SearchRequest,
        open_index,
    )
    from wherein.search.service.search import search as run_search

    q = Query.build(list(query), add=add, subtract=subtract, like=like, unlike=unlike)
    q.validate()
    only_with(
        "--mask",
        mask,
        {"--mask-prompt": mask_prompt, "--out": out_dir, "--min-mask-area": min_mask_area},
    )
    request = SearchRequest(
        q,
        **selection,
        mask=MaskRequest(
            mask_prompt, out_dir or DEFAULT_MASK_DIR, min_mask_area, full_size_overlays
        )
        if mask
        else None,
        export=ExportRequest(export_path, export_fmt, category_from_labels, overwrite)
        if export_path is not None
        else None,
    ).check()
    # A bad destination fails now, not after the search; so does one of the photos read.
    photos = [t.value for t in q.image_terms if t.kind == "image"]
    check_export_options(export_path, export_fmt, mask, index_dir, photos, overwrite)
    with open_index(index_dir, models_dir, template=None if raw else MODEL_TEMPLATE) as searcher:
        standin_banner(searcher.models)
        result = run_search(searcher, request)
        searched = searcher.store.dir
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)
    hits = result.hits
    to_stdout = str(export_path) == "-"
    if export_path is not None:
        where = "standard output" if to_stdout else export_path
        click.echo(f"exported {len(hits)} hit(s) to {where}", err=True)
    if to_stdout:  # the export is what stdout holds
        return
    shown = output.photo_columns(request)
    sys.stdout.write(output.render(hits, fmt, shown, request.near))
    if fmt == "table":
        stale = sum(not h.exists for h in hits)
        if stale:
            click.echo(
                f"warning: {stale} hit(s) point to files that no longer exist; "
                f"run `wherein index` on their folders to drop them",
                err=True,
            )
        if not hits:
            click.echo(f"no matches in {searched}", err=True)
