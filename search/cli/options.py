"""The CLI's one vocabulary: options and helpers every wherein command shares.

An option name means the same thing on every command that has it, because it is
defined here once. Command modules import heavy libraries (torch, faiss, LiteRT)
inside their functions, never at module level: `wherein index` and `wherein
status` must start without torch, and this module imports none of them.
"""

from __future__ import annotations

import functools
import json
import os
import sqlite3
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from wherein.indexer.kinds.registry import names as kind_names
from wherein.indexer.paths import INDEX_ENV, MODELS_ENV
from wherein.schemas.errors import (
    CatalogDamaged,
    UsageError,
    WhereinError,
    is_damage,
    storage_error,
)
from wherein.search.export import formats as export_formats  # light: no numpy/pyarrow
from wherein.search.query import SORT_KEYS
from wherein.search.service.engine import ENGINES, Engine
from wherein.search.service.errors import only_with
from wherein.search.service.export import check_destination, export_keep

# What --kind chooses between: what a hit's kind says, a media kind ("photo", "video", ...).
KINDS = kind_names()

__all__ = [
    "FORMAT_HELP",
    "KINDS",
    "SORT_KEYS",
    "Progress",
    "check_export_options",
    "choose_engine",
    "echo_json",
    "engine_option",
    "export_keep",
    "export_options",
    "filter_options",
    "format_options",
    "friendly_errors",
    "gathers_selection",
    "index_option",
    "json_option",
    "kind_options",
    "models_option",
    "progress",
    "quiet_option",
    "ray_address_option",
    "raw_option",
    "standin_banner",
    "top_option",
]


# -- where things are ---------------------------------------------------------------------
def index_option(f: Callable) -> Callable:
    """``--index DIR``: the index to read or write. Unset: WHEREIN_INDEX, then the per-user dir
    (resolved by ``wherein.indexer.paths.index_dir``)."""
    return click.option(
        "--index",
        "index_dir",
        envvar=INDEX_ENV,
        show_envvar=True,
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="Index directory [default: per-user data dir].",
    )(f)


def models_option(f: Callable) -> Callable:
    """``--models DIR``: the models directory. Unset: WHEREIN_MODELS, then the per-user cache dir."""
    return click.option(
        "--models",
        "models_dir",
        envvar=MODELS_ENV,
        show_envvar=True,
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="Models directory [default: per-user cache dir].",
    )(f)


# -- what to print ------------------------------------------------------------------------
FORMAT_HELP = {
    "json": "Print JSON instead of a table.",
    "nl": "One JSON object per line.",
    "csv": "CSV with a header row.",
    "paths": "Only the paths, one per line.",
    "paths0": "Only the paths, NUL-terminated (xargs -0).",
}


def format_options(*formats: str) -> Callable[[Callable], Callable]:
    """Output switches (all of FORMAT_HELP when none named); the command gets ``fmt``.

    ``fmt`` is "table" (no switch) or the one switch given. Two switches are a usage
    error (exit 2) rather than one silently winning: ``--json --csv`` has no right answer.
    """
    names = formats or tuple(FORMAT_HELP)

    def decorate(f: Callable) -> Callable:
        @functools.wraps(f)
        def chosen_format(*args, **kwargs):
            given = [n for n in names if kwargs.pop(f"fmt_{n}", False)]
            if len(given) > 1:
                raise click.UsageError(
                    " and ".join(f"--{n}" for n in given) + " are different output formats: "
                    "choose one",
                    click.get_current_context(silent=True),
                )
            kwargs["fmt"] = given[0] if given else "table"
            return f(*args, **kwargs)

        for n in reversed(names):
            chosen_format = click.option(f"--{n}", f"fmt_{n}", is_flag=True, help=FORMAT_HELP[n])(
                chosen_format
            )
        return chosen_format

    return decorate


json_option = format_options("json")


def echo_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, default=str))


