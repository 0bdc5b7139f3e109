"""Replace a file atomically: readers and crashes see the old file or the new one, never half."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(path: str | Path, durable: bool = True) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; when the block succeeds it replaces ``path``.

    durable: fsync the file and its folder, so the new file survives power loss too
    (index files); caches can skip it. On any error (a full disk, Ctrl-C) the temporary
    file is removed and ``path`` is untouched: the old file, byte for byte.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        yield tmp
        if durable:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.filename in (None, str(tmp)) and exc.errno is not None:
            # Name the file the user knows, not the temporary one (now gone).
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # make the rename itself durable
        finally:
            os.close(dir_fd)


def write_atomic(path: str | Path, data: bytes, durable: bool = True) -> None:
    with atomic_path(path, durable) as tmp:
        tmp.write_bytes(data)
