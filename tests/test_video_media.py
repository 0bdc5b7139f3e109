"""The video media layer (indexer/video): recognise, probe, sample, one frame at a time.

Every video here is written by the test with PyAV: small (96x64), coloured segments at
known times, so a sampled frame's time and colour can be checked against what was drawn.
"""

from __future__ import annotations

import builtins
import os
import threading

import av
import numpy as np
import pytest
from PIL import Image
from video_files import (  # noqa: F401
    BLUE,
    GREEN,
    RED,
    H,
    W,
    segments,
    solid,
    write_audio,
    write_video,
)

from wherein.indexer.imaging import Locator
from wherein.indexer.kinds import registry
from wherein.indexer.video import is_video_file, sniff
from wherein.indexer.video.probe import VideoError, parse_iso6709, probe
from wherein.indexer.video.sample import frame_at, sample


def colour_of(frame) -> tuple[int, ...]:
    return tuple(int(c) for c in frame.array.reshape(-1, 3).mean(axis=0))


def close(a, b, tol: int = 12) -> bool:
    return all(abs(int(x) - int(y)) <= tol for x, y in zip(a, b))


# --- recognising videos ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "codec", "fmt", "expected"),
    [
        ("a.mp4", "libx264", None, "mp4"),
        ("a.mov", "libx264", None, "mov"),
        ("a.3gp", "mpeg4", None, "3gp"),
        ("a.mkv", "libx264", None, "mkv"),
        ("a.webm", "libvpx-vp9", None, "webm"),
        ("a.avi", "mpeg4", None, "avi"),
    ],
)
def test_containers_are_recognised_by_their_first_bytes(tmp_path, name, codec, fmt, expected):
    path = write_video(tmp_path / name, segments, seconds=0.5, codec=codec, fmt=fmt)
    assert sniff(path.read_bytes()[:64]) == expected
    renamed = path.rename(tmp_path / "holiday.jpg")  # the content decides, not the name
    assert is_video_file(renamed)


def test_photos_and_text_are_not_videos(tmp_path):
    Image.new("RGB", (8, 8), RED).save(tmp_path / "p.jpg")
    (tmp_path / "notes.mp4").write_text("not a video at all, just a text file\n")
    heic = b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic"  # ISO BMFF, but a photo
    assert not is_video_file(tmp_path / "p.jpg")
    assert not is_video_file(tmp_path / "notes.mp4")
    assert sniff(heic) is None
    assert not is_video_file(tmp_path / "missing.mp4")
    with pytest.raises(VideoError, match="unreadable video"):
        probe(tmp_path / "notes.mp4")


# --- probing --------------------------------------------------------------------------


def test_probe_reads_size_rate_duration_time_and_place(tmp_path):
    meta = {
        "creation_time": "2024-06-01T10:20:30.000000Z",
        "com.apple.quicktime.location.ISO6709": "+48.8584+002.2945+035.000/",
    }
    info = probe(write_video(tmp_path / "v.mp4", segments, seconds=3, metadata=meta))
    assert (info.width, info.height, info.rotation, info.codec) == (W, H, 0, "h264")
    assert info.fps == 10 and info.duration == pytest.approx(3.0, abs=0.15)
    assert (info.taken, info.taken_offset) == ("2024-06-01 10:20:30", "+00:00")
    assert (info.lat, info.lon) == (48.8584, 2.2945)
    # Apple's creationdate keeps the local clock and its offset: it wins over the UTC time.
    meta["com.apple.quicktime.creationdate"] = "2024-06-01T12:20:30+0200"
    info = probe(write_video(tmp_path / "a.mov", segments, seconds=1, metadata=meta))
    assert (info.taken, info.taken_offset) == ("2024-06-01 12:20:30", "+02:00")