# -- exports ------------------------------------------------------------------------------
def export_options(masks: bool, rows: str = "hits") -> Callable[[Callable], Callable]:
    """``--export FILE``, ``--format NAME`` and ``--overwrite``; the command gets
    ``export_path``, ``export_fmt`` and ``overwrite``.

    Help and choices come from the format registry; masks: whether the command has
    --mask (only then are the label formats offered). rows: what one row is.
    """

    def decorate(f: Callable) -> Callable:
        f = click.option(
            "--overwrite",
            is_flag=True,
            help=export_formats.OVERWRITE_HELP,
        )(f)
        f = click.option(
            "--format",
            "export_fmt",
            type=click.Choice(export_formats.choices(masks)),
            default=None,
            help=export_formats.EXPORT_FORMAT_HELP,
        )(f)
        return click.option(
            "--export",
            "export_path",
            type=click.Path(path_type=Path),  # a folder for .yolo/.masks; - for stdout
            metavar="FILE",
            default=None,
            help=export_formats.export_help(masks, rows),
        )(f)

    return decorate


def check_export_options(
    export_path: Path | None,
    export_fmt: str | None,
    mask: bool | None,
    index_dir: str | Path | None,
    inputs: Sequence[str | Path] = (),
    overwrite: bool = False,
) -> Any:
    """The one check of --export/--format/--overwrite, before any work: the export's Format, or None.

    mask: the command's --mask flag, None when it has none. Option clashes are usage
    errors (exit 2); a destination that may not be written is an ExportError (exit 1).
    The checks are the service's (``check_destination``), made here before the index opens.
    """
    only_with(
        "--export FILE", export_path is not None, {"--format": export_fmt, "--overwrite": overwrite}
    )
    if export_path is None:
        return None
    keep = export_keep(index_dir, inputs, overwrite)
    return check_destination(export_path, export_fmt, mask, keep)


# -- shared meanings ----------------------------------------------------------------------
def quiet_option(f: Callable) -> Callable:
    return click.option("-q", "--quiet", is_flag=True, help="No progress output.")(f)


def top_option(default: int | None, help: str, *aliases: str) -> Callable[[Callable], Callable]:
    """``-k/--top N``: at most N results, best first (search, select, unique)."""
    return click.option(
        "-k",
        "--top",
        *aliases,
        "k",
        type=click.IntRange(min=1),
        default=default,
        show_default=default is not None,
        help=help,
    )


def raw_option(f: Callable) -> Callable:
    return click.option(
        "--raw",
        is_flag=True,
        help="Encode text as typed, without the prompt 'This is a photo of {}.'.",
    )(f)


def filter_options(f: Callable) -> Callable:
    """``--under``, ``--glob``, ``--taken``, ``--camera``, ``--near``: restrict to some
    folders, path patterns, dates, cameras, places (before the top-k cut)."""
    f = click.option(
        "--near",
        metavar="LAT,LON[,KM]",
        default=None,
        help="Only photos and videos whose GPS position is within KM (default 10) of LAT,LON.",
    )(f)
    f = click.option(
        "--camera",
        metavar="TEXT",
        default=None,
        help="Only photos whose EXIF camera make and model contain TEXT (case-insensitive).",
    )(f)
    f = click.option(
        "--taken",
        metavar="FROM..TO",
        default=None,
        help="Only photos and videos taken in this range of local dates, e.g. "
        "2024-06-01..2024-08-31, 2024-06, ..2023 (EXIF date or a video's creation time, else "
        "the file's mtime).",
    )(f)
    f = click.option(
        "--glob",
        "glob",
        multiple=True,
        metavar="PATTERN",
        help="Only paths matching PATTERN: '*.jpg' matches names, 'trips/*' paths; "
        "case-insensitive (repeatable: any of them).",
    )(f)
    return click.option(
        "--under",
        multiple=True,
        type=click.Path(file_okay=False, path_type=Path),
        help="Only images below this folder (repeatable: any of them).",
    )(f)


