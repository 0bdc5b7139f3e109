"""`wherein models optimize`, and the semantic self-test that `models check --self-test`,
`models pull` and `models optimize` print."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from wherein.search.cli.options import (
    echo_json,
    friendly_errors,
    index_option,
    json_option,
    models_option,
)
from wherein.search.service import models as M


def register(cli: click.Group) -> None:
    models = cli.commands["models"]
    assert isinstance(models, click.Group)  # registered before this module's register()
    models.add_command(optimize)


def self_test_report(root: Path, fmt: str = "table") -> dict:
    """Run the semantic self-test on the models in root; print it; return its JSON form."""
    from wherein.search.service.models import self_test

    result = self_test(root)
    show_self_test(result, fmt)
    return result.to_json()


def show_self_test(result, fmt: str = "table") -> None:
    """The self-test's checks as a table (nothing for --json: it is in the JSON)."""
    from wherein.search.output import table

    if fmt != "table":
        return
    click.echo("\nself-test: generated photos of coloured shapes (sizes, formats, EXIF turns)")
    rows = [
        {
            "check": c.name,
            "status": "ok" if c.ok else ("-" if c.skipped else "FAIL"),
            "figures": c.figures,
            "points to": c.points_to,
        }
        for c in result.checks
    ]
    click.echo(table(rows, ["check", "status", "figures", "points to"]))
    click.echo("self-test  " + ("ok" if result.ok else "FAILED"))


@click.command("optimize")
@models_option
@index_option
@click.option(
    "--only",
    type=click.Choice(M.optimize_parts()),
    multiple=True,
    help="Optimize only these (repeatable).",
)
@click.option("--force", is_flag=True, help="Rebuild and re-verify graphs that are current.")
@click.option(
    "-y",
    "--yes",
    is_flag=True,
    help="Switch the image tower without asking (the next `wherein index` re-embeds). Without "
    "it and without a terminal to ask at, a switch that re-embeds an index is not made.",
)
@click.option(
    "--count",
    type=click.IntRange(11, 1024),
    default=32,
    show_default=True,
    help="Indexed images to verify the image tower on (top-10 agreement needs more than 10).",
)
@click.option(
    "--min-speedup",
    type=click.FloatRange(0),
    default=None,
    help="Switch only to graphs at least this much faster here [default: 1.25; 0: always].",
)
@click.option("--no-self-test", is_flag=True, help="Skip the semantic self-test at the end.")
@json_option
@friendly_errors
def optimize(models_dir, index_dir, only, force, yes, count, min_speedup, no_self_test, fmt):
    """Faster graphs from the pulled models, each verified on your own photos before use.

    \b
    siglip2-image  fp16 -> fp32 -> dynamic int8 image tower (about 3x faster indexing);
                   switching it makes the next `wherein index` re-embed every image
    clipseg        the same for CLIPSeg's vision graph (masks), and its text graph at
                   16 token positions instead of 77 (exact; a new prompt costs less)
    siglip2-text   LiteRT text tower: searches start without torch

    Re-runnable: graphs that are current are left alone (--force rebuilds them).
    """
    from wherein.search.service.feedback import Feedback

    quiet = fmt != "table"
    log = (lambda s: click.echo(s, err=True)) if quiet else click.echo
    result = M.optimize(
        models_dir,
        index_dir,
        only,
        _confirm(yes),
        force,
        count,
        min_speedup,
        run_self_test=not no_self_test,
        feedback=Feedback(say=log),
    )
    finish(result, fmt)


def _confirm(yes: bool):
    """Who says yes to a switch that re-embeds the index: --yes, else the user at a terminal
    (asked on stderr, so --json output stays clean), else nobody (the switch is not made)."""
    if yes:
        return lambda _estimate: True
    if sys.stdin.isatty():
        return lambda _estimate: click.confirm(
            "Switch the image tower now?", default=True, err=True
        )
    return None


def finish(result, fmt: str) -> None:
    """Print what optimize did (a table, then the self-test; or JSON with the self-test) and
    exit 1 when the self-test fails."""
    from wherein.search.output import table

    if fmt == "table":
        click.echo("")
        click.echo(
            table(
                [
                    {"model": o.model, "status": o.status, "file": o.file, "result": o.message}
                    for o in result.report.outcomes
                ],
                ["model", "status", "file", "result"],
            )
        )
    if result.self_test is not None:
        show_self_test(result.self_test, fmt)
    if fmt == "json":
        echo_json(result.to_dict())
    if not result.ok:
        sys.exit(1)
