"""Live folders, the pure parts: when a changed file counts as settled, and which folders to walk."""

from __future__ import annotations

import os

import pytest

from wherein.indexer.ingest.watch import Settler, folders_to_walk


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_a_file_settles_only_after_staying_unchanged_for_the_quiet_period(tmp_path):
    clock = Clock()
    s = Settler(quiet=1.0, clock=clock)
    f = tmp_path / "a.jpg"
    f.write_bytes(b"half")
    s.note(str(f))
    clock.t = 0.6
    assert s.ready() == []
    with f.open("ab") as out:  # still being written: the wait starts again
        out.write(b" and the rest")
    clock.t = 1.2
    assert s.ready() == []
    clock.t = 2.1
    assert s.ready() == []  # 0.9 s since the last change was seen
    clock.t = 2.3
    assert s.ready() == [str(f)] and len(s) == 0


def test_a_vanished_file_is_ready_at_once(tmp_path):
    s = Settler(quiet=5.0, clock=Clock())
    s.note(str(tmp_path / "gone.jpg"))
    assert s.ready() == [str(tmp_path / "gone.jpg")]


def test_a_vanished_file_waits_for_a_file_still_settling(tmp_path):
    """A rename into another folder: the deletion is applied with the addition, as a move."""
    clock = Clock()
    s = Settler(quiet=1.0, clock=clock)
    gone, new = tmp_path / "a" / "blue.png", tmp_path / "b" / "renamed.png"
    new.parent.mkdir()
    new.write_bytes(b"the photo")
    s.note(str(gone))
    s.note(str(new))
    clock.t = 0.5
    assert s.ready() == []
    clock.t = 1.0
    assert s.ready() == sorted([str(gone), str(new)]) and len(s) == 0


def test_a_vanished_file_waits_no_longer_than_the_hold(tmp_path):
    clock = Clock()
    s = Settler(quiet=1.0, clock=clock)
    busy = tmp_path / "big.mov"
    s.note(str(tmp_path / "gone.jpg"))
    for step in range(1, 40):  # a file that keeps growing
        busy.write_bytes(b"x" * step)
        s.note(str(busy))
        clock.t = step * 0.5
        if s.ready():
            break
    assert clock.t == pytest.approx(s.hold) and len(s) == 1  # big.mov still settling


def test_folders_to_walk_are_the_fewest_existing_folders(tmp_path):
    root = tmp_path / "photos"
    (root / "2024" / "june").mkdir(parents=True)
    (root / "2023").mkdir()
    r = str(root)
    paths = [
        str(root / "2024" / "june" / "a.jpg"),
        str(root / "2024" / "b.jpg"),  # 2024 holds june: one walk of 2024
        str(root / "2023" / "x.png"),
    ]
    assert folders_to_walk(paths, [r]) == [str(root / "2023"), str(root / "2024")]
    # A folder deleted with its photos: walk its nearest existing ancestor.
    gone = str(root / "2022" / "trip" / "c.jpg")
    assert folders_to_walk([gone], [r]) == [r]
    # A folder that appeared is walked itself.
    assert folders_to_walk([str(root / "2024" / "june")], [r]) == [str(root / "2024" / "june")]
    # Outside the roots: nothing.
    assert folders_to_walk([str(tmp_path / "elsewhere" / "d.jpg")], [r]) == []


def test_non_image_files_cost_a_walk_only_when_they_were_folders_with_images(tmp_path):
    root = tmp_path / "photos"
    root.mkdir()
    (root / "notes.txt").write_text("x")
    r = str(root)
    assert folders_to_walk([str(root / "notes.txt")], [r]) == []
    known = {os.path.join(r, "old album")}
    deleted = [str(root / "old album"), str(root / ".tmp123")]
    assert folders_to_walk(deleted, [r], lambda p: p in known) == [r]
    assert folders_to_walk([str(root / ".tmp123")], [r], lambda p: p in known) == []
