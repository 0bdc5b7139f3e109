"""Where an export may go, and how its bytes get there: never over what is not ours.

- a new path, or a regular file that is an earlier wherein export of the same format
  (ours.py: the mark each format carries) or that the user lets go with --overwrite
  (an ``Overwrite`` among the guards): written to a temporary file beside it and renamed
  over it (atomic: a failed export leaves the old file byte for byte; the old
  file's permissions are kept);
- a symlink: written through to its target, which is replaced as above (the link stays);
- ``-``: standard output (file formats only: a folder of files cannot be a stream; a
  format read from its end, parquet, only when standard output is a file);
- a FIFO or a character device: written as a stream, no rename, when the format is one
  (Format.stream: csv, jsonl, coco; parquet is refused); a FIFO waits READER_WAIT_S for its
  reader, never forever, and what is opened must still be a FIFO or a device (opened
  without following a link), so nothing swapped in since the check is written over. A
  write error (a full device) is an error;
- any other regular file is refused (one line naming it and --overwrite);
- anything else that exists (a block device, a socket) is refused;
- a path inside a kept folder (the index) or equal to a kept file (an input the
  command reads), or a file the index lists (a hit or not), is refused before anything
  is written. Files and folders are compared by device and inode, not by name: a
  symlink, ``..``, a hard link or a bind mount of the index folder leads nowhere else.
  --overwrite changes none of these refusals.

A folder export (yolo, masks) needs a new or empty folder, or an earlier export's folder
of the same format that holds nothing but what its manifest (EXPORT_MANIFEST: format, and
each file's and link's name, size and time) records, unchanged; labels.py builds it beside
the target and renames it into place (the earlier one is removed only then). The frames of a one-file export (COCO over
videos) go into a folder beside it (``frames_destination``): a new one, or one that holds
nothing but the frames an earlier export wrote there (as its manifest, FRAMES_MANIFEST,
records them: name, size and time), which the new frames replace. A file that merely looks
like a frame is not one of them.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from wherein.indexer.regular import read_regular
from wherein.indexer.store.atomic import atomic_path
from wherein.search.export.errors import ExportError
from wherein.search.export.formats import STDOUT, Format


@dataclass(frozen=True)
class Keep:
    """A path no export may write: a folder (and everything below it) or one file."""

    path: Path
    what: str  # how the error names it: "the index folder", "an input of this command"


@dataclass(frozen=True)
class IndexedFiles:
    """The files an index lists, hits or not: no export ever replaces one.

    which(path, stat) names the indexed path that is this very file (same device and
    inode, whatever the path that leads there), or None."""

    which: Callable[[Path, os.stat_result], str | None]


@dataclass(frozen=True)
class Overwrite:
    """--overwrite: a regular file that is not an earlier wherein export may be replaced
    (never one that another guard keeps)."""


Guard = Keep | IndexedFiles | Overwrite


@dataclass(frozen=True)
class Destination:
    given: str  # as the user wrote it: errors and messages name it so
    kind: Literal["stdout", "stream", "file", "folder"]
    path: Path | None  # where the bytes go (a symlink's target); None for standard output

    @property
    def shown(self) -> str:
        return "standard output" if self.kind == "stdout" else self.given

    def write(self, data: bytes) -> None:
        """The whole export, one way or the other; a refused write is an ExportError."""
        try:
            if self.kind == "stdout":
                sys.stdout.flush()  # what was printed before comes first
                sys.stdout.buffer.write(data)
                sys.stdout.buffer.flush()
            elif self.kind == "stream":
                assert self.path is not None
                # No temporary file and no rename: the FIFO's reader, or the device, gets
                # the bytes; close() flushes, so a full device raises here, not later.
                with os.fdopen(_open_stream(self.given, self.path), "wb") as stream:
                    stream.write(data)
            else:
                assert self.path is not None
                with atomic_path(self.path) as tmp:
                    tmp.write_bytes(data)
                    _keep_mode(self.path, tmp)
        except OSError as exc:
            raise ExportError(f"{self.shown}: cannot write ({exc.strerror or exc})") from None


# How long an export waits for a FIFO's reader to open it (a reader started just after the
# command still gets the export; a FIFO nobody reads is one error line, not a hang).
READER_WAIT_S = 10.0


def _open_stream(given: str, path: Path) -> int:
    """A descriptor writing to the FIFO or character device at path (blocking writes)."""
    flags = os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
    deadline = time.monotonic() + READER_WAIT_S
    while True:
        try:
            fd = os.open(path, flags)
            break
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # ENXIO: a FIFO with no reader yet
                raise
            if time.monotonic() >= deadline:
                raise ExportError(
                    f"{given}: no process opened this FIFO for reading within "
                    f"{READER_WAIT_S:g} s; start its reader (e.g. `cat {given}`) first"
                ) from None
            time.sleep(0.1)
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)):
            raise ExportError(f"{given}: changed since it was checked; nothing written")
        os.set_blocking(fd, True)  # a full pipe waits for its reader, as a shell's `>` does
        return fd
    except BaseException:
        os.close(fd)
        raise


def _keep_mode(old: Path, new: Path) -> None:
    """The replacement keeps the permissions of the file it replaces (as `>` would)."""
    try:
        mode = stat.S_IMODE(os.stat(old).st_mode)
    except FileNotFoundError:
        return
    os.chmod(new, mode)


def resolve(
    dest: str | Path, fmt: Format, keep: Sequence[Guard] = (), reads: Iterable[str] = ()
) -> Destination:
    """Where an export to ``dest`` goes, or an ExportError saying why it may not.

    keep: folders and files never written (the index, the command's inputs).
    reads: more files the command reads (the hits' images); checked by name first,
    so a long list costs one comparison per path.
    """
    given = str(dest)
    if given == STDOUT:
        if fmt.layout == "folder":
            raise ExportError(
                f"a {fmt.name} export is a folder of files: it cannot go to standard output (-)"
            )
        if not fmt.stream and not _stdout_is_a_file():
            raise ExportError(
                f"a {fmt.name} file is read from its end: it cannot go to a pipe or a terminal "
                f"(-); redirect standard output to a file, or --export FILE{fmt.suffixes[0]}"
            )
        return Destination(given, "stdout", None)
    if not given.strip():
        raise ExportError("--export needs a path (or - for standard output)")
    path = Path(given).expanduser().absolute()
    # Through every symlink, the last one included: the target is what gets written.
    target = Path(os.path.realpath(path))
    _refuse_kept(given, target, keep)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise ExportError(f"{given}: cannot write there ({exc.strerror or exc})") from None
    if st is None:
        if not target.parent.is_dir():
            raise ExportError(f"{given}: folder {target.parent} does not exist")
        return Destination(given, fmt.layout, target)
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        if fmt.layout == "file":
            raise ExportError(f"{given}: is a folder (a {fmt.name} export is one file)")
        if any(target.iterdir()) and not folder_is_ours(target, fmt.name):
            raise ExportError(
                f"{given}: folder is not empty and not an earlier {fmt.name} export of wherein "
                "(or it changed since); an export writes a new folder: move it or choose "
                "another path"
            )
        return Destination(given, "folder", target)
    if fmt.layout == "folder":
        raise ExportError(f"{given}: exists and is not a folder (a {fmt.name} export is a folder)")
    if stat.S_ISREG(mode):
        _refuse_inputs(given, path, target, reads)
        _refuse_indexed(given, target, st, keep)
        _refuse_foreign(given, path, target, fmt, keep)
        return Destination(given, "file", target)
    if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode):
        if not fmt.stream:
            what = "a FIFO" if stat.S_ISFIFO(mode) else "a character device"
            raise ExportError(
                f"{given}: is {what}, and a {fmt.name} file is read from its end, so it cannot "
                f"be streamed: export to a FILE{fmt.suffixes[0]}, or to csv or jsonl"
            )
        return Destination(given, "stream", target)
    what = (
        "block device"
        if stat.S_ISBLK(mode)
        else "socket"
        if stat.S_ISSOCK(mode)
        else "special file"
    )
    raise ExportError(
        f"{given}: is a {what}; an export goes to a file, a FIFO, a character device "
        "or - (standard output)"
    )


# What a frames folder's export wrote there: name -> [size, mtime_ns] of each frame.
FRAMES_MANIFEST = ".wherein-frames.json"
_MANIFEST_LIMIT = 64 << 20


def write_frames_manifest(folder: Path) -> None:
    """Record the frames in folder (an export's, before it is renamed into place): a later
    export replaces the folder only while it holds these files, unchanged, and nothing else."""
    frames = {}
    for e in os.scandir(folder):
        if e.name != FRAMES_MANIFEST and e.is_file(follow_symlinks=False):
            st = e.stat(follow_symlinks=False)
            frames[e.name] = [st.st_size, st.st_mtime_ns]
    (folder / FRAMES_MANIFEST).write_text(json.dumps(frames, sort_keys=True))


# What a folder export wrote: {"format": name, "files": {relative path: [size, mtime_ns]}}.
EXPORT_MANIFEST = ".wherein-export.json"


def _tree(folder: Path) -> dict[str, list[int]] | None:
    """Every file and link below folder (not the manifest): path -> [size, mtime_ns];
    None when something else (a FIFO, a socket) is there."""
    found: dict[str, list[int]] = {}
    for root, dirs, files in os.walk(folder):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            full = os.path.join(root, name)
            rel = os.path.relpath(full, folder)
            if rel == EXPORT_MANIFEST:
                continue
            st = os.lstat(full)
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
                return None
            found[rel] = [st.st_size, st.st_mtime_ns]
    return found


def write_export_manifest(folder: Path, fmt: str) -> None:
    """Record what a folder export wrote (before it is renamed into place): a later export
    of fmt replaces the folder only while it holds these, unchanged, and nothing else."""
    (folder / EXPORT_MANIFEST).write_text(
        json.dumps({"format": fmt, "files": _tree(folder)}, sort_keys=True)
    )


def folder_is_ours(folder: Path, fmt: str) -> bool:
    """Whether folder is an earlier wherein export of fmt, as its manifest records it."""
    path = folder / EXPORT_MANIFEST
    if os.path.islink(path):
        return False
    try:
        data = json.loads(read_regular(path, _MANIFEST_LIMIT))
        return (
            isinstance(data, dict)
            and data.get("format") == fmt
            and isinstance(data.get("files"), dict)
            and _tree(folder) == data["files"]
        )
    except (OSError, ValueError):
        return False


def _frames_written(folder: Path) -> dict[str, list[int]]:
    """The frames an earlier export recorded in folder ({} without a readable manifest)."""
    path = folder / FRAMES_MANIFEST
    if os.path.islink(path):
        return {}
    try:
        data = json.loads(read_regular(path, _MANIFEST_LIMIT))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _written(entry: os.DirEntry, frames: dict[str, list[int]]) -> bool:
    if entry.name == FRAMES_MANIFEST:
        return True
    if not entry.is_file(follow_symlinks=False):
        return False
    st = entry.stat(follow_symlinks=False)
    return frames.get(entry.name) == [st.st_size, st.st_mtime_ns]


def frames_destination(
    given: str, folder: Path, keep: Sequence[Guard] = (), reads: Iterable[str] = ()
) -> Path:
    """The folder (its real path) a one-file export's frames go to, or an ExportError: never
    inside a kept folder, never a folder holding anything but frames (an earlier export's,
    replaced as a whole) or an image this command reads (reads: an earlier export's frames
    that were indexed since), never a file."""
    shown = f"{given}'s frames folder {folder}"
    if given == STDOUT:
        raise ExportError(
            "the frames of videos are written beside the export: --export a file, not -"
        )
    target = Path(os.path.realpath(folder.expanduser().absolute()))
    _refuse_kept(shown, target, keep)
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return target
    except OSError as exc:
        raise ExportError(f"{shown}: cannot write there ({exc.strerror or exc})") from None
    if not stat.S_ISDIR(st.st_mode):
        raise ExportError(f"{shown}: exists and is not a folder; move it or choose another path")
    try:
        written = _frames_written(target)
        foreign = sorted(e.name for e in os.scandir(target) if not _written(e, written))
    except OSError as exc:
        raise ExportError(f"{shown}: cannot read it ({exc.strerror or exc})") from None
    if foreign:
        raise ExportError(
            f"{shown}: holds {foreign[0]!r}, which no export wrote (or it changed since); an "
            "export replaces only its own frames: move it or choose another path"
        )
    names = {e.name for e in os.scandir(target)}
    for r in reads:
        if os.path.basename(r) in names and _same_file(Path(r).parent, target):
            raise ExportError(
                f"{shown}: holds {r}, an image this command reads; an export never "
                "overwrites it: choose another path"
            )
    return target


def _stdout_is_a_file() -> bool:
    """Whether standard output is a regular file (redirected with >), not a pipe or a
    terminal."""
    try:
        return stat.S_ISREG(os.fstat(sys.stdout.fileno()).st_mode)
    except (OSError, ValueError, AttributeError):  # no descriptor (a captured stdout)
        return False


def _refuse_kept(given: str, target: Path, keep: Sequence[Guard]) -> None:
    """ExportError when target (a real path, existing or not) is, or is inside, what keep
    guards: by device and inode, so that another path to the same folder or file (a bind
    mount, a hard link) is caught as well as the same path."""
    st = _stat(target)
    chain = [(s.st_dev, s.st_ino) for s in map(_stat, [target, *target.parents]) if s]
    for k in keep:
        if not isinstance(k, Keep):
            continue  # _refuse_indexed, once the inputs are checked (a hit says so)
        kept = Path(os.path.realpath(k.path.expanduser().absolute()))
        kst = _stat(kept)
        if kst is None:  # nothing there yet: its name is all there is to compare
            if kept in target.parents or target == kept:
                raise ExportError(_inside(given, k))
            continue
        kid = (kst.st_dev, kst.st_ino)
        if stat.S_ISDIR(kst.st_mode):
            if kid in chain:
                raise ExportError(_inside(given, k))
            if st is not None and st.st_nlink > 1 and _holds(kept, st):
                raise ExportError(_is(given, k))  # a hard link to one of its files
        elif st is not None and (st.st_dev, st.st_ino) == kid:
            raise ExportError(_is(given, k))


def _refuse_indexed(given: str, target: Path, st: os.stat_result, keep: Sequence[Guard]) -> None:
    for k in keep:
        indexed = k.which(target, st) if isinstance(k, IndexedFiles) else None
        if indexed is not None:
            which = "" if indexed in (given, str(target)) else f" ({indexed})"
            raise ExportError(
                f"{given}: is a file in the index{which}; an export never replaces it: "
                "choose another path"
            )


def _refuse_foreign(
    given: str, path: Path, target: Path, fmt: Format, keep: Sequence[Guard]
) -> None:
    """A regular file that is not an earlier wherein export of fmt stays, unless --overwrite
    names it itself (a symlink's target is replaced only when it is ours)."""
    from wherein.search.export.ours import is_ours

    if is_ours(target, fmt.name):
        return
    if os.path.islink(path):
        raise ExportError(
            f"{given}: is a symlink to {target}, which is not a {fmt.name} export of wherein; "
            "an export never replaces it (--overwrite neither): choose another path"
        )
    if not any(isinstance(k, Overwrite) for k in keep):
        raise ExportError(
            f"{given}: exists and is not a {fmt.name} export of wherein; an export replaces "
            "only its own: pass --overwrite to replace it, or choose another path"
        )


def _inside(given: str, k: Keep) -> str:
    return (
        f"{given}: is inside {k.what} {k.path}; an export never writes there: "
        "choose a path outside it"
    )


def _is(given: str, k: Keep) -> str:
    return f"{given}: is {k.what} {k.path}; an export never overwrites it: choose another path"


def _stat(path: Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def _holds(folder: Path, st: os.stat_result) -> bool:
    """Whether a file below folder is the file st describes (a hard link to it)."""
    for root, _, files in os.walk(folder):
        for name in files:
            other = _stat(Path(root, name))
            if other is not None and (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
                return True
    return False


def _refuse_inputs(given: str, path: Path, target: Path, reads: Iterable[str]) -> None:
    names = {path.name, target.name}
    for r in reads:
        if os.path.basename(r) in names and _same_file(Path(r), target):
            raise ExportError(
                f"{given}: is {r}, an image this command reads; an export never overwrites "
                "it: choose another path"
            )


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False
