"""`wherein demo`: a sample collection, models (real if present, else stand-ins, said plainly), index, search."""

from __future__ import annotations

from pathlib import Path

import click

from wherein.search.cli.options import friendly_errors, models_option


def register(cli: click.Group) -> None:
    @cli.command()
    @click.option(
        "--dir",
        "workdir",
        type=click.Path(file_okay=False, path_type=Path),
        default=Path("demo"),
        show_default=True,
        help="Where the sample photos, index and outputs go.",
    )
    @click.option("--query", default="a red circle", show_default=True)
    @models_option
    @click.pass_context
    @friendly_errors
    def demo(ctx, workdir: Path, query: str, models_dir):
        """Index a sample collection and search it (stand-in models when no real ones are present)."""
        from wherein.indexer import paths as P
        from wherein.indexer.models.modeldir import ModelDir
        from wherein.indexer.samples import write_sample

        models = ModelDir(P.models_dir(models_dir))
        if not models.image_dir.is_dir() or models.is_standin:
            from wherein.indexer.models.standins import build_standin_models

            standin = workdir / "standin-models"
            click.echo(
                f"No real models in {models.root}: building tiny stand-ins into {standin}.\n"
                "For real SigLIP 2 + CLIPSeg run `wherein models pull` (about 1 GB)."
            )
            models = ModelDir(build_standin_models(standin))
            _optimize_like_pull(models, workdir / "index")
        else:
            click.echo(f"Using the real models in {models.root}.")
        photos = workdir / "photos"
        write_sample(photos)
        index_dir = workdir / "index"
        click.echo(f"\n$ wherein index {photos} --index {index_dir}")
        # Every other parameter takes its default (ctx.invoke fills them in).
        ctx.invoke(
            cli.commands["index"],
            paths=(photos,),
            index_dir=index_dir,
            models_dir=models.root,
            quiet=True,
        )
        click.echo(f"\n$ wherein status --check --index {index_dir}")
        ctx.invoke(cli.commands["status"], index_dir=index_dir, models_dir=models.root, check=True)
        out = workdir / "out"
        args = [query, "--index", str(index_dir), "--models", str(models.root), "-k", "3"]
        args += ["--mask", "--out", str(out)]
        click.echo("\n$ wherein search " + " ".join(f'"{a}"' if " " in a else a for a in args))
        cli.commands["search"].main(args, standalone_mode=False)
        click.echo(f"\nMasks and overlays: {out}")
        click.echo(
            f"\nNext: export WHEREIN_INDEX={index_dir.resolve()} WHEREIN_MODELS={models.root.resolve()}, then try "
            '`wherein search "blue"` or `wherein index ~/Pictures`.'
        )


def _optimize_like_pull(models, index_dir: Path) -> None:
    """What `models pull` ends with, on the stand-ins: the fastest graphs that pass their
    gates (verified on the bundled sample; the demo's `index` verifies again on its photos)."""
    from wherein.indexer.models.optimize.service import always, optimize_models

    click.echo(
        f"\n$ wherein models optimize --models {models.root}   (what `models pull` ends with)"
    )
    report = optimize_models(models, index_dir, confirm=always, log=lambda s: None)
    for o in report.outcomes:
        click.echo(f"  {o.model:<14} {o.status:<10} {o.message}")