def gathers_selection(f: Callable) -> Callable:
    """The command gets the options that are fields of a Selection (-k, the thresholds, the
    filters, --kind, --frames, --sort, --reverse: whichever it has) as one dict ``selection``,
    keyed as the fields are: ``Selection(query, **selection)`` (wherein.search.selection)."""

    @functools.wraps(f)
    def gathered(*args, **kwargs):
        from dataclasses import fields

        from wherein.search.selection import Selection

        names = [x.name for x in fields(Selection) if x.name != "query"]
        kwargs["selection"] = {n: kwargs.pop(n) for n in names if n in kwargs}
        return f(*args, **kwargs)

    return gathered


def kind_options(f: Callable) -> Callable:
    """``--kind photo|video`` (before the top-k cut, like the filters) and ``--frames`` (a
    video's frames as rows of their own instead of one row per video)."""
    f = click.option(
        "--frames",
        is_flag=True,
        help="A video's matching frames as rows of their own (-k counts frames) instead of one "
        "row per video with its best frame's time and its moments.",
    )(f)
    return click.option(
        "--kind",
        type=click.Choice(KINDS),
        default=None,
        help="Only files of this media kind [default: every kind].",
    )(f)


# -- where the work runs --------------------------------------------------------------------


def engine_option(help: str) -> Callable[[Callable], Callable]:
    """``--engine local|ray``: this process, or Ray (local mode, or the cluster at
    --ray-address); the command says in ``help`` which of its steps runs there."""
    return click.option(
        "--engine",
        type=click.Choice(ENGINES),
        default="local",
        show_default=True,
        help=help,
    )


def choose_engine(engine: str, ray_address: str | None) -> Engine:
    """--engine and --ray-address as one Engine; a pair that does not go together is a usage
    error (exit 2, with the usage line, as click's own checks)."""
    try:
        return Engine.choose(engine, ray_address)
    except UsageError as exc:
        raise click.UsageError(str(exc)) from None


def ray_address_option(f: Callable) -> Callable:
    """``--ray-address HOST:PORT|auto``: the cluster to join (indexer/scale/ray_connect.py)."""
    return click.option(
        "--ray-address",
        default=None,
        help="Ray cluster to join: HOST:PORT of the head's GCS (6379 by default) or auto; run on a "
        "cluster node. Auth token as Ray finds it: RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, "
        "~/.ray/auth_token.",
    )(f)


def decode_options(f: Callable) -> Callable:
    """``--workers``, ``--threads`` and ``--no-draft``: how `index` and `embed` (its local
    engine) decode and run the image tower, the same on both."""
    f = click.option(
        "--no-draft",
        is_flag=True,
        help="Decode JPEGs at full size (slower, same result within noise).",
    )(f)
    f = click.option(
        "--threads",
        type=click.IntRange(1, 64),
        default=None,
        help="Model threads in all [default: one per core, run as up to 4 side-by-side "
        "interpreters].",
    )(f)
    return click.option(
        "--workers", type=click.IntRange(1, 64), default=None, help="Decode threads."
    )(f)


def mask_out_option(f: Callable) -> Callable:
    """``--out DIR`` of `search --mask` and `select --mask`: where the mask files go."""
    return click.option(
        "--out",
        "out_dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="Folder for <rank>-<stem>.<prompt>.mask.png and .overlay.jpg "
        "[default: ./wherein-masks].",
    )(f)


def frame_options(f: Callable) -> Callable:
    """``--frame-every SECONDS`` and ``--max-frames N``: how videos are sampled, the same for
    `index` and `embed` (defaults: indexer/video/sample.py's EVERY and MAX_FRAMES, written
    out here so that --help never imports PyAV)."""
    f = click.option(
        "--max-frames",
        type=click.IntRange(1, 100_000),
        default=600,
        show_default=True,
        help="Videos: at most this many frames per video (a long one is sampled more sparsely, "
        "over its whole length).",
    )(f)
    return click.option(
        "--frame-every",
        type=click.FloatRange(0.1, 3600),
        default=2.0,
        show_default=True,
        metavar="SECONDS",
        help="Videos: sample a frame at least this often (and at scene cuts).",
    )(f)


