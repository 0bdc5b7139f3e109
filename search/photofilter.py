"""Photo filters: when a photo was taken, with which camera, and near where.

Dates are compared as the camera's local wall-clock time, the way EXIF records
it and the way people remember trips: ``--taken 2024-06-01..2024-08-31`` is
every photo whose clock read a day of that summer, wherever it was taken.
Photos without an EXIF date fall back to the file's modification time in this
machine's time zone.

Range syntax (both ends inclusive, at the precision written; either end may be
left open)::

    2024                   the whole year
    2024-06                the whole month
    2024-06-01..2024-08-31 June 1 to August 31, including all of August 31
    2024-06-01..           from June 1 on
    ..2023                 up to the end of 2023
    2024-06-01T09:00..2024-06-01T12:30

``--near LAT,LON[,KM]``: photos with GPS within KM kilometres (default 10) of
the point, great-circle distance.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np

from wherein.schemas.errors import UsageError

DEFAULT_NEAR_KM = 10.0
EARTH_RADIUS_KM = 6371.0088
_TIME = "%Y-%m-%d %H:%M:%S"  # the catalog's form of a taken time
_POINT = re.compile(
    r"^(\d{4})(?:-(\d{1,2})(?:-(\d{1,2})(?:[T ](\d{1,2})(?::(\d{2})(?::(\d{2}))?)?)?)?)?$"
)


# The length of a period named down to the day, hour, minute or second.
_STEPS = {
    3: timedelta(days=1),
    4: timedelta(hours=1),
    5: timedelta(minutes=1),
    6: timedelta(seconds=1),
}


class FilterError(UsageError):
    """A --taken, --camera or --near value that cannot be understood."""


@dataclass(frozen=True)
class TakenRange:
    """lo <= taken < hi, as "YYYY-MM-DD HH:MM:SS" text; None is open."""

    lo: str | None
    hi: str | None

    def __str__(self) -> str:
        return f"{self.lo or ''}..{self.hi or ''}"


@dataclass(frozen=True)
class Near:
    lat: float
    lon: float
    km: float = DEFAULT_NEAR_KM


def _period(text: str) -> tuple[datetime, datetime]:
    """[start, end) of the period a partial date names."""
    m = _POINT.match(text.strip())
    if not m:
        raise FilterError(
            f"{text!r} is not a date: use YYYY, YYYY-MM, YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS]"
        )
    parts = [int(g) for g in m.groups() if g is not None]
    try:
        start = datetime(*(parts + [1, 1][: max(0, 3 - len(parts))]))  # type: ignore[arg-type]
    except ValueError as exc:
        raise FilterError(f"{text!r}: {exc}") from None
    n = len(parts)
    if n == 1:
        end = start.replace(year=start.year + 1)
    elif n == 2:
        end = start.replace(year=start.year + start.month // 12, month=start.month % 12 + 1)
    else:
        end = start + _STEPS[n]
    return start, end


def parse_taken(value: str | TakenRange | tuple | None) -> TakenRange | None:
    """A --taken value as a half-open range of local times (see the module docstring)."""
    if value is None or isinstance(value, TakenRange):
        return value
    if isinstance(value, tuple):
        lo, hi = value
        return parse_taken(f"{lo or ''}..{hi or ''}")
    text = value.strip()
    if ".." not in text:
        start, end = _period(text)
        return TakenRange(start.strftime(_TIME), end.strftime(_TIME))
    left, _, right = text.partition("..")
    if not left.strip() and not right.strip():
        raise FilterError("--taken needs at least one date, e.g. 2024-06-01..2024-08-31")
    lo = _period(left)[0].strftime(_TIME) if left.strip() else None
    hi = _period(right)[1].strftime(_TIME) if right.strip() else None
    if lo is not None and hi is not None and lo >= hi:
        raise FilterError(f"--taken {text}: the range ends before it starts")
    return TakenRange(lo, hi)


def parse_near(value: str | Near | tuple | None) -> Near | None:
    """LAT,LON[,KM] (decimal degrees, kilometres) -> Near."""
    if value is None or isinstance(value, Near):
        return value
    parts = (
        list(value)
        if isinstance(value, tuple | list)
        else [p for p in re.split(r"[,\s]+", value.strip()) if p]
    )
    try:
        nums = [float(p) for p in parts]
    except ValueError:
        nums = []
    if len(nums) not in (2, 3):
        raise FilterError(f"--near {value!r}: use LAT,LON or LAT,LON,KM, e.g. 48.8584,2.2945,5")
    lat, lon = nums[0], nums[1]
    km = nums[2] if len(nums) == 3 else DEFAULT_NEAR_KM
    if not (-90 <= lat <= 90 and -180 <= lon <= 180):
        raise FilterError(f"--near {value!r}: latitude is -90..90 and longitude -180..180")
    if not (km > 0 and math.isfinite(km)):
        raise FilterError(f"--near {value!r}: the distance must be a positive number of km")
    return Near(lat, lon, km)


def haversine_km(lat: np.ndarray, lon: np.ndarray, lat0: float, lon0: float) -> np.ndarray:
    """Great-circle distance from (lat0, lon0) to each point, in km."""
    p1, p2 = np.radians(lat0), np.radians(np.asarray(lat, dtype=np.float64))
    dphi = p2 - p1
    dlmb = np.radians(np.asarray(lon, dtype=np.float64) - lon0)
    a = np.sin(dphi / 2) ** 2 + np.cos(p1) * np.cos(p2) * np.sin(dlmb / 2) ** 2
    return 2 * EARTH_RADIUS_KM * np.arcsin(np.sqrt(np.clip(a, 0, 1)))


def bounding_box(near: Near) -> tuple[float, float, float, float]:
    """(lat_lo, lat_hi, lon_lo, lon_hi) containing the circle: a cheap SQL pre-filter.

    Near a pole, or when the box would cross the antimeridian, the longitude
    range is the whole circle (the exact distance decides).
    """
    dlat = math.degrees(near.km / EARTH_RADIUS_KM)
    lat_lo, lat_hi = near.lat - dlat, near.lat + dlat
    if lat_lo <= -90 or lat_hi >= 90:
        return max(lat_lo, -90), min(lat_hi, 90), -180.0, 180.0
    dlon = math.degrees(near.km / (EARTH_RADIUS_KM * math.cos(math.radians(abs(near.lat) + dlat))))
    lon_lo, lon_hi = near.lon - dlon, near.lon + dlon
    if lon_lo < -180 or lon_hi > 180:
        return lat_lo, lat_hi, -180.0, 180.0
    return lat_lo, lat_hi, lon_lo, lon_hi


@dataclass(frozen=True)
class PhotoFilter:
    """The photo filters of one search, applied to catalog ids before the top-k cut."""

    taken: TakenRange | None = None
    camera: str | None = None
    near: Near | None = None

    @classmethod
    def parse(cls, taken=None, camera: str | None = None, near=None) -> PhotoFilter | None:
        """None when no filter is given (the search is not restricted)."""
        camera = " ".join(camera.split()) if camera else None
        f = cls(parse_taken(taken or None), camera or None, parse_near(near or None))
        return None if f == cls() else f

    def ids(self, catalog, allowed: np.ndarray | None = None) -> np.ndarray:
        """Sorted ids of embedded images passing every filter (and in allowed, if given)."""
        rows = catalog.photo_matches(
            self.taken.lo if self.taken else None,
            self.taken.hi if self.taken else None,
            self.camera,
            bounding_box(self.near) if self.near else None,
        )
        ids = np.array([r[0] for r in rows], dtype=np.int64)
        if self.near is not None and len(rows):
            lat = np.array([r[1] for r in rows], dtype=np.float64)
            lon = np.array([r[2] for r in rows], dtype=np.float64)
            ids = ids[haversine_km(lat, lon, self.near.lat, self.near.lon) <= self.near.km]
        if allowed is not None:
            ids = np.intersect1d(ids, allowed)
        return np.unique(ids)
