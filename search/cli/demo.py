"""`wherein demo`: a sample collection, models (real if present, else stand-ins, said plainly), index, search."""

from __future__ import annotations

import shlex
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
        from wherein.search.service import models as M

        models_root, real = M.real_models(models_dir)
        standin = workdir / "standin-models"
        if not real and M.built_standins(standin):
            click.echo(
                f"No real models in {models_root}: using the stand-ins built before in {standin}."
                "\nFor real SigLIP 2 + CLIPSeg run `wherein models pull` (about 1 GB)."
            )
            models_root = standin
        elif not real:
            click.echo(
                f"No real models in {models_root}: building tiny stand-ins into {standin}.\n"
                "For real SigLIP 2 + CLIPSeg run `wherein models pull` (about 1 GB)."
            )
            models_root = M.build_standins(standin)
            _optimize_like_pull(models_root, workdir / "index")
        else:
            click.echo(f"Using the real models in {models_root}.")
        photos = workdir / "photos"
        M.sample_photos(photos)
        index_dir = workdir / "index"
        click.echo(f"\n$ wherein index {photos} --index {index_dir}")
        # Every other parameter takes its default (ctx.invoke fills them in).
        ctx.invoke(
            cli.commands["index"],
            paths=(photos,),
            index_dir=index_dir,
            models_dir=models_root,
            quiet=True,
        )
        click.echo(f"\n$ wherein status --check --index {index_dir}")
        ctx.invoke(cli.commands["status"], index_dir=index_dir, models_dir=models_root, check=True)
        out = workdir / "out"
        args = [query, "--index", str(index_dir), "--models", str(models_root), "-k", "3"]
        args += ["--mask", "--out", str(out)]
        click.echo("\n$ wherein search " + " ".join(f'"{a}"' if " " in a else a for a in args))
        cli.commands["search"].main(args, standalone_mode=False)
        click.echo(f"\nMasks and overlays: {out}")
        # Lines to paste into a shell as they are: nothing may trail the export's paths.
        env = f"WHEREIN_INDEX={shlex.quote(str(index_dir.resolve()))} "
        env += f"WHEREIN_MODELS={shlex.quote(str(models_root.resolve()))}"
        click.echo(
            "\nNext, to use this index and these models from any folder:\n"
            f"  export {env}\n"
            '  wherein search "blue"            # or index your own: wherein index ~/Pictures'
        )


def _optimize_like_pull(models_root: Path, index_dir: Path) -> None:
    """What `models pull` ends with, on the stand-ins: the fastest graphs that pass their
    gates (verified on the bundled sample; the demo's `index` verifies again on its photos)."""
    from wherein.search.service import models as M

    click.echo(
        f"\n$ wherein models optimize --models {models_root}   (what `models pull` ends with)"
    )
    result = M.optimize(models_root, index_dir, confirm=lambda _estimate: True, run_self_test=False)
    for o in result.report.outcomes:
        click.echo(f"  {o.model:<14} {o.status:<10} {o.message}")