# -- errors -------------------------------------------------------------------------------
def friendly_errors(f: Callable) -> Callable:
    """WhereinError -> 'Error: <one line>' on stderr and its ``exit_code`` (1; 75 when locked).

    A write the disk refused (full, read-only, no permission) becomes such an error too,
    wherever it happened: SQLite, FAISS or a plain file; so does a damaged SQLite file.
    """

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        try:
            return f(*args, **kwargs)
        except WhereinError as exc:
            raise _click_error(exc) from None
        except (OSError, RuntimeError, sqlite3.Error) as exc:
            translated = storage_error(exc)
            if translated is None and is_damage(exc):
                # The catalog's own connections name the file (store/connection.py); this is the
                # net for any other SQLite file a command reads.
                translated = CatalogDamaged(f"a SQLite file of the index is damaged ({exc})")
            if translated is None:
                raise
            raise _click_error(translated) from None

    return wrapper


def _click_error(exc: WhereinError) -> click.ClickException:
    err = click.ClickException(str(exc))
    # click declares exit_code a ClassVar, but main() reads it from the instance.
    err.exit_code = exc.exit_code  # type: ignore[misc]
    return err


# -- stderr: banner and progress ----------------------------------------------------------
def standin_banner(models=None, *, space: str | None = None, index=None) -> None:
    """Say plainly that answers come from the colour-only stand-in models.

    One line on stderr in every output mode: a pipe reads stdout, so --json, --csv and
    --paths stay clean while the person at the terminal still sees it. models: the
    ModelDir a command loads; space (with index, its folder): the embedding space of the
    index a command reads without loading a model (dupes, unique, status).
    """
    from wherein.search.service.feedback import standin_note

    line = standin_note(models, space=space, index=index)
    if line is None:
        return
    click.secho(line, fg="yellow", err=True)


def _stderr_is_tty() -> bool:
    return sys.stderr.isatty()


class Progress:
    """A tqdm bar on stderr that appears only once there is something to count.

    ``reset(total)`` is called when the total becomes known (after a walk);
    a total of 0 draws nothing, so a run with nothing to do leaves no
    ``0img [00:00, ?img/s]`` line behind.
    """

    def __init__(self, enabled: bool, unit: str = "img") -> None:
        self.enabled = enabled
        self.unit = unit
        self.bar = None

    def _open(self, total: int | None) -> None:
        from tqdm import tqdm

        # disable=False: whether to draw was decided in progress(); tqdm's own default
        # would be read from TQDM_DISABLE once, at import.
        self.bar = tqdm(
            total=total, unit=self.unit, dynamic_ncols=True, file=sys.stderr, disable=False
        )

    def reset(self, total: int) -> None:
        if self.bar is not None:
            self.bar.reset(total=total)
        elif self.enabled and total > 0:
            self._open(total)

    def update(self, n: int) -> None:
        if self.bar is None and self.enabled and n > 0:
            self._open(None)
        if self.bar is not None:
            self.bar.update(n)

    def write(self, message: str) -> None:
        """A line on stderr that does not land inside the bar."""
        if self.bar is not None:
            self.bar.write(message, file=sys.stderr)
        else:
            click.echo(message, err=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def progress(quiet: bool, fmt: str, unit: str = "img") -> Progress:
    """The progress bar for a command: off with -q, with --json, when stderr is not a
    terminal, and when TQDM_DISABLE is set (as for any tqdm bar)."""
    enabled = not quiet and fmt == "table" and _stderr_is_tty()
    return Progress(enabled and not os.environ.get("TQDM_DISABLE"), unit)
