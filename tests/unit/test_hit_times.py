"""A hit's times: its file's time where no camera time was recorded is shown in the time zone
in force when the hit is made, also for a file whose hit was made before in another zone."""

from __future__ import annotations

import time

import pytest

from wherein.schemas.records import iso_time, taken_fields

MTIME_NS = 1_718_460_202_000_000_000  # 2024-06-15 14:03:22 UTC


@pytest.fixture()
def zone(monkeypatch):
    def set_zone(tz: str) -> None:
        monkeypatch.setenv("TZ", tz)
        time.tzset()

    yield set_zone
    monkeypatch.undo()
    time.tzset()


def test_a_files_time_follows_the_time_zone_in_force(zone):
    row = {"mtime_ns": MTIME_NS}
    seen = {}
    for tz in ("UTC", "Asia/Tokyo", "UTC", "America/New_York", "Asia/Tokyo"):
        zone(tz)
        seen.setdefault(tz, set()).add(taken_fields(row))
    assert seen["UTC"] == {("2024-06-15T14:03:22+00:00", "mtime", "2024-06-15 14:03:22")}
    assert seen["Asia/Tokyo"] == {("2024-06-15T23:03:22+09:00", "mtime", "2024-06-15 23:03:22")}
    assert seen["America/New_York"] == {
        ("2024-06-15T10:03:22-04:00", "mtime", "2024-06-15 10:03:22")
    }
    assert iso_time(MTIME_NS) == "2024-06-15T14:03:22Z"  # the catalog's mtime: UTC always
