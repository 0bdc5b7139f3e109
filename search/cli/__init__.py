"""The wherein command line: parses options and prints; the library does the work."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import click

from wherein.search.cli.common import (
    echo_json,
    friendly_errors,
    human_bytes,
    index_option,
    json_option,
    models_option,
    table,
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="wherein")
def cli() -> None:
    """Find images by what is in them, and see where in each image the match is."""


# -- index ---------------------------------------------------------------------
@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@index_option
@models_option
@click.option("--hidden", is_flag=True, help="Also index hidden files and folders.")
@click.option("--retry-skipped", is_flag=True, help="Try again files skipped in earlier runs.")
@click.option("--workers", type=click.IntRange(1, 64), default=None, help="Decode threads.")
@click.option("--threads", type=click.IntRange(1, 64), default=None, help="Model threads.")
@click.option(
    "--no-draft", is_flag=True, help="Decode JPEGs at full size (slower, same result within noise)."
)
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
@click.option(
    "--wait",
    is_flag=True,
    help="If another wherein process is writing this index, wait for it instead of exiting 75.",
)
@json_option
@friendly_errors
def index(
    paths,
    index_dir,
    models_dir,
    hidden,
    retry_skipped,
    workers,
    threads,
    no_draft,
    quiet,
    wait,
    as_json,
):
    """Index the images under PATHS (incremental: re-run any time)."""
    from wherein.indexer import paths as P
    from wherein.indexer.ingest.run import Indexer
    from wherein.indexer.models.image_tower import ImageTower
    from wherein.indexer.models.modeldir import ModelDir
    from wherein.indexer.store.index_store import IndexStore

    models = ModelDir(P.models_dir(models_dir))
    if models.is_standin and not as_json:
        click.secho(
            f"Using STAND-IN models from {models.root} (they only know colours).",
            fg="yellow",
            err=True,
        )
    tower = ImageTower.from_models(models, threads)
    with IndexStore.open(
        P.index_dir(index_dir),
        write=True,
        create=True,
        wait=wait,
        on_wait=lambda line: click.echo(line, err=True),
    ) as store:
        indexer = Indexer(store, tower, workers=workers, draft=not no_draft)
        bar = _progress(quiet or as_json)
        stats = indexer.run(
            list(paths),
            include_hidden=hidden,
            retry_skipped=retry_skipped,
            progress=bar.update,
            on_total=bar.reset,
        )
        bar.close()
        total = store.catalog.count_embedded()
    result = {
        "images": total,
        "embedded": stats.embedded,
        "unchanged": stats.unchanged,
        "moved": stats.moved,
        "copied": stats.copied,
        "touched": stats.touched,
        "deleted": stats.deleted,
        "skipped": stats.skipped,
        "skipped_earlier": stats.skipped_known,
        "invalidated": stats.invalidated,
        "seconds": round(stats.seconds, 2),
        "images_per_second": round(stats.images_per_second, 2),
        "interrupted": stats.interrupted,
        "problems": [{"path": p.path, "reason": p.reason} for p in stats.problems],
    }
    if as_json:
        echo_json(result)
    else:
        if stats.invalidated:
            click.echo(f"model changed: {stats.invalidated} old vectors dropped and re-embedded")
        click.echo(
            f"{total} images indexed: {stats.embedded} embedded, {stats.unchanged} unchanged, "
            f"{stats.moved} moved, {stats.copied} duplicates, {stats.deleted} removed, "
            f"{stats.skipped} skipped ({stats.images_per_second:.1f} images/s)"
        )
        for p in stats.problems:
            click.echo(f"  could not read {p.path}: {p.reason}", err=True)
        if stats.skipped:
            click.echo("  see `wherein status` for skipped files and reasons")
    if stats.interrupted:
        click.echo(
            "interrupted: everything committed so far is kept; run again to resume", err=True
        )
        sys.exit(130)


class _progress:
    """tqdm bar whose total is known only after the walk."""

    def __init__(self, disabled: bool) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=0, unit="img", disable=disabled, dynamic_ncols=True, file=sys.stderr)

    def reset(self, total: int) -> None:
        self.bar.reset(total=total)

    def update(self, n: int) -> None:
        self.bar.update(n)

    def close(self) -> None:
        self.bar.close()


# -- status --------------------------------------------------------------------
@cli.command()
@index_option
@click.option("--check", is_flag=True, help="Verify catalog and vectors agree; exit 1 if not.")
@json_option
@friendly_errors
def status(index_dir, check, as_json):
    """Counts, model, index type and size, skipped files."""
    from wherein.indexer import paths as P
    from wherein.indexer.store.index_store import IndexStore
    from wherein.indexer.store.status import index_status
    from wherein.schemas.errors import IndexLocked

    d = P.index_dir(index_dir)
    try:
        store = IndexStore.open(d, write=check, load_vectors=check)
    except IndexLocked:
        if not check:
            raise
        store = IndexStore.open(d)  # a writer holds the lock: check read-only
    with store:
        report = store.check() if check else None
        info = index_status(store)
    if report is not None:
        info["check"] = {"ok": report.ok, "problems": report.problems, "repaired": report.repaired}
    if as_json:
        echo_json(info)
    else:
        vi = info["vector_index"] or {}
        click.echo(f"index      {info['index']}")
        click.echo(
            f"images     {info['images']}"
            + (f" ({info['pending']} pending)" if info["pending"] else "")
        )
        click.echo(f"model      {info['model_file']} [{info['space']}, dim {info['dim']}]")
        click.echo(
            f"vectors    {vi.get('kind', '-')} ({vi.get('factory', '-')}), {info['vectors_in_faiss']} in FAISS"
            + ("" if info["vectors_current"] else ", behind catalog (synced on next open)")
        )
        click.echo(f"disk       {human_bytes(info['disk_total_bytes'])}")
        click.echo(f"skipped    {info['skipped_count']}")
        for s in info["skipped"]:
            click.echo(f"  {s['path']}: {s['reason']}")
        if report is not None:
            for r in report.repaired:
                click.echo(f"repaired   {r}")
            for p in report.problems:
                click.echo(f"PROBLEM    {p}", err=True)
            click.echo("check      " + ("ok" if report.ok else "FAILED"))
    if report is not None and not report.ok:
        sys.exit(1)


# -- models --------------------------------------------------------------------
@cli.group()
def models() -> None:
    """Download, check and convert models."""


@models.command("pull")
@models_option
@click.option(
    "--only", type=click.Choice(["siglip2-image", "siglip2-text", "clipseg"]), multiple=True
)
@friendly_errors
def models_pull(models_dir, only):
    """Download the real models from the Hugging Face Hub (resumable)."""
    from wherein.indexer import paths as P
    from wherein.indexer.models.modeldir import pull

    root = P.models_dir(models_dir)
    for d in pull(root, list(only) or None):
        click.echo(f"ok  {d}")


@models.command("check")
@click.argument("directory", required=False, type=click.Path(file_okay=False, path_type=Path))
@models_option
@json_option
@friendly_errors
def models_check(directory, models_dir, as_json):
    """Load each model and verify its input/output contract."""
    from wherein.indexer import paths as P
    from wherein.indexer.models.check import check_models

    root = directory or P.models_dir(models_dir)
    rows, ok = check_models(root)
    if as_json:
        echo_json({"models": str(root), "ok": ok, "checks": rows})
    else:
        click.echo(table(rows, ["model", "file", "expected", "found", "status"]))
    if not ok:
        bad = next(r for r in rows if r["status"] != "ok")
        raise click.ClickException(f"{bad['file']}: {bad['found']} (expected {bad['expected']})")


# Feature commands live in their own modules; each exposes register(cli).
for _module in (
    "search",
    "mask",
    "convert",
    "serve",
    "scale",
    "curate",
    "demo",
):
    try:
        _mod = importlib.import_module(f"wherein.search.cli.{_module}")
    except ModuleNotFoundError as _exc:
        if _exc.name != f"wherein.search.cli.{_module}":
            raise
        continue
    _mod.register(cli)


def main() -> None:  # pragma: no cover
    cli()


if __name__ == "__main__":  # python -m wherein.search.cli
    cli()
