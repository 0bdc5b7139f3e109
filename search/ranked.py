"""A search's hits in their final order, whose catalog rows are read only for what is read.

Ranking needs only each hit's item, exact score and probability (and, where a search folds,
its file and whether it is timed): numpy and a look-up of item owners. What a ``Hit``
shows (the file's row, its photo columns, its video's duration, existence) is most of a
search's work, and a web page shows 48 of the block of 200 hits it ranks. ``Ranked`` holds
the ranked ``Entry`` of each hit and builds Hits only for the positions read (a slice: one
page), keeping those it built: the order is fixed at the search, so every page cut from it
is consistent (no hit on two pages, none skipped), however late it is read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple, overload

from wherein.schemas.records import Hit

_UNCHANGED: Mapping[str, Any] = MappingProxyType({})


class Entry(NamedTuple):
    """One hit before its catalog row is read (a tuple: a search makes 200 of them).

    item: the item found (the hit shows its row: kind, time, box); score and probability:
    its exact ones; file and timed: its file's id and whether the file's kind has frames at
    times (known where the search folds, else None and False); changes: what a fold made of
    the hit (item_id, score, probability, region, time, moments), applied over its row."""

    item: int
    score: float
    probability: float | None
    file: int | None = None
    timed: bool = False
    changes: Mapping[str, Any] = _UNCHANGED

    @property
    def ranked_score(self) -> float:
        """The score the hit ranks by: a fold's, else the item's."""
        return float(self.changes.get("score", self.score))

    @property
    def item_id(self) -> int:
        """The item the hit shows: a fold's best one, else the item found."""
        return int(self.changes.get("item_id", self.item))

    def folded(self, **changes: Any) -> Entry:
        return self._replace(changes={**self.changes, **changes})


# Builds the hits of (rank, entry) pairs, in their order; None where the entry's row is
# gone from the catalog (deleted since the search ranked it).
Build = Callable[[list[tuple[int, Entry]]], list[Hit | None]]


class Ranked(Sequence[Hit]):
    """Hits in their final order, built on demand (see the module docstring). ``len`` is
    the number of hits ranked; a hit whose file was deleted after the ranking is left out
    of what a read returns."""

    def __init__(self, ranked: list[tuple[int, Entry]], build: Build) -> None:
        self._ranked = ranked
        self._build = build
        self._built: dict[int, Hit | None] = {}

    def __len__(self) -> int:
        return len(self._ranked)

    @overload
    def __getitem__(self, index: int) -> Hit: ...

    @overload
    def __getitem__(self, index: slice) -> list[Hit]: ...

    def __getitem__(self, index: int | slice) -> Hit | list[Hit]:
        if isinstance(index, slice):
            return self._hits(range(len(self))[index])
        position = range(len(self))[index]  # IndexError past the end, as a list's
        hits = self._hits([position])
        if not hits:
            raise LookupError(f"hit {position + 1}: its file left the catalog after the search")
        return hits[0]

    def build(self, index: slice) -> None:
        """Build the hits of these positions now, on the calling thread (a search thread:
        the page it answers for), kept for the reads that follow."""
        self._hits(range(len(self))[index])

    def __iter__(self) -> Iterator[Hit]:
        return iter(self._hits(range(len(self))))

    def _hits(self, positions: Sequence[int]) -> list[Hit]:
        """The hits at these positions, those not built yet built in one go."""
        todo = [p for p in positions if p not in self._built]
        if todo:
            # Two readers of one page may both build it: the same hits, the later kept.
            built = self._build([self._ranked[p] for p in todo])
            self._built.update(zip(todo, built, strict=True))
        return [h for p in positions if (h := self._built[p]) is not None]
