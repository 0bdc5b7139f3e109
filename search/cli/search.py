"""`wherein search`: parse options, call wherein.search.api, print with wherein.search.output."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from wherein.search.cli.common import friendly_errors, index_option, json_option, models_option

SORT_KEYS = ("score", "date", "path", "size")  # mirrors api.SORT_KEYS (api imports numpy/faiss)


def register(cli: click.Group) -> None:
    cli.add_command(search)


@click.command()
@click.argument("query", nargs=-1)
@click.option(
    "-k",
    "--top",
    "k",
    type=click.IntRange(min=1),
    default=None,
    help="At most N hits [default: 10, or all above a --min-* threshold].",
)
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
@click.option(
    "--under",
    multiple=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Only images below this folder (repeatable: any of them).",
)
@click.option(
    "--glob",
    "glob",
    multiple=True,
    metavar="PATTERN",
    help="Only paths matching PATTERN: '*.jpg' matches names, 'trips/*' paths; case-insensitive.",
)
@click.option(
    "--sort",
    type=click.Choice(SORT_KEYS),
    default="score",
    show_default=True,
    help="Order of the hits after the cut: date = newest first, size = largest first.",
)
@click.option("--reverse", is_flag=True, help="Reverse the sort order.")
@click.option(
    "--raw",
    "raw",
    is_flag=True,
    help="Encode text terms as typed, without the prompt 'This is a photo of {}.'.",
)
@json_option
@click.option("--nl", "fmt", flag_value="nl", help="One JSON object per line.")
@click.option("--csv", "fmt", flag_value="csv", help="CSV with a header row.")
@click.option("--paths", "fmt", flag_value="paths", help="Only the paths, one per line.")
@click.option(
    "--paths0", "fmt", flag_value="paths0", help="Only the paths, NUL-terminated (xargs -0)."
)
@click.option("--mask", is_flag=True, help="Also segment where the match is in each hit (CLIPSeg).")
@click.option(
    "--mask-prompt",
    default=None,
    help="What to segment [default: the query's first positive text].",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder for masks and overlays [default: ./wherein-masks].",
)
@click.option(
    "--min-mask-area",
    type=click.FloatRange(0, 1),
    default=None,
    help="Drop hits whose mask covers less than this fraction of the image.",
)
@index_option
@models_option
@friendly_errors
def search(
    query,
    k,
    min_probability,
    min_score,
    add,
    subtract,
    like,
    unlike,
    under,
    glob,
    sort,
    reverse,
    raw,
    as_json,
    fmt,
    mask,
    mask_prompt,
    out_dir,
    min_mask_area,
    index_dir,
    models_dir,
):
    """Find images matching QUERY: text terms joined by lone + and - (weights as TERM:W).

    \b
      wherein search "a red car"
      wherein search beach - people            (beach, but not people)
      wherein search "sunset:2" + sea --like ref.jpg -k 20
      wherein search dog --min-probability 0.3 --under ~/Photos --sort date --json
    """
    from wherein.indexer import paths as P
    from wherein.schemas.models import SIGLIP_PROMPT_TEMPLATE
    from wherein.search import output
    from wherein.search.api import Query, add_masks, open_index

    fmt = "json" if as_json else (fmt or "table")
    q = Query.build(list(query), add=add, subtract=subtract, like=like, unlike=unlike)
    q.validate()
    with open_index(
        index_dir, models_dir, template=None if raw else SIGLIP_PROMPT_TEMPLATE
    ) as searcher:
        if fmt == "table" and searcher.models.is_standin:
            click.secho(
                f"Using STAND-IN models from {searcher.models.root} (they only know colours).",
                fg="yellow",
                err=True,
            )
        hits = searcher.search(
            q,
            k=k,
            min_probability=min_probability,
            min_score=min_score,
            under=list(under),
            glob=list(glob),
            sort=sort,
            reverse=reverse,
        )
        models_root = searcher.models.root
    if mask:
        prompt = mask_prompt or next((t.value for t in q.text_terms if t.weight > 0), None)
        if not prompt:
            raise click.UsageError(
                "--mask needs a text term or --mask-prompt to know what to segment"
            )
        hits = add_masks(hits, prompt, out_dir or Path("wherein-masks"), models_root, min_mask_area)
    elif mask_prompt or out_dir or min_mask_area is not None:
        raise click.UsageError("--mask-prompt, --out and --min-mask-area only apply with --mask")
    sys.stdout.write(output.render(hits, fmt))
    if fmt == "table":
        stale = sum(not h.exists for h in hits)
        if stale:
            click.echo(
                f"warning: {stale} hit(s) point to files that no longer exist; "
                f"run `wherein index` on their folders to drop them",
                err=True,
            )
        if not hits:
            click.echo(f"no matches in {P.index_dir(index_dir)}", err=True)
