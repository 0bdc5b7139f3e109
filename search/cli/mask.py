"""`wherein mask IMAGE PROMPT...`: where in one image each prompt matches (CLIPSeg)."""

from __future__ import annotations

from pathlib import Path

import click

from wherein.search.cli.common import echo_json, friendly_errors, json_option, models_option, table


def register(cli: click.Group) -> None:
    cli.add_command(mask)


@click.command()
@click.argument("image", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("prompts", nargs=-1, required=True)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("wherein-masks"),
    show_default=True,
    help="Folder for <stem>.<prompt>.mask.png and .overlay.jpg (`search --mask` adds <rank>-).",
)
@click.option(
    "--no-files", is_flag=True, help="Only print the numbers; write no mask or overlay files."
)
@click.option(
    "--full-size-overlays",
    is_flag=True,
    help="Overlays at the photo's size (slower) instead of a preview of at most 1024 px.",
)
@models_option
@json_option
@friendly_errors
def mask(image, prompts, out_dir, no_files, full_size_overlays, models_dir, as_json):
    """Mask each PROMPT on IMAGE: area, box of the largest region, score, files written.

    One vision pass serves all prompts. Boxes are [x0, y0, x1, y1] in the image's
    pixels as a viewer shows it (EXIF rotation applied), x1/y1 exclusive.
    """
    from wherein.indexer import paths as P
    from wherein.indexer.models.clipseg import ClipSeg
    from wherein.indexer.models.modeldir import ModelDir
    from wherein.search.localize.masking import mask_file

    models = ModelDir(P.models_dir(models_dir))
    if models.is_standin and not as_json:
        click.secho(
            f"Using STAND-IN models from {models.root} (they only know colours).",
            fg="yellow",
            err=True,
        )
    model = ClipSeg.load(models)
    results = mask_file(
        model,
        image,
        list(prompts),
        None if no_files else out_dir,
        full_size_overlays=full_size_overlays,
    )
    rows = []
    for res, files in results:
        row = res.summary()
        row["mask_path"] = files.get("mask")
        row["overlay_path"] = files.get("overlay")
        rows.append(row)
    if as_json:
        echo_json({"image": str(image), "standin": models.is_standin, "masks": rows})
        return
    w, h = results[0][0].size
    click.echo(f"{image} ({w}x{h})")
    click.echo(
        table(
            [
                {
                    "prompt": r["prompt"],
                    "area": f"{100 * r['mask_area']:.1f}%",
                    "score": r["mask_score"],
                    "bbox": " ".join(map(str, r["bbox"]["largest"])) if r["bbox"] else "-",
                    "regions": r["regions"],
                }
                for r in rows
            ],
            ["prompt", "area", "score", "bbox", "regions"],
        )
    )
    for r in rows:
        if r["mask_path"]:
            click.echo(f"wrote {r['mask_path']}  {r['overlay_path']}")
