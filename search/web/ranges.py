"""HTTP byte ranges (RFC 9110 section 14) for playing a video: a player asks for the first
bytes, seeks by asking for a middle range, and reads an MP4's index from the end.

One range per request is answered (206 with Content-Range); a header this module cannot
read, or one asking for several ranges, is ignored and the whole file is sent (200),
as the RFC lets a server do. A range that starts past the end is unsatisfiable (416).
A header of any length is read: positions may carry leading zeros, and one of more
digits than any size is past the end.
"""

from __future__ import annotations

import re

from wherein.schemas.errors import WhereinError

_ONE = re.compile(r"bytes=(\d*)-(\d*)")
MAX_DIGITS = 20  # more than any file's size (2**64 has 20 digits)


class Unsatisfiable(WhereinError):
    """No byte of the range lies in the file (HTTP 416, Content-Range: bytes */SIZE)."""

    def __init__(self, size: int) -> None:
        super().__init__(f"range: the file has {size} bytes; ask for a range inside it")
        self.size = size


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """(first, last) byte, both inclusive, of the one range the Range header asks for, cut
    to the file's size; None: send the whole file. Unsatisfiable when it starts past the end
    (or asks for the last 0 bytes)."""
    if not header:
        return None
    m = _ONE.fullmatch(header.strip().replace(" ", ""))
    if m is None:
        return None  # another unit, several ranges, or garbage: the whole file
    first, last = m.group(1), m.group(2)
    if not first:
        if not last:
            return None
        n = _number(last)  # "-N": the last N bytes
        if n == 0 or size == 0:
            raise Unsatisfiable(size)
        return max(0, size - n), size - 1
    start = _number(first)
    end = _number(last) if last else size - 1
    if last and end < start:
        return None  # invalid: ignored, as the RFC says
    if start >= size:
        raise Unsatisfiable(size)
    return start, min(end, size - 1)


def _number(digits: str) -> int:
    """A position, however many digits it is written with (leading zeros are allowed; one
    past any file's size reads as such, not as a number Python refuses to convert)."""
    digits = digits.lstrip("0") or "0"
    return int(digits) if len(digits) <= MAX_DIGITS else 10**MAX_DIGITS


def content_range(first: int, last: int, size: int) -> str:
    return f"bytes {first}-{last}/{size}"
