"""Where a one-file export's video frames may go (export/destination.frames_destination), and
how they are named (export/pieces.FrameNames): model-free rules."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from wherein.search.export.destination import (
    FRAMES_MANIFEST,
    Keep,
    frames_destination,
    write_frames_manifest,
)
from wherein.search.export.errors import ExportError
from wherein.search.export.pieces import FrameNames, frames_folder


def test_the_frames_folder_is_named_after_the_export():
    assert frames_folder(Path("/x/dogs.coco.json")) == Path("/x/dogs.coco.frames")
    assert frames_folder(Path("/x/out")) == Path("/x/out.frames")


def test_frames_never_go_into_a_kept_folder_through_a_link(tmp_path):
    index = tmp_path / "index"
    (index / "cache").mkdir(parents=True)
    link = tmp_path / "dogs.coco.frames"
    link.symlink_to(index / "cache")
    with pytest.raises(ExportError, match="inside the index folder"):
        frames_destination("dogs.coco.json", link, [Keep(index, "the index folder")])


def test_a_file_or_standard_output_cannot_hold_frames(tmp_path):
    taken = tmp_path / "dogs.coco.frames"
    taken.write_text("a file")
    with pytest.raises(ExportError, match="not a folder"):
        frames_destination("dogs.coco.json", taken)
    with pytest.raises(ExportError, match="not -"):
        frames_destination("-", tmp_path / "-.frames")


def test_a_folder_of_earlier_frames_may_be_replaced_and_nothing_else(tmp_path):
    folder = tmp_path / "dogs.coco.frames"
    assert frames_destination("d", folder) == folder  # new
    folder.mkdir()
    assert frames_destination("d", folder) == folder  # empty
    (folder / "clip.mp4@12.50s.jpg").write_bytes(b"frame")
    (folder / "clip.mp4@12.50s-17.jpg").write_bytes(b"frame")
    write_frames_manifest(folder)  # what an export does before it renames the folder in
    assert frames_destination("d", folder) == folder
    (folder / "holiday.jpg").write_bytes(b"")
    with pytest.raises(ExportError, match="holiday.jpg"):
        frames_destination("d", folder)


@pytest.mark.parametrize("how", ["added", "changed", "a link", "no manifest"])
def test_a_file_named_like_a_frame_is_not_an_exports_frame(tmp_path, how):
    """Only what the manifest records, unchanged, is an earlier export's: a user's file
    named like a frame stops the export."""
    folder = tmp_path / "dogs.coco.frames"
    folder.mkdir()
    frame = folder / "clip.mp4@12.50s.jpg"
    frame.write_bytes(b"frame")
    write_frames_manifest(folder)
    theirs = folder / "clip.mp4@99.00s.jpg"
    if how == "added":
        theirs.write_bytes(b"a user's photo")
    elif how == "changed":
        frame.write_bytes(b"a user's edit of the frame")
        theirs = frame
    elif how == "a link":
        frame.unlink()
        frame.symlink_to(tmp_path / "elsewhere.jpg")
        theirs = frame
    else:
        (folder / FRAMES_MANIFEST).unlink()
        theirs = frame
    with pytest.raises(ExportError, match=re.escape(theirs.name)):
        frames_destination("d", folder)


def test_frame_names_follow_video_and_time_and_stay_unique():
    names = FrameNames()
    assert names("/a/clip.mp4", 12.5, 7) == "clip.mp4@12.50s"
    assert names("/b/clip.mp4", 12.5, 9) == "clip.mp4@12.50s-9"  # another folder's clip
    assert names("/a/clip.mp4", 3.0, 8) == "clip.mp4@3.00s"
