"""Query algebra: several text and image terms, each with a sign and a weight.

Syntax of a query string (the CLI joins its QUERY arguments with spaces)::

    beach                      one text term
    red car - people           "red car" minus "people"  (operators are a lone + or -
                               between spaces, so "t-shirt" stays one word)
    beach:2 + sunset - people  weights: a trailing :NUMBER on a term (default 1),
                               from 0.01 to 100; anything else (0, inf, nan, 1e309)
                               is an error, never a silent empty result
    - people                   a leading operator applies to the first term

Images join a query through ``Query.like(path)`` / ``Query.unlike(path)`` (CLI:
``--like PHOTO[:W]``, ``--unlike PHOTO[:W]``); extra text terms through
``--add TEXT[:W]`` / ``--subtract TEXT[:W]``, as in rclip.

The query vector is ``normalise(sum(sign * weight * unit_embedding(term)))``;
hits are ranked by its cosine with each image (``score``). The calibrated
``probability`` uses the query's *text part* only: the same sum over text terms,
re-normalised, through SigLIP's sigmoid. For a single text term that is exactly
SigLIP's probability; for combinations it is the same formula applied to the
combined direction (comparable within a query, a heuristic across queries).
Image terms are left out because image-to-image cosines are on another scale
(they would push every probability to 1); a query of images only has no
probability (None).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from wherein.schemas.errors import UsageError


class QueryError(UsageError):
    """The query cannot be parsed or has nothing to search for (a usage error: exit 2)."""


# Orders of the hits after the cut (api.Searcher.search). Here, not in api, so the CLI
# can offer them without importing numpy/faiss.
SORT_KEYS = ("score", "date", "taken", "path", "size")


_WEIGHT = re.compile(r"^(?P<body>.*?):(?P<w>[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?)$", re.S)
# What float() would also read as a number: a weight typed as inf/nan is a mistake, not text.
_NOT_A_WEIGHT = re.compile(r":[+-]?(inf|infinity|nan)$", re.I)
# Weights are relative (the sum is normalised): beyond 100:1 one term is all there is, and
# out here a typo (1e309 -> inf, 1e-400 -> 0) would silently empty or flip the query.
MIN_WEIGHT = 0.01
MAX_WEIGHT = 100.0


@dataclass(frozen=True)
class Term:
    kind: str  # "text" | "image" (a file) | "indexed" (a catalog id: its stored vector)
    value: str  # the text, the image path, or the catalog id
    weight: float = 1.0  # signed: negative terms push results away

    def __post_init__(self) -> None:
        if self.kind not in ("text", "image", "indexed"):
            raise QueryError(f"unknown term kind {self.kind!r}")
        if not self.value.strip():
            raise QueryError("empty query term")
        if self.kind == "text" and not is_text(self.value):
            raise QueryError(f"{self.value!r}: not text (it holds bytes that are not UTF-8)")
        w = abs(self.weight)
        if not (math.isfinite(self.weight) and MIN_WEIGHT <= w <= MAX_WEIGHT):
            raise QueryError(
                f"weight {self.weight!r} of {self.value[:60]!r}: use a number from "
                f"{MIN_WEIGHT:g} to {MAX_WEIGHT:g} (put - before a term to subtract it)"
            )

    def describe(self) -> str:
        sign = "-" if self.weight < 0 else "+"
        w = abs(self.weight)
        body = {"image": f"@{self.value}", "indexed": f"@#{self.value}"}.get(
            self.kind, repr(self.value)
        )
        return f"{sign} {body}" + ("" if w == 1 else f":{w:g}")


@dataclass(frozen=True)
class Query:
    terms: tuple[Term, ...] = field(default_factory=tuple)

    # -- building -----------------------------------------------------------
    @classmethod
    def parse(cls, text: str | Sequence[str]) -> Query:
        """Parse the algebra above from one string or CLI words (joined with spaces)."""
        if not isinstance(text, str):
            text = " ".join(text)
        return cls(tuple(_parse_terms(text)))

    @classmethod
    def build(
        cls,
        expression: str | Sequence[str] | None = None,
        add: Iterable[str] = (),
        subtract: Iterable[str] = (),
        like: Iterable[str | Path] = (),
        unlike: Iterable[str | Path] = (),
    ) -> Query:
        """The CLI's way in: an expression plus --add/--subtract/--like/--unlike values."""
        q = cls.parse(expression) if expression else cls()
        for t in add:
            q = q.plus(*_split_weight(t))
        for t in subtract:
            q = q.minus(*_split_weight(t))
        for p in like:
            q = q.like(*_split_image_weight(str(p)))
        for p in unlike:
            q = q.unlike(*_split_image_weight(str(p)))
        return q

    def plus(self, text: str, weight: float = 1.0) -> Query:
        return Query((*self.terms, Term("text", text.strip(), abs(weight))))

    def minus(self, text: str, weight: float = 1.0) -> Query:
        return Query((*self.terms, Term("text", text.strip(), -abs(weight))))

    def like(self, path: str | Path, weight: float = 1.0) -> Query:
        return Query((*self.terms, Term("image", str(path), abs(weight))))

    def unlike(self, path: str | Path, weight: float = 1.0) -> Query:
        return Query((*self.terms, Term("image", str(path), -abs(weight))))

    def like_id(self, file_id: int, weight: float = 1.0) -> Query:
        """More like an indexed image, by its stored vector (no file access)."""
        return Query((*self.terms, Term("indexed", str(int(file_id)), weight)))

    # -- reading ------------------------------------------------------------
    @property
    def text_terms(self) -> tuple[Term, ...]:
        return tuple(t for t in self.terms if t.kind == "text")

    @property
    def image_terms(self) -> tuple[Term, ...]:
        return tuple(t for t in self.terms if t.kind != "text")

    @property
    def has_text(self) -> bool:
        return bool(self.text_terms)

    def mask_prompt(self, override: str | None = None) -> str | None:
        """What a mask of this query's hits segments: `override` (--mask-prompt) when given,
        else the first text term the query asks for (a '-' term is what it does not want)."""
        return override or next((t.value for t in self.text_terms if t.weight > 0), None)

    def validate(self) -> None:
        if not self.terms:
            raise QueryError("empty query: give some text, or an image with --like")
        if not any(t.weight > 0 for t in self.terms):
            raise QueryError(
                "the query needs at least one positive term (only '-' terms were given)"
            )

    def __str__(self) -> str:
        s = " ".join(t.describe() for t in self.terms)
        return s[2:] if s.startswith("+ ") else s


