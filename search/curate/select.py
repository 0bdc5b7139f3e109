"""Select every image above a calibrated probability, and materialise the selection.

Selecting is `Searcher.search(..., min_probability=P)`: a range search over the
whole index at the cosine where SigLIP's calibrated sigmoid equals P, so it
returns all matches, not a top-k (``limit`` caps it, best first).

Materialising (copy or symlink into a folder) is planned in full before any
file is touched: a missing source or an existing target (file, folder or
symlink, even a broken one) is an error and nothing is written. Files are
created with O_EXCL, so one appearing between the check and the copy is not
overwritten either; on any failure the files and folders created so far are
removed again.

Naming rules (two sources may share a basename):

- ``tree`` (default): each file keeps its path relative to the deepest folder
  that contains every selected file, e.g. /photos/2023/a.jpg and
  /photos/2024/a.jpg -> DEST/2023/a.jpg and DEST/2024/a.jpg;
- ``flat``: all files directly in DEST under their own name; when names
  collide (compared case-insensitively, for macOS/Windows file systems), every
  file of that name gets its catalog id appended: a-17.jpg, a-42.jpg.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wherein.indexer.regular import open_regular
from wherein.schemas.errors import WhereinError
from wherein.schemas.records import Hit

LAYOUTS = ("tree", "flat")
MODES = ("copy", "link")


class MaterialiseError(WhereinError):
    """The selection cannot be copied or linked without overwriting or losing files."""


@dataclass(frozen=True)
class Placement:
    source: Path
    target: Path
    id: int


def select(
    searcher, query, min_probability: float, limit: int | None = None, **selection: Any
) -> list[Hit]:
    """Every indexed file whose calibrated probability for query is >= min_probability (best
    first, at most limit); selection: more of Selection's fields (under, glob, taken, camera,
    near, kind, frames, sort; wherein.search.selection). A video is one row, at its best
    frame's time, unless frames: then each of its frames that passes."""
    return searcher.search(query, k=limit, min_probability=min_probability, **selection)


def plan(hits: Sequence[Hit], dest: str | Path, layout: str = "tree") -> list[Placement]:
    """Where each hit's file goes under dest; raises MaterialiseError before anything is written."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}")
    dest = Path(dest).expanduser().absolute()
    if dest.exists() and not dest.is_dir():
        raise MaterialiseError(f"{dest}: exists and is not a folder")
    if not hits:
        return []
    sources = [Path(os.path.abspath(h.path)) for h in hits]
    missing = [str(s) for s in sources if not s.is_file()]
    if missing:
        raise MaterialiseError(
            f"{len(missing)} selected file(s) no longer exist, e.g. {missing[0]}; "
            f"run `wherein index` on their folders, then select again (nothing was written)"
        )
    if layout == "tree":
        root = Path(os.path.commonpath([str(s.parent) for s in sources]))
        targets = [dest / s.relative_to(root) for s in sources]
    else:
        counts = Counter(s.name.casefold() for s in sources)
        targets = [
            dest / (s.name if counts[s.name.casefold()] == 1 else f"{s.stem}-{h.id}{s.suffix}")
            for s, h in zip(sources, hits, strict=True)
        ]
    placements = [Placement(s, t, h.id) for s, t, h in zip(sources, targets, hits, strict=True)]
    taken = [str(p.target) for p in placements if os.path.lexists(p.target)]
    if taken:
        raise MaterialiseError(
            f"{len(taken)} target(s) already exist, e.g. {taken[0]}; nothing was copied "
            f"or linked (choose an empty folder, or move those files away)"
        )
    return placements


def materialise(placements: Sequence[Placement], mode: str = "copy") -> list[Path]:
    """Copy (content + times) or symlink (absolute) each source to its target; all or nothing."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}")
    created_files: list[Path] = []
    created_dirs: list[Path] = []
    try:
        for p in placements:
            _make_parents(p.target.parent, created_dirs)
            if mode == "link":
                os.symlink(p.source, p.target)
                created_files.append(p.target)
            else:
                _copy_exclusive(p.source, p.target, created_files)
    except BaseException as exc:  # including Ctrl-C: leave nothing half-done
        for f in reversed(created_files):
            f.unlink(missing_ok=True)
        for d in reversed(created_dirs):
            with contextlib.suppress(OSError):
                d.rmdir()
        if isinstance(exc, FileExistsError):
            raise MaterialiseError(
                f"{exc.filename}: appeared while copying; nothing was kept"
            ) from None
        if isinstance(exc, OSError):
            raise MaterialiseError(
                f"{exc.filename or ''}: {exc.strerror or exc}; nothing was kept"
            ) from None
        raise
    return created_files


def _copy_exclusive(src: Path, dst: Path, created: list[Path]) -> None:
    with open_regular(src) as (src_fd, st):  # a FIFO or a device is never copied
        fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        created.append(dst)
        with os.fdopen(fd, "wb") as out:
            left = st.st_size  # what the file held when opened: never more
            while left > 0 and (block := os.read(src_fd, min(left, 1 << 20))):
                out.write(block)
                left -= len(block)
    shutil.copystat(src, dst)


def _make_parents(folder: Path, created: list[Path]) -> None:
    missing = []
    d = folder
    while not d.exists():
        missing.append(d)
        d = d.parent
    for d in reversed(missing):
        d.mkdir()
        created.append(d)
