"""The registered media kinds, and the questions the rest of wherein asks about a file.

``KIND_MODULES`` maps each kind's name to its module, which holds ``KIND`` (a
base.MediaKind of that name; imported on first use, so naming the kinds costs nothing). The
order is the order content is sniffed in: the first kind whose ``sniff`` claims a file's
content has it, so a more particular kind comes before a general one (photo, which takes
any still image, is last). Adding a kind is one module and one line here.

- ``kind_of(path)``: what a file is, by content; the name decides only where no kind
  claims the content (a damaged ``.mp4`` is a video whose probe records why it is skipped).
- ``kind_of_bytes(data)``: what bytes in hand are (a tar member, a file at a URL), by content.
- ``kind_by_name(path)``: the hint a name gives (the walk, the watcher, tar members).
- ``found_kind(path)``: the walk's test of one regular file (by name, else by content).
- ``named(name)``: the kind a catalog row, a hit or ``--kind`` names; ``timed(name)`` and
  ``plays(name)``: what that kind says (False for a name no kind has).
"""

from __future__ import annotations

import importlib
import io
import os
from functools import cache
from pathlib import Path

from wherein.indexer import regular
from wherein.indexer.kinds.base import HEAD_BYTES, MediaKind, Source

KIND_MODULES = {
    "video": "wherein.indexer.kinds.video",
    "animation": "wherein.indexer.kinds.animation",
    "photo": "wherein.indexer.kinds.photo",
}

# Files beside photos that are never media: not worth opening to sniff on every walk.
_SIDECARS = frozenset(
    [".xmp", ".json", ".aae", ".txt", ".md", ".xml", ".html", ".pdf", ".db", ".ini", ".csv"]
)


@cache
def kinds() -> tuple[MediaKind, ...]:
    """Every registered kind, in sniffing order."""
    out = tuple(importlib.import_module(m).KIND for m in KIND_MODULES.values())
    assert [k.name for k in out] == list(KIND_MODULES), "a kind's module holds another kind"
    return out


def names() -> tuple[str, ...]:
    """The kinds' names, in registry order (what --kind offers), without importing them."""
    return tuple(KIND_MODULES)


def named(name: str) -> MediaKind:
    """The kind called `name` (KeyError for none)."""
    for k in kinds():
        if k.name == name:
            return k
    raise KeyError(name)


def timed(name: str | None) -> bool:
    """Whether files of the kind called `name` yield frames at times (a hit's time and
    moments); False for None or a name no registered kind has."""
    return name in KIND_MODULES and named(name).timed


def plays(name: str | None) -> bool:
    """Whether a browser plays files of the kind called `name` itself; False for none."""
    return name in KIND_MODULES and named(name).plays


def reads() -> str:
    """The extensions wherein reads, kind by kind (for messages)."""
    return "; ".join(
        f"{k.name}s: " + ", ".join(sorted(e.lstrip(".") for e in k.extensions))
        for k in reversed(kinds())
    )


def read_head(path: str | Path) -> bytes:
    """The first bytes of a regular file (b"" for a FIFO or a device: never blocks)."""
    return regular.read_head(path, HEAD_BYTES)


def kind_by_name(path: str | Path) -> MediaKind | None:
    """The kind the extension suggests (the first registered that lists it), None: none."""
    return next((k for k in kinds() if k.has_name(path)), None)


def kind_by_content(path: Source | None, head: bytes) -> MediaKind | None:
    """The first kind whose sniff claims these bytes (None: no kind does)."""
    return next((k for k in kinds() if k.sniff(head, path)), None)


def kind_of(path: str | Path, head: bytes | None = None) -> MediaKind:
    """What the file is: by content, else by name, else the last kind (a photo, whose decode
    records why it is no image). head: its first bytes, when the caller has them."""
    if head is None:
        head = read_head(path)
    return kind_by_content(path, head) or kind_by_name(path) or kinds()[-1]


def kind_of_bytes(data: bytes) -> MediaKind:
    """What bytes read whole are (a tar member, a file at a URL: no file to open), by
    content; the last kind (a photo, whose decode says why it is no image) where none claims
    them."""
    return kind_by_content(io.BytesIO(data), data[:HEAD_BYTES]) or kinds()[-1]


def found_kind(path: str | Path, only: tuple[str, ...] | None = None) -> MediaKind | None:
    """The walk's test of one regular file: its name's kind, else (a name no kind lists and
    no known sidecar) its content's (one small read). only: the kind names that count."""
    kind = kind_by_name(path)
    if kind is None and Path(path).suffix.lower() not in _SIDECARS:
        head = read_head(path)
        kind = kind_by_content(path, head) if head else None
    if kind is None or (only is not None and kind.name not in only):
        return None
    return kind


def is_media_path(path: str | Path) -> bool:
    """A path worth a look when an event names it: a media name, or an existing file whose
    content is media."""
    return kind_by_name(path) is not None or (os.path.isfile(path) and found_kind(path) is not None)
