"""A reader's catalog check, remembered while the catalog has not changed since it passed.

Every reading command checks the pages of the tables of files and items before it answers
(IntegrityChecks.rows_problem: about 2 s at 1M files). The check is skipped when the
catalog is the very file it was when a check last passed: the same device, inode, size,
modification and change times (a change time cannot be set back, so a tool that restores
the mtime after writing is still seen), and the same
-wal (size 0 and absent count as one: nothing is read from an empty log; a non-empty one by
its identity, since a writer's commits land there first). The record lives beside the
catalog (CHECKED_FILE); it is written only after a check passed and the catalog was the
same before and after it, never by a read-only open. Damage that changes no time stamp (a
disk's bit rot) is caught by the next full check: the record is trusted for MAX_AGE_S at
most.

The catalog is looked at with stat() only, never opened: SQLite's locks are POSIX locks,
which the kernel drops for the whole process when any descriptor of the file is closed, so
opening and closing the catalog beside a live connection would let another process's
checkpoint rewrite pages this process is still reading (a reader stuck on an old view).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import time
from pathlib import Path
from typing import Any

from wherein.indexer.regular import read_regular
from wherein.indexer.store.atomic import write_atomic

CHECKED_FILE = "catalog.checked.json"
MAX_AGE_S = 24 * 3600
_LIMIT = 4096


def stamp(db: Path) -> dict[str, Any] | None:
    """What identifies the catalog's content now; None when it cannot be told (then the
    check runs)."""
    try:
        st = os.stat(db)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    wal: list[int] | None = None
    try:
        w = os.stat(f"{db}-wal")
        if w.st_size:
            wal = [w.st_dev, w.st_ino, w.st_size, w.st_mtime_ns, w.st_ctime_ns]
    except FileNotFoundError:
        pass
    except OSError:
        return None
    return {
        "catalog": [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns],
        "wal": wal,
    }


def still_checked(db: Path, now: dict[str, Any] | None) -> bool:
    """Whether a check passed on exactly this catalog (now: its stamp) within MAX_AGE_S."""
    if now is None:
        return False
    try:
        record = json.loads(read_regular(db.parent / CHECKED_FILE, _LIMIT))
        age = time.time() - float(record["checked_at"])
        return record["stamp"] == now and 0 <= age < MAX_AGE_S
    except (OSError, ValueError, KeyError, TypeError):
        return False


def remember_checked(db: Path, before: dict[str, Any] | None) -> None:
    """Record that the check passed on the catalog stamped `before`, when it is still that
    file (a writer's commit during the check leaves nothing recorded). Best effort: a
    folder that cannot take the record only costs the next reader the check."""
    if before is None or stamp(db) != before:
        return
    record = json.dumps({"stamp": before, "checked_at": time.time()}).encode()
    with contextlib.suppress(OSError):  # a cache: no fsync, and a failure costs a check
        write_atomic(db.parent / CHECKED_FILE, record, durable=False)
