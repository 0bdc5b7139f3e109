"""Shared click options and output helpers for every wherein command.

Command modules import heavy libraries (torch, faiss, LiteRT) inside their
functions, never at module level: `wherein index` and `wherein status` must
start without torch.
"""

from __future__ import annotations

import functools
import json
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path

import click

from wherein.schemas.errors import WhereinError, storage_error


def index_option(f: Callable) -> Callable:
    return click.option(
        "--index",
        "index_dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="Index directory [env WHEREIN_INDEX; default: per-user data dir].",
    )(f)


def models_option(f: Callable) -> Callable:
    return click.option(
        "--models",
        "models_dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="Models directory [env WHEREIN_MODELS; default: per-user cache dir].",
    )(f)


def json_option(f: Callable) -> Callable:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")(f)


def friendly_errors(f: Callable) -> Callable:
    """WhereinError -> 'Error: <one line>' on stderr and its exit status (1; 75 when locked).

    A write the disk refused (full, read-only, no permission) becomes such an error too,
    wherever it happened: SQLite, FAISS or a plain file.
    """

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        try:
            return f(*args, **kwargs)
        except WhereinError as exc:
            raise _click_error(exc) from None
        except (OSError, RuntimeError, sqlite3.Error) as exc:
            translated = storage_error(exc)
            if translated is None:
                raise
            raise _click_error(translated) from None

    return wrapper


def _click_error(exc: WhereinError) -> click.ClickException:
    err = click.ClickException(str(exc))
    err.exit_code = exc.exit_code
    return err


def echo_json(obj) -> None:
    click.echo(json.dumps(obj, indent=2, default=str))


def is_tty() -> bool:
    return sys.stderr.isatty()


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def table(rows: list[dict], columns: list[str]) -> str:
    """An aligned plain-text table (numbers right-aligned)."""
    if not rows:
        return ""
    cells = [[_fmt(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    numeric = [
        all(isinstance(r.get(c), int | float) or r.get(c) is None for r in rows) for c in columns
    ]

    def line(vals):
        return "  ".join(
            v.rjust(w) if num else v.ljust(w) for v, w, num in zip(vals, widths, numeric)
        ).rstrip()

    return "\n".join([line(columns), line(["-" * w for w in widths])] + [line(r) for r in cells])


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.4f}"
    return str(v)