def test_iso6709_forms():
    assert parse_iso6709("-33.8688+151.2093/") == (-33.8688, 151.2093)
    lat, lon = parse_iso6709("+4851.50-00217.40/")  # degrees and minutes
    assert lat == pytest.approx(48 + 51.5 / 60) and lon == pytest.approx(-(2 + 17.4 / 60))
    lat, lon = parse_iso6709("+485130.0+0021724.0/")  # degrees, minutes, seconds
    assert lat == pytest.approx(48 + 51 / 60 + 30 / 3600)
    assert parse_iso6709("+00.0000+000.0000/") is None  # no fix
    assert parse_iso6709("+95.0+010.0/") is None
    assert parse_iso6709("somewhere") is None


def test_empty_and_audio_only_files_say_why(tmp_path):
    (tmp_path / "empty.mp4").write_bytes(b"")
    with pytest.raises(VideoError, match="empty file"):
        probe(tmp_path / "empty.mp4")
    audio = write_audio(tmp_path / "voice.mp4", seconds=20 * 1024 / 16000)
    with pytest.raises(VideoError, match=r"no video stream \(audio only\)"):
        probe(audio)
    with pytest.raises(VideoError, match="audio only"):
        list(sample(audio))


# --- sampling -------------------------------------------------------------------------


def test_frames_at_known_times_show_what_was_drawn(tmp_path):
    path = write_video(tmp_path / "v.mp4", segments, seconds=12.1)  # the last frame at 12 s
    frames = list(sample(path, every=2))
    # Decoded frame by frame (one keyframe): every 2 s exactly, the last frame included; the
    # frames at the colour changes (4 s, 8 s) are the first of their colour.
    assert [round(f.time, 3) for f in frames] == [0, 2, 4, 6, 8, 10, 12]
    for f in frames:
        assert close(colour_of(f), segments(f.time)[0, 0]), (f.time, colour_of(f))
    assert frames[0].array.shape == (H, W, 3) and frames[0].array.dtype == np.uint8


def test_dense_keyframes_are_decoded_alone(tmp_path):
    # A phone-like GOP of 1 s at 10 fps: sampling every 2 s needs the keyframes only.
    path = write_video(tmp_path / "v.mp4", segments, seconds=12, gop=10)
    sampling = sample(path, every=2)
    frames = list(sampling)
    assert sampling.keyframes_only
    assert sampling.decoded <= 13  # one per second, not 120
    assert sampling.packets <= 14  # the others are not even handed to the decoder
    assert [round(f.time, 3) for f in frames] == [0, 2, 4, 6, 8, 10]
    for f in frames:
        assert close(colour_of(f), segments(f.time)[0, 0])


def test_a_scene_cut_between_samples_gets_a_frame(tmp_path):
    path = write_video(tmp_path / "v.mp4", lambda t: solid(RED if t < 3.0 else GREEN), seconds=6)
    frames = list(sample(path, every=2))
    cut = [f for f in frames if f.reason == "scene"]
    assert [round(f.time, 3) for f in cut] == [3.0]
    assert close(colour_of(cut[0]), GREEN)


def test_max_frames_spreads_over_a_long_video(tmp_path):
    path = write_video(tmp_path / "v.mp4", segments, seconds=60, fps=5)
    frames = list(sample(path, every=2, max_frames=10))
    times = [f.time for f in frames]
    assert len(frames) == 10
    assert times[0] == 0 and times[-1] >= 60 - 6 - 0.2  # the last slot, not the first 20 s
    # A scene cut may take a slot early (the cut at 4 s takes the 6 s slot): 1.5 slots at most.
    assert max(np.diff(times)) <= 1.5 * 6 + 0.2


def test_variable_frame_rate_times_come_from_the_timestamps(tmp_path):
    pts = [0, 100, 250, 1300, 1350, 3000, 5200, 5300]
    path = write_video(
        tmp_path / "v.mkv", lambda t: solid(RED if t < 3 else BLUE), pts_ms=pts, fps=10
    )
    frames = list(sample(path, every=0.05))  # every frame
    assert [round(f.time, 3) for f in frames] == [p / 1000 for p in pts]
    frames = list(sample(path, every=2))
    assert [round(f.time, 3) for f in frames] == [0, 1.35, 3.0, 5.2]
    assert close(colour_of(frames[-1]), BLUE)