def is_text(s: str) -> bool:
    """Whether s is text a model can read: no lone surrogates (undecodable bytes in argv)."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _parse_terms(text: str) -> list[Term]:
    """Words between lone '+'/'-' words form one term; a term's sign is the operator before it."""
    terms: list[Term] = []
    words: list[str] = []
    sign: float | None = None  # operator seen since the last term
    for word in text.split():
        if word in ("+", "-"):
            if words:
                terms.append(_text_term(" ".join(words), sign or 1.0))
                words, sign = [], None
            elif sign is not None:
                raise QueryError(f"two operators in a row in {text!r}")
            sign = -1.0 if word == "-" else 1.0
        else:
            words.append(word)
    if words:
        terms.append(_text_term(" ".join(words), sign or 1.0))
    elif sign is not None:
        raise QueryError(f"query ends with an operator: {text!r}")
    return terms


def _text_term(chunk: str, sign: float) -> Term:
    body, weight = _split_weight(chunk)
    if len(body) >= 2 and body[0] == body[-1] and body[0] in "\"'":
        body = body[1:-1].strip()  # quotes kept by a shell or typed in a web form
    return Term("text", body, sign * weight)


def _split_weight(s: str) -> tuple[str, float]:
    """'beach:2' -> ('beach', 2.0); 'beach' -> ('beach', 1.0)."""
    m = _WEIGHT.match(s.strip())
    if not m or not m.group("body").strip():
        if _NOT_A_WEIGHT.search(s.strip()):
            raise QueryError(
                f"weight must be a number from {MIN_WEIGHT:g} to {MAX_WEIGHT:g} in {s.strip()!r}"
            )
        return s.strip(), 1.0
    w = float(m.group("w"))
    if w <= 0:
        raise QueryError(f"weight must be positive in {s!r} (use - to subtract)")
    if not MIN_WEIGHT <= w <= MAX_WEIGHT:
        raise QueryError(
            f"weight must be a number from {MIN_WEIGHT:g} to {MAX_WEIGHT:g} in {s.strip()!r}"
        )
    return m.group("body").strip(), w


def _split_image_weight(s: str) -> tuple[str, float]:
    # A file literally named "x.jpg:2" (or "x.jpg:abc") wins over the weight reading.
    if _exists(s):
        return s, 1.0
    head, colon, tail = s.rpartition(":")
    if colon and not _WEIGHT.match(s.strip()):
        # "ref.jpg:abc": a weight typed wrong, not a file name (that file does not exist).
        where = "" if _exists(head) else f"no image file {s!r} or {head!r}, and "
        raise QueryError(
            f"--like/--unlike {s!r}: {where}{tail!r} after ':' is not a weight "
            f"(a number from {MIN_WEIGHT:g} to {MAX_WEIGHT:g})"
        )
    return _split_weight(s)


def _exists(path: str) -> bool:
    try:
        return Path(path).expanduser().exists()
    except (OSError, ValueError):  # a NUL byte, a name too long: not an existing file
        return False
