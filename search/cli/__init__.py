"""The wherein command line: parses options and prints; the library does the work.

One module per feature, each with ``register(cli)``; the options they share
(and what each means) live in ``options.py``.
"""

from __future__ import annotations

import contextlib
import faulthandler
import importlib
import io
import sys

import click

# Registration order is the order of `wherein --help`'s command list.
COMMAND_MODULES = (
    "index",  # index, status
    "search",
    "mask",
    "curate",  # select, label, dupes, unique
    "serve",
    "scale",  # embed, build-index
    "models",  # models pull | check | convert | verify
    "optimize",  # models optimize (joins the models group above)
    "demo",
)


class WhereinGroup(click.Group):
    """Commands listed in registration order; Ctrl-C exits 130 (128 + SIGINT), as a shell does."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)

    def invoke(self, ctx: click.Context):
        _names_out_as_bytes()
        _native_crashes_show_python_stack()
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            click.echo("\ninterrupted", err=True)
            ctx.exit(130)


def _native_crashes_show_python_stack() -> None:
    """A crash in native code (LiteRT, FAISS, a decoder) prints where Python was, not nothing.

    Written to the process's own stderr (fd 2), which stays valid when sys.stderr is
    replaced (click's test runner); costs nothing until a fatal signal.
    """
    if not faulthandler.is_enabled() and sys.__stderr__ is not None:
        with contextlib.suppress(ValueError, OSError):  # no usable fd 2 (a closed stderr)
            faulthandler.enable(file=sys.__stderr__)


def _names_out_as_bytes() -> None:
    """Print a file name's undecodable bytes as those bytes, as ls and find do.

    Python reads such a name as lone surrogates (os.fsdecode); a strict UTF-8 stdout would
    raise on them. With surrogateescape a path printed, or passed on by --paths0 | xargs -0,
    is the file's real name.
    """
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
            stream.reconfigure(errors="surrogateescape")


@click.group(cls=WhereinGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="wherein")
def cli() -> None:
    """Find images by what is in them, and see where in each image the match is."""


for _module in COMMAND_MODULES:
    importlib.import_module(f"wherein.search.cli.{_module}").register(cli)


def main() -> None:  # pragma: no cover
    cli()


if __name__ == "__main__":  # python -m wherein.search.cli
    cli()