@pytest.mark.parametrize(("rotation", "red_side"), [(90, "left"), (-90, "right")])
def test_a_rotated_phone_video_comes_out_as_a_player_shows_it(tmp_path, rotation, red_side):
    def top_red_bottom_blue(t: float) -> np.ndarray:
        a = solid(BLUE)
        a[: H // 2] = RED
        return a

    # -90 is what an iPhone held upright writes: the stored top is shown on the right.
    path = write_video(tmp_path / "v.mp4", top_red_bottom_blue, seconds=2, rotation=rotation)
    info = probe(path)
    assert (info.width, info.height, info.rotation) == (H, W, rotation % 360)
    for f in (next(iter(sample(path))), frame_at(path, 1.0)):
        assert f.array.shape == (W, H, 3)
        left = f.array[:, : H // 2 - 4].reshape(-1, 3).mean(0)
        right = f.array[:, H // 2 + 4 :].reshape(-1, 3).mean(0)
        assert close(left, RED if red_side == "left" else BLUE)
        assert close(right, BLUE if red_side == "left" else RED)


def test_ten_bit_video_becomes_8_bit_rgb(tmp_path):
    path = write_video(tmp_path / "v.mp4", segments, seconds=6, pix_fmt="yuv420p10le")
    frames = list(sample(path, every=2))
    assert frames and all(f.array.dtype == np.uint8 for f in frames)
    for f in frames:
        assert close(colour_of(f), segments(f.time)[0, 0]), (f.time, colour_of(f))


def test_large_frames_are_sampled_at_reduced_size_and_fetched_full_size(tmp_path):
    big = tmp_path / "big.mkv"
    with av.open(str(big), "w") as out:
        stream = out.add_stream("libx264", rate=5)
        stream.width, stream.height, stream.pix_fmt = 1280, 720, "yuv420p"
        for i in range(10):
            frame = av.VideoFrame.from_ndarray(np.full((720, 1280, 3), 128, np.uint8), "rgb24")
            frame.pts = i
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    assert next(iter(sample(big))).array.shape == (252, 448, 3)
    assert frame_at(big, 1.0).array.shape == (720, 1280, 3)


def test_frame_at_a_time_is_the_frame_shown_then(tmp_path):
    path = write_video(tmp_path / "v.mp4", segments, seconds=12, gop=10)
    assert close(colour_of(frame_at(path, 5.0)), BLUE)
    f = frame_at(path, 3.95)  # 10 fps: the frame at 3.9 s is still red
    assert round(f.time, 3) == 3.9 and close(colour_of(f), RED)
    assert close(colour_of(frame_at(path, 11.5)), GREEN)
    with pytest.raises(VideoError, match="outside the video"):
        frame_at(path, 60)
    # A sampled frame's time fetches that frame again (what `wherein mask VIDEO --time` does).
    for f in sample(path, every=3):
        again = frame_at(path, f.time)
        assert again.time == f.time and close(colour_of(again), colour_of(f), tol=2)


def test_a_truncated_stream_keeps_the_frames_before_the_damage(tmp_path):
    path = write_video(tmp_path / "v.mkv", segments, seconds=12, gop=10)
    data = path.read_bytes()
    cut = tmp_path / "cut.mkv"
    cut.write_bytes(data[: len(data) // 2])
    sampling = sample(cut, every=2)
    frames = list(sampling)
    assert frames and frames[0].time == 0
    assert 2 <= frames[-1].time < 10
    for f in frames:
        assert close(colour_of(f), segments(f.time)[0, 0])
    assert sampling.damage and "of 12.0 s" in sampling.damage


def test_an_mp4_without_its_moov_is_a_clear_skip(tmp_path):
    path = write_video(tmp_path / "v.mp4", segments, seconds=12)  # moov is written last
    data = path.read_bytes()
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(VideoError, match="unreadable video"):
        probe(cut)
    with pytest.raises(VideoError, match="unreadable video"):
        list(sample(cut))


def test_damage_in_the_middle_keeps_the_frames_before_it(tmp_path):
    path = write_video(tmp_path / "v.mkv", segments, seconds=12, gop=10)
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 2000] = bytes(2000)  # a run of zeros, as a bad sector reads
    bad = tmp_path / "bad.mkv"
    bad.write_bytes(bytes(data))
    sampling = sample(bad, every=2)
    frames = list(sampling)
    assert frames and frames[0].time == 0 and frames[-1].time < 10
    for f in frames:
        assert close(colour_of(f), segments(f.time)[0, 0])
    assert sampling.damage and ("skipped" in sampling.damage or "truncated" in sampling.damage)


def test_a_video_stream_that_decodes_to_nothing_is_a_clear_skip(tmp_path):
    path = tmp_path / "v.mp4"
    with av.open(str(path), "w", options={"movflags": "faststart"}) as out:  # moov first
        stream = out.add_stream("libx264", rate=10)
        stream.width, stream.height, stream.pix_fmt = W, H, "yuv420p"
        for i in range(40):
            frame = av.VideoFrame.from_ndarray(segments(i / 10), format="rgb24")
            frame.pts = i
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    data = bytearray(path.read_bytes())
    at = data.index(b"mdat") + 4
    data[at:] = bytes(len(data) - at)  # the index is intact, the pictures are gone
    path.write_bytes(bytes(data))
    with pytest.raises(VideoError, match="no decodable video frame"):
        probe(path)
    with pytest.raises(VideoError, match="no decodable video frame"):
        list(sample(path))


# --- only the regular file looked at is read (issue 28) -----------------------------------


def _fifo(path) -> None:
    os.mkfifo(path)


@pytest.mark.parametrize("special", ["fifo", "dev-zero"])
@pytest.mark.parametrize("kind", ["video", "animation"])
@pytest.mark.parametrize("reader", ["probe", "sample", "image_at"])
def test_a_timed_file_swapped_for_a_special_file_before_it_is_opened_is_never_read(
    tmp_path, monkeypatch, special, kind, reader
):
    if kind == "video":
        path = write_video(tmp_path / "v.mp4", segments, seconds=4)
    else:
        path = tmp_path / "a.gif"
        frames = [Image.fromarray(solid(c)) for c in (RED, GREEN, BLUE)]
        frames[0].save(path, save_all=True, append_images=frames[1:], duration=500)
    media = registry.kind_of(path)
    assert media.name == kind
    swapped = []

    def swap() -> None:
        # The video becomes a FIFO or a /dev/zero link just after whatever look comes first
        # (a stat of the path, or the open of the file that is read).
        if not swapped:
            swapped.append(True)
            path.unlink()
            _fifo(path) if special == "fifo" else path.symlink_to("/dev/zero")

    real_stat, real_open = os.stat, os.open

    def is_video(p) -> bool:
        return isinstance(p, str | os.PathLike) and os.fspath(p) == str(path)

    def stat(p, *a, **k):
        st = real_stat(p, *a, **k)
        if is_video(p):
            swap()
        return st

    def open_(p, *a, **k):
        if is_video(p):
            swap()
        return real_open(p, *a, **k)

    def open_file(p, *a, **k):  # a library that opens the path itself (Pillow)
        if is_video(p):
            swap()
        return real_open_file(p, *a, **k)

    real_open_file = builtins.open
    monkeypatch.setattr(os, "stat", stat)
    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(builtins, "open", open_file)
    read = {
        "probe": lambda: media.probe(path),
        "sample": lambda: list(media.sample(path, 2.0, 10)),
        "image_at": lambda: media.image_at(path, Locator("frame", t=1.0)),
    }[reader]
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            read()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(20)
    if worker.is_alive() and special == "fifo":  # blocked on the FIFO: let it go, then fail
        monkeypatch.undo()
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(20)
        pytest.fail("the file was opened as a FIFO: the read blocked")
    assert swapped and outcome, "the read did not finish"
    assert isinstance(outcome[0], VideoError), outcome[0]
    kind = "a FIFO" if special == "fifo" else "a character device"
    assert str(outcome[0]) == f"not a regular file ({kind}); never read"
