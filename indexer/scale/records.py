"""Read one shard item and prepare it exactly as `wherein index` does (imaging.prepare).

A local file of a timed kind (a video; its kind by content, indexer/kinds) is hashed and
probed as the index run's loader does (ingest/read.load_timed); its frames are sampled
afterwards, by the engine. An item read from an offset (a tar member) or a remote store is
what its content is too: a photo, or a file of a timed kind that is sampled in memory (an
animated GIF: probed here, its bytes kept for the engine to sample); a kind read only from
a file (a video) is a failed item that says so.
"""

from __future__ import annotations

import hashlib
import io
import os

from wherein.indexer.imaging import JPEG_DRAFT, Prepared, read_error
from wherein.indexer.ingest.read import Unsettled, load_timed, probed
from wherein.indexer.ingest.walk import FoundFile
from wherein.indexer.kinds.base import HEAD_BYTES, MediaKind
from wherein.indexer.kinds.registry import kind_by_name, kind_of, kind_of_bytes
from wherein.indexer.regions import Tiling
from wherein.indexer.scale.sources import local_path, read_item
from wherein.schemas.models import ImageInput


def _timed(path: str, kind: MediaKind) -> Prepared:
    try:
        st = os.stat(path)
    except OSError as exc:
        return Prepared(error=read_error(exc))
    res = load_timed(FoundFile(path, st.st_size, st.st_mtime_ns), kind)
    if isinstance(res, Unsettled):  # no later run sees it again: the item fails, with why
        return Prepared(size=st.st_size, mtime_ns=st.st_mtime_ns, error=res.reason)
    return res


def load(
    uri: str,
    spec: ImageInput,
    offset: int = -1,
    length: int = -1,
    draft: bool = JPEG_DRAFT,
    tiling: Tiling | None = None,
) -> Prepared:
    """A photo decoded and preprocessed (tiling: and a large one cut into regions, as the
    index run's loader does); a timed file probed (res.video set, its frames not read)."""
    path = local_path(uri) if offset < 0 else None
    if path is not None and ((hint := kind_by_name(path)) is None or hint.timed):
        kind = kind_of(path)
        if kind.timed:
            return _timed(path, kind)
    try:
        data, mtime_ns = read_item(uri, offset, length)
    except OSError as exc:
        return Prepared(error=read_error(exc))
    except Exception as exc:  # remote filesystems raise their own types
        return Prepared(error=f"cannot read: {type(exc).__name__}: {exc}")
    if path is None:  # a tar member or a remote file: no file to open, its bytes in hand
        return _in_memory(data, spec, draft, mtime_ns, tiling)
    kind = kind_of(path, data[:HEAD_BYTES])
    if kind.timed:  # a clip or an animation named as a photo
        return _timed(path, kind)
    return kind.prepare(data, spec, draft, mtime_ns, tiling)


def _in_memory(
    data: bytes, spec: ImageInput, draft: bool, mtime_ns: int, tiling: Tiling | None = None
) -> Prepared:
    """Bytes with no local file (a tar member, a remote file), by their content."""
    kind = kind_of_bytes(data)
    if not kind.timed:
        return kind.prepare(data, spec, draft, mtime_ns, tiling)
    sha256 = hashlib.sha256(data).hexdigest()
    res = Prepared(size=len(data), mtime_ns=mtime_ns, sha256=sha256, kind=kind.name)
    if not kind.in_memory:
        res.error = (
            f"{kind.a} in a tar shard or at a URL is not sampled: its frames are read from "
            "a file (embed the file itself)"
        )
        return res
    res.data = data
    return probed(res, kind, io.BytesIO(data))
