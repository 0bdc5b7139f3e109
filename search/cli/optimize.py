"""`wherein models optimize`, and the semantic self-test that `models check --self-test`,
`models pull` and `models optimize` print."""

from __future__ import annotations

import functools
import os
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

PARTS = ("siglip2-image", "clipseg", "siglip2-text")


def register(cli: click.Group) -> None:
    models = cli.commands["models"]
    assert isinstance(models, click.Group)  # registered before this module's register()
    models.add_command(optimize)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def self_test_report(root: Path, fmt: str = "table") -> dict:
    """Run the semantic self-test on the models in root; print it; return its JSON form."""
    from wherein.indexer.models.modeldir import ModelDir
    from wherein.indexer.models.optimize.selftest import run_self_test
    from wherein.search.output import table

    result = run_self_test(ModelDir(Path(root)))
    if fmt == "table":
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
    return result.to_json()


@click.command("optimize")
@models_option
@index_option
@click.option(
    "--only", type=click.Choice(PARTS), multiple=True, help="Optimize only these (repeatable)."
)
@click.option("--force", is_flag=True, help="Rebuild and re-verify graphs that are current.")
@click.option(
    "-y",
    "--yes",
    is_flag=True,
    help="Switch the image tower without asking (the next `wherein index` re-embeds).",
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
    siglip2-text   LiteRT text tower: searches start without torch ([convert] extra)

    Re-runnable: graphs that are current are left alone (--force rebuilds them).
    """
    from wherein.indexer import paths as P
    from wherein.indexer.models.modeldir import ModelDir
    from wherein.indexer.models.optimize import build as O
    from wherein.indexer.models.optimize.inputs import load_sample
    from wherein.search.output import table

    md = ModelDir(P.models_dir(models_dir))
    index = P.index_dir(index_dir)
    parts = only or PARTS
    quiet = fmt != "table"
    log = (lambda s: click.echo(s, err=True)) if quiet else click.echo
    outcomes, estimate = [], None
    samples = functools.cache(lambda: load_sample(index, count))
    if "siglip2-image" in parts:
        out = O.prepare_image(md, samples, force, log, min_speedup)
        if out.status == "ready":
            estimate = O.reembed_estimate(samples(), out, len(os.sched_getaffinity(0)))
            _announce_switch(out, estimate, index, log)
            if (
                estimate["images"]
                and not yes
                and not quiet
                and sys.stdin.isatty()
                and not click.confirm("Switch the image tower now?", default=True)
            ):
                O.discard(md, out)
                out.status, out.message = "declined", "kept the current image tower"
            else:
                O.adopt_image(md, out)
        outcomes.append(out)
    if "clipseg" in parts:
        outcomes.append(O.optimize_clipseg(md, samples, force, log, min_speedup))
        outcomes.append(O.optimize_clipseg_text(md, force, log, min_speedup))
    if "siglip2-text" in parts:
        outcomes.append(O.optimize_text(md, force, log))
    result = {
        "models": str(md.root),
        "verified_on": samples().origin if samples.cache_info().currsize else None,
        "optimized": [o.to_json() for o in outcomes],
        "reembed": estimate,
    }
    if not quiet:
        click.echo("")
        click.echo(
            table(
                [
                    {"model": o.model, "status": o.status, "file": o.file, "result": o.message}
                    for o in outcomes
                ],
                ["model", "status", "file", "result"],
            )
        )
    self_ok = True
    if not no_self_test:
        result["self_test"] = self_test_report(md.root, fmt)
        self_ok = result["self_test"]["ok"]
    if fmt == "json":
        echo_json(result)
    if not self_ok:
        sys.exit(1)


def _announce_switch(out, estimate: dict, index: Path, log) -> None:
    """Say what switching costs before it happens: the whole catalog re-embeds."""
    ms = out.figures["ms_per_image"]
    log(
        f"verified: {out.file} passes ({ms['source']:.0f} -> {ms['candidate']:.0f} ms/image "
        f"on {ms['threads']} threads)"
    )
    n = estimate["images"]
    if not n:
        log("switching the image tower (the index is empty: nothing to re-embed)")
        return
    log(
        f"Switching the image tower is a model change: the index at {index} holds {n:,} images, "
        f"and the next `wherein index` drops their vectors and re-embeds every one, about "
        f"{_duration(estimate['seconds'])} here ({estimate['model_ms']:.0f} ms/image model, measured "
        f"now, + {estimate['decode_ms']:.0f} ms/image decoding spread over the cores). "
        "Searches use the old vectors until then."
    )
