"""The one error for a missing optional extra (the module, the extra and the pip command),
and the one check of options that only apply with another (``only_with``).

An extra (``wherein[scale]``: Ray and pyarrow) is imported only where its feature runs, so
its absence shows up as a ModuleNotFoundError deep inside the work. ``needs_extra`` turns
that into ``MissingExtra``, which the CLI prints as one ``Error:`` line (exit 1) like any
WhereinError, and the web app can return as a message.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from wherein.schemas.errors import UsageError, WhereinError

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


def only_with(needed: str, present: bool, options: Mapping[str, object]) -> None:
    """A usage error when any of options (name -> value as given; None, False and empty mean
    not given) is given without ``needed``: "--out only applies with --mask"."""
    given = [name for name, value in options.items() if _given(value)]
    if present or not given:
        return
    names = given[0] if len(given) == 1 else ", ".join(given[:-1]) + " and " + given[-1]
    raise UsageError(f"{names} only appl{'ies' if len(given) == 1 else 'y'} with {needed}")


def _given(value: object) -> bool:
    if value is None or value is False:
        return False
    return not (isinstance(value, str | tuple | list) and not value)  # 0 and 0.0 are values
