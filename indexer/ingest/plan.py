"""What an indexing run does with each file: pure functions of data, no I/O, no models.

Two stages, because one decision needs the file's hash:

1. ``plan()`` compares the walk (path, size, mtime) with the catalog's rows and
   skip list. A file whose stat matches its row (which has a vector) is
   unchanged; one whose stat matches its skip entry is skipped-known; every
   other file is read (``Work``: new, or changed with the row it may replace).
   Rows under the walked roots whose file was not found are ``gone``.
2. ``route()`` decides for one read file, once its hash is known: touch (same
   bytes as its own row, new mtime), move (same bytes as a gone row: that row
   moves here, keeping its id and vector), copy (same bytes as another indexed
   file, or as one embedded earlier in this run: reuse its vector), skip
   (unreadable), later (changed while being read), resume (a video's own row whose frames
   a stopped run did not all commit: the rest are embedded), or embed.

Invariants:
- A row is deleted only if the walk read the folder holding it and the file was
  not there: rows under a root indexed separately, under a missing root or under
  an unreadable folder are kept.
- Each gone row is claimed by at most one move, so byte-identical files moved
  together each keep their own row.
- A copy's donor is a row this run cannot delete or replace before the copy is
  committed: a gone row (deleted only at the very end) or an unchanged one. Rows
  outside the walked roots are never touched by the run: the caller may offer them
  as donors (``outside_donor``) instead of loading every row of the catalog, so a
  run over one folder costs that folder, not the index.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from wherein.indexer.imaging import Prepared
from wherein.indexer.ingest.read import Unsettled
from wherein.indexer.ingest.walk import FoundFile, under_any


class Known(NamedTuple):
    """A catalog row, as the plan sees it."""

    id: int
    size: int
    mtime_ns: int
    sha256: str
    has_vector: bool
    ctime_ns: int | None = None  # None: not recorded (a row from before they were)
    inode: int | None = None
    # False: a video whose frames are not all committed yet (a run stopped mid-video): it
    # is read again, and route() resumes it
    complete: bool = True

    def same_state(self, f: FoundFile) -> bool:
        """The file as found is the one this row was read from, by its stat."""
        return (
            (self.size, self.mtime_ns) == (f.size, f.mtime_ns)
            and self.ctime_ns in (None, f.ctime_ns)
            and self.inode in (None, f.inode)
        )


class SkipEntry(NamedTuple):
    """A skip-list entry: the stat of the file when it was found unreadable."""

    size: int | None
    mtime_ns: int | None


@dataclass(frozen=True)
class Work:
    """A file to read: new (old is None), or changed since its row was written."""

    found: FoundFile
    old: Known | None = None


def no_donor(_sha256: str) -> int | None:
    """No rows outside the roots to copy from (known holds every candidate)."""
    return None


@dataclass(frozen=True)
class Plan:
    unchanged: tuple[str, ...]
    skipped_known: tuple[str, ...]
    todo: tuple[Work, ...]
    gone: Mapping[str, Known]  # path -> row whose file is gone: moved here, else deleted
    forget_skips: tuple[str, ...]  # skip entries whose file is gone
    movable: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # sha -> gone rows
    donors: Mapping[str, int] = field(default_factory=dict)  # sha -> row to copy a vector from
    # sha -> a row outside the walked roots to copy from (looked up only when needed)
    outside_donor: Callable[[str], int | None] = no_donor

    def deleted(self, claimed: Set[int]) -> list[int]:
        """Rows to delete at the end of the run: gone and not claimed by a move."""
        return [row.id for row in self.gone.values() if row.id not in claimed]


def plan(
    found: Sequence[FoundFile],
    known: Mapping[str, Known],
    skipped: Mapping[str, SkipEntry],
    roots: Sequence[str],
    unreadable: Sequence[str] = (),
    retry_skipped: bool = False,
    outside_donor: Callable[[str], int | None] = no_donor,
    verify: bool = False,
) -> Plan:
    """Stage 1: the stat-level plan.

    roots: the absolute roots that were walked; unreadable: paths the walk could
    not read (missing roots, folders without permission), under which nothing is
    considered gone. known and skipped need only hold the rows under roots (more
    is harmless); outside_donor(sha) names an embedded row outside them with those
    bytes, if the caller did not pass every row in known. verify: no file is taken as
    unchanged on its stat alone; each is read and hashed (route() then touches a row whose
    bytes are the same, and re-embeds one whose bytes changed).
    """
    unchanged: list[str] = []
    skipped_known: list[str] = []
    todo: list[Work] = []
    for f in found:
        row = known.get(f.path)
        if row is not None:
            if not verify and row.has_vector and row.complete and row.same_state(f):
                unchanged.append(f.path)
            else:
                todo.append(Work(f, row))
            continue
        skip = skipped.get(f.path)
        if (
            skip is not None
            and not retry_skipped
            and (skip.size, skip.mtime_ns)
            == (
                f.size,
                f.mtime_ns,
            )
        ):
            skipped_known.append(f.path)
            continue
        todo.append(Work(f, None))

    present = {f.path for f in found}

    def vanished(path: str) -> bool:
        return path not in present and under_any(path, roots) and not under_any(path, unreadable)

    gone = {p: row for p, row in known.items() if vanished(p)}
    movable: dict[str, list[int]] = {}
    for row in gone.values():
        if row.has_vector:  # a row without a vector is not worth moving: embed the file afresh
            movable.setdefault(row.sha256, []).append(row.id)
    changing = {w.old.id for w in todo if w.old is not None}
    donors: dict[str, int] = {}
    for row in known.values():
        if row.has_vector and row.complete and row.id not in changing:
            donors.setdefault(row.sha256, row.id)
    return Plan(
        unchanged=tuple(unchanged),
        skipped_known=tuple(skipped_known),
        todo=tuple(todo),
        gone=gone,
        forget_skips=tuple(p for p in skipped if vanished(p)),
        movable={sha: tuple(ids) for sha, ids in movable.items()},
        donors=donors,
        outside_donor=outside_donor,
    )


class Kind(StrEnum):
    EMBED = "embed"
    TOUCH = "touch"
    MOVE = "move"
    COPY = "copy"
    SKIP = "skip"
    LATER = "later"
    RESUME = "resume"  # the same bytes as its own row, a video whose frames are not all in


@dataclass(frozen=True)
class Decision:
    kind: Kind
    # touch, resume: own row; move: the gone row claimed; copy: the donor, or None for a copy of a
    # file embedded earlier in this run (its row is written with it, before this one)
    row: int | None = None
    reason: str = ""  # skip / later

    @property
    def named_row(self) -> int:
        """row, for the kinds that name one (touch, move, a copy of an indexed file)."""
        if self.row is None:
            raise AssertionError(f"a {self.kind} decision without a row")
        return self.row


def route(
    work: Work,
    read: Prepared | Unsettled,
    p: Plan,
    claimed: Set[int],
    embedding: Set[str] = frozenset(),
) -> Decision:
    """Stage 2: what to do with one read file. claimed: gone rows already moved this run
    (the caller adds a MOVE decision's row to it); embedding: hashes of files routed to
    EMBED earlier in this run (the caller keeps it), whose copies need no model run."""
    if isinstance(read, Unsettled):
        return Decision(Kind.LATER, reason=read.reason)
    old = work.old
    if read.sha256 and old is not None and not old.complete and old.sha256 == read.sha256:
        return Decision(Kind.RESUME, old.id)
    if read.sha256 and old is not None and old.has_vector and old.sha256 == read.sha256:
        return Decision(Kind.TOUCH, old.id)
    if read.sha256 and not read.error:
        mover = next((i for i in p.movable.get(read.sha256, ()) if i not in claimed), None)
        if mover is not None:
            return Decision(Kind.MOVE, mover)
    if read.error:
        return Decision(Kind.SKIP, reason=read.error)
    donor = p.donors.get(read.sha256)
    if donor is None:
        donor = p.outside_donor(read.sha256)
    if donor is not None:
        return Decision(Kind.COPY, donor)
    if read.sha256 in embedding:
        return Decision(Kind.COPY)
    return Decision(Kind.EMBED)
