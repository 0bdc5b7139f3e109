"""`wherein mask IMAGE PROMPT...`: where in one image each prompt matches (CLIPSeg)."""

from __future__ import annotations

import re
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

_CATALOG_ID = re.compile(r"^id:(\d+)$")


def register(cli: click.Group) -> None:
    cli.add_command(mask)


@click.command()
@click.argument("image")
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
@index_option
@models_option
@json_option
@friendly_errors
def mask(image, prompts, out_dir, no_files, full_size_overlays, index_dir, models_dir, fmt):
    """Mask each PROMPT on IMAGE: area, box of the largest region, score, files written.

    IMAGE is a file, or id:N for the image with catalog id N in --index (the `id` of a
    `wherein search --json` hit). One vision pass serves all prompts, and is kept in
    the index's cache for later prompts on the same image. Boxes are
    [x0, y0, x1, y1] in the image's pixels as a viewer shows it (EXIF rotation
    applied), x1/y1 exclusive.

    \b
      wherein mask photo.jpg "the dog" "the ball"
      wherein mask id:17 sky --json
    """
    from wherein.indexer import paths as P
    from wherein.indexer.models.clipseg import ClipSeg
    from wherein.indexer.models.modeldir import ModelDir
    from wherein.search.cache.vision_store import VisionStore
    from wherein.search.localize.masking import mask_file
    from wherein.search.output import table

    image = _image_path(image, index_dir)
    models = ModelDir(P.models_dir(models_dir))
    standin_banner(models)
    model = ClipSeg.load(models)
    results = mask_file(
        model,
        image,
        list(prompts),
        None if no_files else out_dir,
        full_size_overlays=full_size_overlays,
        store=VisionStore.in_index(P.index_dir(index_dir)),
    )
    rows = []
    for res, files in results:
        row = res.summary()
        row["mask_path"] = files.get("mask")
        row["overlay_path"] = files.get("overlay")
        rows.append(row)
    if fmt == "json":
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


def _image_path(image: str, index_dir: Path | None) -> Path:
    """IMAGE as given: an existing file, else id:N looked up in the index's catalog."""
    path = Path(image).expanduser()
    if path.is_file():
        return path
    found = _CATALOG_ID.match(image)
    if found is None:
        if path.exists():
            raise click.BadParameter(f"{image}: not a file", param_hint="IMAGE")
        raise click.BadParameter(
            f"{image}: no such file (or give id:N, a catalog id in --index)", param_hint="IMAGE"
        )
    from wherein.indexer import paths as P
    from wherein.indexer.store.index_store import IndexStore
    from wherein.schemas.errors import IndexError_

    image_id = int(found.group(1))
    with IndexStore.open(P.index_dir(index_dir), load_vectors=False) as store:
        # Catalog ids are SQLite integers: a larger N is no image, not an overflow.
        row = store.catalog.rows_by_ids([image_id]).get(image_id) if image_id < 2**63 else None
        where = store.dir
    if row is None:
        raise IndexError_(f"{where}: no image with id {image_id}")
    if not Path(row["path"]).is_file():
        raise IndexError_(
            f"{row['path']} (id {image_id}) is gone; run `wherein index` on its folder"
        )
    return Path(row["path"])
