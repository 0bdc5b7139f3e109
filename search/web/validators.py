"""HTTP validators (RFC 9110 section 8.8 and 13): a file's ETag and Last-Modified, and the
conditions a client sends with them.

An ETag is strong: it names the indexed content (its SHA-256, checked before anything is
served) and, for a derivative, what was made of it. ``If-Range`` lets a player resume a
download only while the file is the one it began: a range is answered (206) when the
validator sent matches, and the whole file (200) when it does not, be it a date or an
ETag, or cannot be read. ``If-None-Match`` answers 304 when the client's copy is current.
"""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import format_datetime, parsedate_to_datetime


def etag(text: str) -> str:
    """A strong entity tag (quoted)."""
    return f'"{text}"'


def http_date(mtime_ns: int) -> str:
    """An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), to the second."""
    return format_datetime(datetime.fromtimestamp(mtime_ns // 1_000_000_000, UTC), usegmt=True)


def range_applies(if_range: str | None, tag: str, last_modified: str) -> bool:
    """Whether a Range header is to be answered given the request's If-Range (None: none)."""
    if if_range is None:
        return True
    value = if_range.strip()
    if value.startswith(('"', "W/")):
        return value == tag  # a weak tag never matches (strong comparison)
    try:
        sent = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return False
    return sent.tzinfo is not None and sent == parsedate_to_datetime(last_modified)


def not_modified(if_none_match: str | None, tag: str) -> bool:
    """Whether the client's copy (If-None-Match) is current: 304 then (weak comparison)."""
    if not if_none_match:
        return False
    if if_none_match.strip() == "*":
        return True
    sent = {t.strip().removeprefix("W/") for t in if_none_match.split(",")}
    return tag in sent
