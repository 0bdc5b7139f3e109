"""`wherein mask IMAGE PROMPT...`: where in one image, or one moment of a video, each prompt
matches (CLIPSeg). The workflow is wherein.search.service.mask; this module parses and prints."""

from __future__ import annotations

from pathlib import Path

import click

from wherein.search.cli.options import (
    echo_json,
    friendly_errors,
    index_option,
    json_option,
    models_option,
    standin_banner,
)


def register(cli: click.Group) -> None:
    cli.add_command(mask)


@click.command()
@click.argument("image")
@click.argument("prompts", nargs=-1, required=True)
@click.option(
    "--time",
    "time",
    type=float,
    default=None,
    metavar="SECONDS",
    help="For a video: mask the frame a player shows at this time (needed for a video, "
    "refused for a photo).",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("wherein-masks"),
    show_default=True,
    help="Folder for <stem>.<prompt>.mask.png and .overlay.jpg (<name>@<time>s.<prompt>... "
    "for a video's frame; `search --mask` adds <rank>-).",
)
@click.option(
    "--no-files", is_flag=True, help="Only print the numbers; write no mask or overlay files."
)
@click.option(
    "--full-size-overlays",
    is_flag=True,
    help="Overlays at the photo's size (slower) instead of a preview of at most 1024 px.",
)
@index_option
@models_option
@json_option
@friendly_errors
def mask(image, prompts, time, out_dir, no_files, full_size_overlays, index_dir, models_dir, fmt):
    """Mask each PROMPT on IMAGE: area, box of the largest region, score, files written.

    IMAGE is a file (a photo, or a video with --time), or id:N for the file with catalog
    id N in --index (the `id` of a `wherein search --json` hit). One vision pass serves all
    prompts, and is kept in the index's cache for later prompts on the same image or
    frame. Boxes are [x0, y0, x1, y1] in the image's pixels as a viewer shows it (EXIF
    rotation, or a video's display rotation, applied), x1/y1 exclusive.

    \b
      wherein mask photo.jpg "the dog" "the ball"
      wherein mask clip.mp4 --time 12.5 "the dog"
      wherein mask id:17 sky --json
    """
    from wherein.schemas.errors import UsageError
    from wherein.search.output import table
    from wherein.search.service.mask import mask_image

    try:
        run = mask_image(
            image,
            prompts,
            None if no_files else out_dir,
            time=time,
            full_size_overlays=full_size_overlays,
            index_dir=index_dir,
            models_dir=models_dir,
            on_models=standin_banner,
        )
    except UsageError as exc:  # click's form: the usage line and the --help hint
        raise click.UsageError(str(exc)) from None
    if fmt == "json":
        echo_json(run.to_dict())
        return
    w, h = run.size
    at = f" at {run.time:g} s" if run.time is not None else ""
    click.echo(f"{run.image}{at} ({w}x{h})")
    click.echo(
        table(
            [
                {
                    "prompt": m.prompt,
                    "area": f"{100 * m.mask_area:.1f}%",
                    "score": m.mask_score,
                    "bbox": " ".join(map(str, m.bbox["largest"])) if m.bbox else "-",
                    "regions": m.regions,
                }
                for m in run.masks
            ],
            ["prompt", "area", "score", "bbox", "regions"],
        )
    )
    for m in run.masks:
        if m.mask_path:
            click.echo(f"wrote {m.mask_path}  {m.overlay_path}")
