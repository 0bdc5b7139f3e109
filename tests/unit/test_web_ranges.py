"""HTTP byte ranges without a server: which bytes a Range header asks of a file of a size."""

from __future__ import annotations

import pytest

from wherein.search.web.ranges import Unsatisfiable, byte_range, content_range

SIZE = 1000


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("bytes=0-99", (0, 99)),  # the first bytes
        ("bytes=0-", (0, SIZE - 1)),  # a player's first request
        ("bytes=400-499", (400, 499)),  # a seek
        ("bytes=-100", (SIZE - 100, SIZE - 1)),  # an MP4 index at the end
        ("bytes=-5000", (0, SIZE - 1)),  # more than there is: all of it
        ("bytes=990-5000", (990, SIZE - 1)),  # cut to the end
        ("bytes=999-999", (999, 999)),
        (" bytes = 5 - 9 ", (5, 9)),
        ("bytes=" + "0" * 300 + "5-" + "0" * 300 + "9", (5, 9)),  # a long header, one range
        ("bytes=10-" + "9" * 5000, (10, SIZE - 1)),  # an end past any size: cut to the file
        ("bytes=-" + "9" * 5000, (0, SIZE - 1)),
    ],
)
def test_one_range_is_answered_cut_to_the_file(header, expected):
    assert byte_range(header, SIZE) == expected


@pytest.mark.parametrize(
    "header", [None, "", "bytes=0-9,20-29", "items=0-9", "bytes=9-0", "bytes=x-", "bytes=-"]
)
def test_what_cannot_be_answered_as_one_range_is_the_whole_file(header):
    assert byte_range(header, SIZE) is None


@pytest.mark.parametrize(("header", "size"), [("bytes=1000-", SIZE), ("bytes=-0", SIZE),
                                              ("bytes=0-", 0), ("bytes=-10", 0),
                                              ("bytes=" + "9" * 5000 + "-", SIZE)])  # fmt: skip
def test_a_range_past_the_end_is_unsatisfiable(header, size):
    with pytest.raises(Unsatisfiable) as got:
        byte_range(header, size)
    assert got.value.size == size


def test_content_range_names_both_ends_and_the_size():
    assert content_range(400, 499, SIZE) == "bytes 400-499/1000"
