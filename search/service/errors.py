"""The one error for a missing optional extra: the module, the extra and the pip command.

An extra (``wherein[scale]``: Ray and pyarrow) is imported only where its feature runs, so
its absence shows up as a ModuleNotFoundError deep inside the work. ``needs_extra`` turns
that into ``MissingExtra``, which the CLI prints as one ``Error:`` line (exit 1) like any
WhereinError, and the web app can return as a message.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from wherein.schemas.errors import WhereinError

SCALE = "scale"  # Ray and pyarrow: embed, build-index, select --mask --engine ray
SCALE_MODULES = ("ray", "pyarrow")


def pip_command(extra: str) -> str:
    return f"pip install 'wherein[{extra}]'"


class MissingExtra(WhereinError):
    """A module of an optional extra is not installed."""

    def __init__(self, module: str, extra: str) -> None:
        self.module = module
        self.extra = extra
        self.pip = pip_command(extra)
        super().__init__(f"{module} is not installed: {self.pip}")


@contextmanager
def needs_extra(extra: str = SCALE, modules: tuple[str, ...] = SCALE_MODULES) -> Iterator[None]:
    """Inside: an import of one of modules (or of a submodule) that fails is MissingExtra.

    Any other missing module is a bug or a broken install, and stays a ModuleNotFoundError.
    """
    try:
        yield
    except ModuleNotFoundError as exc:
        top = (exc.name or "").split(".")[0]
        if top in modules:
            raise MissingExtra(top, extra) from None
        raise
