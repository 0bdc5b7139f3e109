"""What `wherein embed` reads: folders, file lists (txt/parquet of paths or URIs), tar shards.

Every source expands to items (uri, offset, length): a whole file has offset -1;
a member of an uncompressed (webdataset-style) tar is read by seeking to its data,
so tar members decode in parallel tasks without re-reading the archive.
Items are sorted by uri, which makes the shard assignment deterministic.
"""

from __future__ import annotations

import os
import tarfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from wherein.indexer.ingest.walk import WalkProblem, walk
from wherein.indexer.kinds.registry import kinds
from wherein.indexer.regular import MAX_PHOTO_BYTES, open_regular, read_fd, too_large
from wherein.schemas.errors import WhereinError
from wherein.schemas.locations import TAR_SEP

LIST_COLUMNS = ("uri", "url", "path", "file", "filename")
# Folders give files of every kind (a timed file's sampled frames are rows of the shards);
# tar members are named as a kind read from bytes in memory (a photo, an animation), not as
# a kind whose frames are decoded from a local file only (a video). Their content decides
# what each is (scale/records.py).


def _member_name(name: str) -> bool:
    return any((not k.timed or k.in_memory) and k.has_name(name) for k in kinds())


class SourceError(WhereinError):
    """A source cannot be listed."""


@dataclass(frozen=True, order=True)
class Item:
    uri: str
    offset: int = -1  # >= 0: tar member data starts here in the archive
    length: int = -1


def local_path(uri: str) -> str | None:
    """Absolute local path for a plain path or file:// URI; None for other schemes."""
    if "://" not in uri:
        return os.path.abspath(os.path.expanduser(uri))
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return os.path.abspath(unquote(parsed.path))
    return None


def list_items(sources: list[str], problems: list[WalkProblem] | None = None) -> list[Item]:
    items: set[Item] = set()
    for src in sources:
        path = local_path(src)
        if path is not None and os.path.isdir(path):
            items.update(Item(f.path) for f in walk([path], problems=problems))
        elif path is not None and _is_tar(path):
            items.update(tar_items(path))
        elif src.endswith((".txt", ".lst")) or src.endswith(".parquet"):
            items.update(_list_file(src, path))
        elif path is not None and os.path.isfile(path):
            items.add(Item(path))
        elif path is None:
            items.add(Item(src))  # one remote image
        else:
            raise SourceError(f"{src}: no such file or folder")
    return sorted(items)


def _is_tar(path: str) -> bool:
    return path.endswith(".tar") and os.path.isfile(path)


def tar_items(path: str) -> list[Item]:
    try:
        with tarfile.open(path, "r:") as tf:  # "r:" refuses compressed tars: they cannot be seeked
            return [
                Item(f"{path}{TAR_SEP}{m.name}", m.offset_data, m.size)
                for m in tf
                if m.isfile() and _member_name(m.name)
            ]
    except (tarfile.TarError, OSError) as exc:
        raise SourceError(
            f"{path}: cannot list tar ({exc}; only uncompressed .tar shards are supported)"
        ) from exc


def _list_file(src: str, path: str | None) -> list[Item]:
    if src.endswith(".parquet"):
        entries = _parquet_list(src, path)
    else:
        try:
            text = Path(path).read_text() if path else _read_remote(src).decode()
        except OSError as exc:
            raise SourceError(f"{src}: cannot read file list ({exc})") from exc
        entries = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    base = os.path.dirname(path) if path else ""
    out = []
    for e in entries:
        p = local_path(e)
        if p is not None and "://" not in e and not os.path.isabs(os.path.expanduser(e)):
            p = os.path.join(base, e)  # relative entries are relative to the list file
        out.append(Item(p if p is not None else e))
    return out


def _parquet_list(src: str, path: str | None) -> list[str]:
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path or src)
        col = next((c for c in LIST_COLUMNS if c in schema.names), None)
        if col is None:
            raise SourceError(
                f"{src}: file list needs one of the columns {', '.join(LIST_COLUMNS)}"
            )
        return [v for v in pq.read_table(path or src, columns=[col]).column(col).to_pylist() if v]
    except (OSError, ValueError) as exc:
        raise SourceError(f"{src}: cannot read parquet file list ({exc})") from exc


def _read_remote(uri: str) -> bytes:
    """Any URI pyarrow has a filesystem for (s3://, gs://, hdfs://, ...)."""
    from pyarrow import fs

    filesystem, p = fs.FileSystem.from_uri(uri)
    with filesystem.open_input_stream(p) as f:
        return f.read()


def read_item(item_uri: str, offset: int, length: int) -> tuple[bytes, int]:
    """(bytes, mtime_ns) of one item; mtime_ns is 0 where the source has none."""
    if offset >= 0:
        archive = item_uri.rsplit(TAR_SEP, 1)[0]
        with open(archive, "rb") as f:
            f.seek(offset)
            data = f.read(length)
            return data, os.fstat(f.fileno()).st_mtime_ns
    path = local_path(item_uri)
    if path is None:
        return _read_remote(item_uri), 0
    with open_regular(path) as (fd, st):  # a FIFO or a device is never read
        if st.st_size > MAX_PHOTO_BYTES:
            raise too_large(path, st.st_size, MAX_PHOTO_BYTES)
        return read_fd(fd, st.st_size)[: st.st_size], st.st_mtime_ns
