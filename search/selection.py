"""What a search selects, as one value: the query and every filter, threshold and cut.

    Selection("a red car", k=20, kind="video", under="~/Clips", taken="2024-06..2024-08")

`wherein search`, `wherein select` and the web app's /api/search each parse their options
into a ``Selection`` once; the search service hands it to the index, which reads nothing
else. ``check()`` is the one check of its values, made before any model loads:

- ``query``: a ``Query`` (see wherein.search.query for the algebra: text and images, with
  weights) or a string of that algebra, parsed;
- ``k``: at most k hits (default 10; unlimited when a threshold is given);
- ``min_probability``: every hit whose calibrated probability is >= P (all of them, not a
  top-k); needs a text term;
- ``min_score``: every hit whose cosine with the full query is >= S;
- ``under`` / ``glob``: only files below these folders / matching these patterns (a
  pattern without "/" matches the file name, one with "/" the path; case-insensitive);
- ``taken`` / ``camera`` / ``near``: metadata filters on photos and videos alike: a range
  of local dates ("2024-06-01..2024-08-31", open ends allowed; EXIF or the video's creation
  time, else the file's mtime), a substring of the camera make and model, a point and radius
  ("48.85,2.29,5" = 5 km; the GPS position recorded in the file). See
  wherein.search.photofilter;
- ``kind``: a media kind's name ("photo", "video", ...; wherein.indexer.kinds): only
  files of that kind;
- ``frames``: a video's frames as hits of their own; by default a video is one hit, its
  best frame's, with its ``duration`` and ``moments``, and ``k`` counts files, not frames;
- ``sort``: "score" (default), "date" (newest file first), "taken" (newest first by the
  taken time), "path", "size" (largest first), applied after the cut; ``reverse`` flips it.
  ``rank`` stays the relevance rank.

Every filter narrows the search before the top-k cut (a FAISS IDSelector), so a filtered
search still returns k hits when k files match.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from wherein.indexer.kinds.registry import names as kind_names
from wherein.search.photofilter import Near, PhotoFilter, TakenRange
from wherein.search.query import SORT_KEYS, Query, QueryError

# What `kind` chooses between: what a hit's kind says, a media kind ("photo", "video", ...).
KINDS = kind_names()

Folders = str | Path | Sequence[str | Path] | None  # one folder or several
Patterns = str | Sequence[str] | None


@dataclass(frozen=True, kw_only=True)
class Selection:
    """The query and what narrows, cuts and orders its hits (see the module docstring).

    A string query is parsed, and one folder or pattern becomes a tuple of one, on
    construction; so ``query`` is always a ``Query``, ``under`` a tuple of strings and
    ``glob`` a tuple."""

    query: Query | str = field(kw_only=False)
    k: int | None = None
    min_probability: float | None = None
    min_score: float | None = None
    under: Folders = ()
    glob: Patterns = ()
    taken: str | TakenRange | None = None
    camera: str | None = None
    near: str | Near | tuple | None = None
    kind: str | None = None
    frames: bool = False
    sort: str = "score"
    reverse: bool = False

    def __post_init__(self) -> None:
        q = self.query
        if not isinstance(q, Query):
            q = Query.parse(q)
        object.__setattr__(self, "query", q)
        object.__setattr__(self, "under", tuple(os.fspath(u) for u in _tuple(self.under)))
        object.__setattr__(self, "glob", _tuple(self.glob))

    @property
    def parsed(self) -> Query:
        """The query (always a Query once constructed; typed so for the checker)."""
        assert isinstance(self.query, Query)
        return self.query

    @property
    def folders(self) -> tuple[str, ...]:
        return _tuple(self.under)

    @property
    def patterns(self) -> tuple[str, ...]:
        return _tuple(self.glob)

    def photo_filter(self) -> PhotoFilter | None:
        """taken/camera/near as one filter (None: none given); a value that does not parse
        is a usage error."""
        return PhotoFilter.parse(self.taken, self.camera, self.near)

    def check(self) -> Self:
        """The one check of every value, before any model loads; returns self."""
        q = self.parsed
        q.validate()
        self.photo_filter()
        if self.kind is not None and self.kind not in KINDS:
            raise QueryError(f"unknown kind {self.kind!r} (choose from {', '.join(KINDS)})")
        for pattern in self.patterns:
            check_glob(pattern)
        if self.sort not in SORT_KEYS:
            raise QueryError(f"unknown sort key {self.sort!r} (choose from {', '.join(SORT_KEYS)})")
        if self.k is not None and self.k < 1:
            raise QueryError("k must be at least 1")
        if self.min_probability is not None and not 0.0 < self.min_probability < 1.0:
            raise QueryError("--min-probability must be between 0 and 1 (exclusive)")
        if self.min_score is not None and not -1.0 <= self.min_score <= 1.0:
            raise QueryError("--min-score is a cosine: between -1 and 1")
        if self.min_probability is not None and not q.has_text:
            raise QueryError(
                "--min-probability needs a text term (image-only queries have no calibrated "
                "probability); use --min-score"
            )
        return self


def check_glob(pattern: str) -> None:
    """fnmatch reads a '[' that is never closed as a literal '[': a pattern typed as '['
    would match nothing, silently. Refuse it (its own way to match a '[' is '[[]')."""
    i, n = 0, len(pattern)
    while i < n:
        c, i = pattern[i], i + 1
        if c != "[":
            continue
        j = i + (i < n and pattern[i] == "!")
        j += j < n and pattern[j] == "]"  # a ']' first in a set is a member, not its end
        j = pattern.find("]", j)
        if j < 0:
            raise QueryError(
                f"--glob {pattern!r}: a '[' starts a set of characters that is never closed "
                "with ']' (to match a '[' itself, write [[])"
            )
        i = j + 1


def _tuple(v: Any) -> tuple:
    """One value or several (None and empty values dropped) as a tuple."""
    if v is None:
        return ()
    if isinstance(v, str | Path):
        return (v,) if v else ()
    return tuple(x for x in v if x)
