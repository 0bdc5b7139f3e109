"""`wherein models pull | check | convert | verify`: get, check and convert the models.

`models optimize` lives in optimize.py; pull and check print its semantic self-test.

convert, verify and optimize use litert-torch and ai-edge-quantizer (base dependencies).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from wherein.search.cli.options import (
    echo_json,
    friendly_errors,
    json_option,
    models_option,
    standin_banner,
)
from wherein.search.service import models as M


@click.group()
def models() -> None:
    """Download, check and convert models."""


def register(cli: click.Group) -> None:
    cli.add_command(models)


# -- pull ----------------------------------------------------------------------
@models.command("pull")
@models_option
@click.option(
    "--model",
    "model",
    type=click.Choice(M.pullable()),
    default=None,
    help="The model family to pull [default: the one the models directory holds, else siglip2].",
)
@click.option("--only", type=click.Choice(M.model_folders()), multiple=True)
@click.option(
    "--no-optimize",
    is_flag=True,
    help="Keep the published graphs (skip building and verifying the faster ones).",
)
# The default now; the flag is kept for scripts that pass it.
@click.option("--optimize", "_optimize", is_flag=True, hidden=True)
@friendly_errors
def pull(models_dir, model, only, no_optimize, _optimize):
    """Download the real models from the Hugging Face Hub (resumable), then switch to the
    fastest set-up verified here: int8 graphs where this CPU runs them faster, a 16-position
    CLIPSeg text graph and a LiteRT text tower (searches start without torch)."""
    from wherein.search.cli.optimize import finish, show_self_test
    from wherein.search.service.feedback import Feedback

    result = M.pull(models_dir, only, not no_optimize, Feedback(say=click.echo), model)
    if result.optimized is not None:  # optimize's report ends with the self-test
        finish(result.optimized, "table")
        click.echo(
            "\nNext: `wherein index ~/Pictures`. A graph verified on the bundled sample "
            "photos (an empty index) is verified again on yours by that first run."
        )
        return
    if result.self_test is not None:
        show_self_test(result.self_test)
    if not result.ok:
        sys.exit(1)
    click.echo(
        "\nNext: `wherein models optimize` builds int8 image and CLIPSeg vision graphs (kept "
        "only where this CPU runs them faster: about 3x with int8 dot-product instructions), "
        "a 16-position CLIPSeg text graph (a new mask prompt about 3x faster) and a LiteRT "
        "text tower (a search starts in 0.4 s instead of 10), each verified before use."
    )


# -- check ---------------------------------------------------------------------
@models.command("check")
@click.argument("directory", required=False, type=click.Path(file_okay=False, path_type=Path))
@models_option
@click.option(
    "--self-test",
    is_flag=True,
    help="Also check that the models see what is drawn in generated photos (captions, masks).",
)
@json_option
@friendly_errors
def check(directory, models_dir, self_test, fmt):
    """Load each model and verify its input/output contract (DIRECTORY: instead of --models)."""
    from wherein.search.cli.optimize import show_self_test
    from wherein.search.service.feedback import Feedback

    result = M.check(directory or models_dir, self_test, Feedback(on_models=standin_banner))
    if fmt != "json":
        click.echo(_check_table(result.rows))
    if result.self_test is not None:
        show_self_test(result.self_test, fmt)
    if fmt == "json":
        echo_json(result.to_dict())
    problem = result.problem()
    if problem:
        raise click.ClickException(problem)
    if not result.ok:
        sys.exit(1)


CHECK_WIDTH = 100  # columns `models check` prints in, optimized graphs and errors included


def _check_table(rows: list[dict]) -> str:
    """What was found, per file, in a table; what each file must be, below it (the
    contracts are the long part: side by side they made the table 190 columns wide)."""
    from wherein.search.output import table, wrap

    lines = [table(rows, ["model", "file", "status", "found"], width=CHECK_WIDTH), "", "expected:"]
    name = max(len(r["file"]) for r in rows) + 4
    for r in rows:
        if r["expected"] in ("", "-"):
            continue
        head = f"  {r['file']}".ljust(name)
        if len(head) + 12 > CHECK_WIDTH:  # a long file name: its contract on the next line
            lines.append(head.rstrip())
            head = " " * 6
        lines += wrap(r["expected"], CHECK_WIDTH, head, " " * len(head))
    return "\n".join(lines)


# -- convert -------------------------------------------------------------------
def _batches(_ctx, _param, value: str) -> list[int]:
    try:
        return [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter("comma-separated integers, e.g. 1,8") from None


@models.command("convert")
@click.argument("tower", type=click.Choice([M.IMAGE_TOWER, M.TEXT_TOWER, *M.convertible()]))
@click.option(
    "--out",
    "out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Models directory to convert in [default: the --models directory]. The graph and "
    "manifest.json go to its siglip2-image/ or siglip2-text/ folder (the manifest makes "
    "wherein use the new graph); siglip2-text reads its weights from that same folder.",
)
@click.option(
    "--batch",
    "batches",
    default="1,8",
    show_default=True,
    callback=_batches,
    help="Batch sizes, one signature each (batch 1 is always included).",
)
@click.option(
    "--precision",
    type=click.Choice(["fp32", "fp16", "int8"]),
    default="fp32",
    show_default=True,
    help="fp16: fp16 weights; int8: dynamic-range int8 (the text tower's takes about a "
    "quarter of fp32's memory in `wherein serve`).",
)
@click.option(
    "--source",
    default=None,
    help="Weights: hf-hub:timm/ViT-B-16-SigLIP2 (default for siglip2), local-dir:DIR, or "
    "standin. siglip2-text defaults to local-dir:OUT/siglip2-text (the graph must sit "
    "beside its tokenizer files).",
)
@click.option("--random-weights", is_flag=True, help="Random weights (tests and benchmarks only).")
@click.option(
    "--config",
    type=click.Choice(["full", "small"]),
    default="full",
    show_default=True,
    help="With --random-weights: full ViT-B/16, or a tiny test tower.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="With --random-weights.")
@models_option
@json_option
@friendly_errors
def convert(tower, out, batches, precision, source, random_weights, config, seed, models_dir, fmt):
    """Convert a SigLIP 2 tower to LiteRT and prove it equal to PyTorch; given another model
    family, build its whole models directory with --random-weights (tests, benches).

    \b
      wherein models convert siglip2 --precision int8          (into --models / WHEREIN_MODELS)
      wherein models convert siglip2-text --out ~/models        (reads and writes ~/models)
    """
    from wherein.schemas.errors import UsageError
    from wherein.search.service.feedback import Feedback

    log = (lambda s: click.echo(s, err=True)) if fmt == "json" else click.echo
    try:
        result = M.convert(
            tower,
            out or models_dir,
            batches,
            precision,
            source,
            random_weights,
            config,
            seed,
            Feedback(say=log),
        )
    except UsageError as exc:  # options that do not go together: with the usage line
        raise click.UsageError(str(exc)) from None
    if fmt == "json":
        echo_json(result.to_dict())


# -- verify --------------------------------------------------------------------
@models.command("verify")
@click.argument("directory", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--images",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Compare on these images instead of random ones.",
)
@click.option(
    "--count",
    type=click.IntRange(2, 1024),
    default=32,
    show_default=True,
    help="How many inputs to compare.",
)
@models_option
@json_option
@friendly_errors
def verify(directory, images, count, models_dir, fmt):
    """Run each LiteRT graph beside its PyTorch reference; exit 1 below the pass marks."""
    from wherein.search.output import table
    from wherein.search.service.feedback import Feedback

    say = Feedback(say=lambda s: click.echo(s, err=True))
    result = M.verify(directory or models_dir, images, count, say)
    if fmt == "json":
        echo_json(result.to_dict())
    else:
        click.echo(table([_readable(r) for r in result.rows], M.verify_columns()))
        click.echo(f"pass marks: {result.thresholds}")
        click.echo("verify     " + ("ok" if result.ok else "FAILED"))
    if not result.ok:
        sys.exit(1)


def _readable(row: dict) -> dict:
    """Six decimals for the correlation: the pass mark is 0.9999."""
    fmt = {"pearson": "{:.6f}", "max_abs_diff": "{:.2e}", "top10": "{:.3f}"}
    return {k: (fmt[k].format(v) if k in fmt and v is not None else v) for k, v in row.items()}
