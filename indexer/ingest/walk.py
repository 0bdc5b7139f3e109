"""Find the media files under the paths a user gives (indexer/kinds says which)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from wherein.indexer.kinds.registry import found_kind, reads

NOT_INDEXABLE = f"not a folder or an image file (wherein reads {reads()})"


@dataclass(frozen=True)
class FoundFile:
    path: str  # absolute, as the user reaches it (symlinks in the path kept)
    size: int
    mtime_ns: int
    # A rewrite that keeps size and mtime (a tool restoring the old time) still moves
    # ctime, and a file replaced by another one (a rename over it) has another inode.
    ctime_ns: int = 0
    inode: int = 0


@dataclass
class WalkProblem:
    path: str
    reason: str
    root: bool = False  # a path the user named could not be read at all
    ignored: bool = False  # a path the user named is neither a folder nor an image file


def walk(
    roots: Sequence[str | Path],
    include_hidden: bool = False,
    problems: list[WalkProblem] | None = None,
    kinds: tuple[str, ...] | None = None,
) -> Iterator[FoundFile]:
    """Yield media files (of these kinds' names; None: every kind) under roots, recursively, in a stable order.

    Hidden files and folders are skipped unless include_hidden. Symlinked folders
    are followed once: each real folder is entered at most once, so link loops end.
    """
    seen_dirs: set[tuple[int, int]] = set()
    seen_files: set[str] = set()
    for root in roots:
        root = os.path.abspath(os.path.expanduser(str(root)))
        try:
            st = os.stat(root)
        except OSError as exc:
            _note(problems, root, exc, root=True)
            continue
        if not os.path.isdir(root):
            if found_kind(root, kinds) is None:
                if problems is not None:
                    problems.append(WalkProblem(root, NOT_INDEXABLE, ignored=True))
            elif root not in seen_files:
                seen_files.add(root)
                yield FoundFile(root, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
            continue
        yield from _walk_dir(root, include_hidden, seen_dirs, seen_files, problems, kinds)


def ignored_root(path: str | Path) -> bool:
    """A path the user named that exists but is neither a folder nor a media file."""
    p = os.path.expanduser(str(path))
    return os.path.exists(p) and not os.path.isdir(p) and found_kind(p) is None


def _walk_dir(top, include_hidden, seen_dirs, seen_files, problems, kinds) -> Iterator[FoundFile]:
    stack = [top]
    while stack:
        d = stack.pop()
        try:
            st = os.stat(d)
        except OSError as exc:
            _note(problems, d, exc, root=d == top)
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen_dirs:
            continue
        seen_dirs.add(key)
        try:
            with os.scandir(d) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            _note(problems, d, exc, root=d == top)
            continue
        subdirs = []
        for e in entries:
            if not include_hidden and e.name.startswith("."):
                continue
            try:
                if e.is_dir(follow_symlinks=True):
                    subdirs.append(e.path)
                elif e.is_file(follow_symlinks=True) and found_kind(e.path, kinds):
                    if e.path in seen_files:
                        continue
                    seen_files.add(e.path)
                    est = e.stat(follow_symlinks=True)
                    yield FoundFile(
                        e.path, est.st_size, est.st_mtime_ns, est.st_ctime_ns, est.st_ino
                    )
            except OSError as exc:
                _note(problems, e.path, exc)
        stack.extend(reversed(subdirs))


def _note(problems: list[WalkProblem] | None, path: str, exc: OSError, root: bool = False) -> None:
    if problems is not None:
        reason = exc.strerror.lower() if exc.strerror else str(exc)
        problems.append(WalkProblem(path, reason, root))


def under_any(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)
