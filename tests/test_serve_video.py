"""Videos in `wherein serve`'s API: /api/video answers HTTP byte ranges (a player's first
bytes, a seek into the middle, an MP4 index read from the end), only for indexed videos
and under the same file checks as photos; a video hit carries its video_url, and its
thumbnail and mask are of its frame at the hit's time.

The video is written with PyAV (tests/video_files.py: red 0-4 s, blue 4-8 s) and indexed
with the photos by `wherein index`, as a user's library would be.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from PIL import Image
from video_files import BLUE, RED, segments, write_video

from wherein.search.cli import cli
from wherein.search.web import schemas
from wherein.search.web.app import create_app

from conftest import draw_shape

BASE = "http://127.0.0.1"


def close(a, b, tol: int) -> bool:
    return all(abs(int(x) - int(y)) <= tol for x, y in zip(a, b, strict=True))


def build_index(folder: Path, index: Path, models: Path) -> None:
    r = CliRunner().invoke(
        cli, ["index", str(folder), "--index", str(index), "--models", str(models), "-q"]
    )
    assert r.exit_code == 0, r.output


class Served:
    def __init__(self, client: TestClient, video: Path) -> None:
        self.client, self.video = client, video
        hits = client.get("/api/search", params={"q": "red", "per_page": 50}).json()["hits"]
        self.ids = {Path(h["path"]).name: h["id"] for h in hits}
        self.video_id = self.ids[video.name]
        self.url = f"/api/video/{self.video_id}"

    def ranged(self, spec: str | None, url: str | None = None):
        headers = {"Range": spec} if spec is not None else {}
        return self.client.get(url or self.url, headers=headers)


@pytest.fixture(scope="module")
def served(standin_models, tmp_path_factory):
    root = tmp_path_factory.mktemp("serve-video")
    library, index = root / "library", root / "index"
    draw_shape(library / "red.png", "red")
    draw_shape(library / "blue.png", "blue")
    video = write_video(library / "clip.mp4", segments, seconds=8.0)
    build_index(library, index, standin_models)
    with TestClient(create_app(index, standin_models, prefetch_masks=0), base_url=BASE) as c:
        yield Served(c, video)


# -- byte ranges -----------------------------------------------------------------------------
def test_without_a_range_the_whole_video_is_sent_and_ranges_are_offered(served):
    r = served.ranged(None)
    assert r.status_code == 200, r.text
    assert r.content == served.video.read_bytes()
    assert r.headers["accept-ranges"] == "bytes"
    assert r.headers["content-type"] == "video/mp4"
    assert int(r.headers["content-length"]) == served.video.stat().st_size


def test_the_first_bytes(served):
    data = served.video.read_bytes()
    r = served.ranged("bytes=0-99")
    assert r.status_code == 206
    assert r.content == data[:100]
    assert r.headers["content-range"] == f"bytes 0-99/{len(data)}"
    assert r.headers["content-length"] == "100"


def test_an_open_range_from_the_start_is_the_whole_file_as_206(served):
    """What a browser's <video> asks for first."""
    data = served.video.read_bytes()
    r = served.ranged("bytes=0-")
    assert r.status_code == 206 and r.content == data
    assert r.headers["content-range"] == f"bytes 0-{len(data) - 1}/{len(data)}"


def test_a_middle_range(served):
    data = served.video.read_bytes()
    a, b = len(data) // 3, len(data) // 3 + 1234
    r = served.ranged(f"bytes={a}-{b}")
    assert r.status_code == 206
    assert r.content == data[a : b + 1]
    assert r.headers["content-range"] == f"bytes {a}-{b}/{len(data)}"


def test_a_suffix_range_is_the_last_bytes(served):
    data = served.video.read_bytes()
    r = served.ranged("bytes=-500")
    assert r.status_code == 206
    assert r.content == data[-500:]
    assert r.headers["content-range"] == f"bytes {len(data) - 500}-{len(data) - 1}/{len(data)}"


def test_a_range_running_past_the_end_is_cut_to_the_file(served):
    data = served.video.read_bytes()
    r = served.ranged(f"bytes={len(data) - 10}-{len(data) + 5000}")
    assert r.status_code == 206 and r.content == data[-10:]
    assert r.headers["content-range"] == f"bytes {len(data) - 10}-{len(data) - 1}/{len(data)}"


@pytest.mark.parametrize("spec", ["bytes={size}-", "bytes={size}-{more}", "bytes=-0"])
def test_a_range_past_the_end_is_416_with_the_size(served, spec):
    size = served.video.stat().st_size
    r = served.ranged(spec.format(size=size, more=size + 10))
    assert r.status_code == 416, r.text
    assert r.headers["content-range"] == f"bytes */{size}"
    assert r.json()["status"] == 416 and "range" in r.json()["error"]


@pytest.mark.parametrize("spec", ["bytes=0-9,20-29", "items=0-9", "bytes=9-0", "bytes=x-y"])
def test_a_range_it_cannot_answer_alone_gets_the_whole_file(served, spec):
    r = served.ranged(spec)
    assert r.status_code == 200 and r.content == served.video.read_bytes()


# -- what is refused -------------------------------------------------------------------------
def test_a_photo_or_an_id_not_in_the_index_is_not_a_video(served):
    for url in (f"/api/video/{served.ids['red.png']}", f"/api/video/{served.video_id + 100}"):
        r = served.ranged("bytes=0-9", url)
        assert r.status_code == 404, r.text
        assert r.json()["status"] == 404 and "error" in r.json()


@pytest.mark.parametrize("bad", ["0", "-1", "abc", "..%2F..%2Fetc%2Fpasswd", "9" * 30])
def test_a_path_or_junk_in_place_of_an_id_is_refused(served, bad):
    r = served.client.get(f"/api/video/{bad}", headers={"Range": "bytes=0-9"})
    assert r.status_code in (400, 404), r.text
    assert "error" in r.json() and b"ftyp" not in r.content


def test_a_video_replaced_since_indexing_is_refused(served, tmp_path):
    """Same size and time, other bytes: the content check refuses it, as for a photo."""
    path, st = served.video, served.video.stat()
    original = path.read_bytes()
    changed = bytearray(original)
    changed[len(changed) // 2] ^= 0xFF
    try:
        path.write_bytes(bytes(changed))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        r = served.ranged("bytes=0-99")
        assert r.status_code == 409, r.text
        assert "differs" in r.json()["error"]
    finally:
        path.write_bytes(original)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert served.ranged("bytes=0-99").status_code == 206


def test_a_video_deleted_since_indexing_is_not_found(served):
    moved = served.video.with_suffix(".away")
    served.video.rename(moved)
    try:
        assert served.ranged("bytes=0-99").status_code == 404
    finally:
        moved.rename(served.video)


# -- a video hit: its frame, its URLs, its mask ----------------------------------------------
def jpeg_colour(data: bytes) -> tuple[int, ...]:
    img = Image.open(io.BytesIO(data)).convert("RGB")
    return tuple(int(c) for c in img.resize((1, 1), Image.Resampling.BOX).getpixel((0, 0)))


def video_hit(served, q: str) -> dict:
    r = served.client.get("/api/search", params={"q": q, "per_page": 50})
    assert r.status_code == 200, r.text
    schemas.validator("api.search.schema.json").validate(r.json())
    (hit,) = [h for h in r.json()["hits"] if h["id"] == served.video_id]  # one hit per video
    return hit


def test_a_video_hit_carries_its_video_url_and_a_thumbnail_of_the_matching_frame(served):
    hit = video_hit(served, "blue")
    assert hit["kind"] == "video" and 4.0 <= hit["time"] < 8.0  # a frame of the blue part
    assert hit["video_url"].startswith(f"/api/video/{served.video_id}")
    at = f"t={hit['time']!r}"
    assert at in hit["thumb_url"] and at in hit["image_url"]
    r = served.client.get(hit["thumb_url"])
    assert r.status_code == 200 and r.headers["content-type"] == "image/jpeg"
    assert close(jpeg_colour(r.content), BLUE, tol=30)  # the hit's frame, not the first one
    again = served.client.get(hit["thumb_url"])
    assert again.headers["x-wherein-cache"] == "hit" and again.content == r.content
    red = served.client.get(f"/api/thumb/{served.video_id}?t=1.0")
    assert close(jpeg_colour(red.content), RED, tol=30)  # each moment its own entry
    assert served.client.get(hit["video_url"], headers={"Range": "bytes=0-9"}).status_code == 206


def test_a_photo_hit_has_no_video_url(served):
    r = served.client.get("/api/search", params={"q": "red"}).json()
    photo = next(h for h in r["hits"] if h["id"] == served.ids["red.png"])
    assert "video_url" not in photo and "t=" not in photo["thumb_url"]


def test_the_mask_of_a_video_is_of_its_frame_at_the_time_asked(served):
    vid = served.video_id
    on_red = served.client.get(f"/api/mask/{vid}", params={"prompt": "red", "t": 1.0})
    on_blue = served.client.get(f"/api/mask/{vid}", params={"prompt": "red", "t": 5.0})
    assert on_red.status_code == on_blue.status_code == 200, on_red.text
    assert on_red.json()["time"] == 1.0 and on_blue.json()["time"] == 5.0
    schemas.validator("api.mask.schema.json").validate(on_red.json())
    assert on_red.json()["mask_area"] > 0.9 > 0.1 > on_blue.json()["mask_area"]
    assert (on_red.json()["width"], on_red.json()["height"]) == (96, 64)
    overlay = served.client.get(on_red.json()["overlay_url"])
    assert overlay.status_code == 200 and overlay.headers["content-type"] == "image/jpeg"
    png = served.client.get(on_red.json()["mask_url"])
    assert Image.open(io.BytesIO(png.content)).size == (96, 64)


@pytest.mark.parametrize(
    ("url", "status", "words"),
    [
        ("/api/thumb/{photo}?t=1.0", 400, "photo"),
        ("/api/mask/{photo}?prompt=red&t=1.0", 400, "photo"),
        ("/api/thumb/{video}?t=99", 400, "no frame at 99"),
        ("/api/thumb/{video}?t=-1", 400, "t:"),
    ],
)
def test_a_time_only_a_video_can_have(served, url, status, words):
    r = served.client.get(url.format(photo=served.ids["red.png"], video=served.video_id))
    assert r.status_code == status, r.text
    assert words in r.json()["error"]


def test_the_record_of_a_video_says_so_and_links_the_video(served):
    r = served.client.get(f"/api/hit/{served.video_id}").json()
    schemas.validator("api.image.schema.json").validate(r)
    assert r["kind"] == "video" and r["video_url"].startswith(f"/api/video/{served.video_id}")
    photo = served.client.get(f"/api/hit/{served.ids['red.png']}").json()
    assert photo["kind"] == "photo" and "video_url" not in photo


def test_the_kind_filter_keeps_photos_or_videos(served):
    def names(kind: str) -> set[str]:
        r = served.client.get("/api/search", params={"q": "red", "kind": kind})
        assert r.status_code == 200, r.text
        return {Path(h["path"]).name for h in r.json()["hits"]}

    assert names("video") == {"clip.mp4"}
    assert names("photo") == {"red.png", "blue.png"}
    r = served.client.get("/api/search", params={"q": "red", "kind": "audio"})
    assert r.status_code == 400 and "kind" in r.json()["error"]


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts /proc/self/fd")
def test_players_that_hang_up_mid_video_leave_no_open_file(standin_models, tmp_path):
    """A browser drops its range request as soon as it seeks: each one's descriptor closes."""
    import socket
    import time

    import numpy as np
    from live_server import live_server

    rng = np.random.default_rng(0)  # noise: a video of megabytes, many chunks long
    library, index = tmp_path / "library", tmp_path / "index"
    video = write_video(
        library / "noise.mp4",
        lambda t: rng.integers(0, 255, (64, 96, 3), dtype=np.uint8),
        seconds=30.0,
        fps=30,
        gop=30,  # a keyframe a second, as phones write: indexing decodes those alone
    )
    assert video.stat().st_size > 2_000_000  # more than the sockets hold: cut short for real
    build_index(library, index, standin_models)
    app = create_app(index, standin_models, prefetch_masks=0)
    with live_server(app) as (_, port):

        def hang_up(headers: str) -> bytes:
            with socket.create_connection(("127.0.0.1", port)) as c:
                c.sendall(f"GET /api/video/1 HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}\r\n".encode())
                return c.recv(4096)

        def open_video_files() -> int:
            return sum(1 for fd in Path("/proc/self/fd").iterdir() if _points_at(fd, video))

        assert hang_up("").startswith(b"HTTP/1.1 200")  # hashed once: later ranges only fstat
        for _ in range(20):
            assert hang_up("Range: bytes=0-\r\n").startswith(b"HTTP/1.1 206")
        deadline = time.monotonic() + 20
        while open_video_files() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert open_video_files() == 0


def _points_at(fd: Path, target: Path) -> bool:
    try:
        return os.readlink(fd) == str(target)
    except OSError:
        return False


def test_a_frame_masked_by_the_cli_is_not_seen_again_by_the_web_app(standin_models, tmp_path):
    """`wherein search --mask` and the web app key a video frame's vision pass alike (the
    video's SHA-256 and the time): the page's first mask of that moment runs the decoder only."""
    library, index = tmp_path / "library", tmp_path / "index"
    write_video(library / "clip.mp4", segments, seconds=8.0)
    build_index(library, index, standin_models)
    r = CliRunner().invoke(
        cli,
        ["search", "blue", "--mask", "--out", str(tmp_path / "masks"), "--json",
         "--index", str(index), "--models", str(standin_models)],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    with TestClient(create_app(index, standin_models, prefetch_masks=0), base_url=BASE) as c:
        (hit,) = c.get("/api/search", params={"q": "blue"}).json()["hits"]
        m = c.get(f"/api/mask/{hit['id']}", params={"prompt": "blue", "t": hit["time"]})
        assert m.status_code == 200 and m.json()["mask_area"] > 0.9
        status = c.get("/api/status").json()["masks"]
    assert status["vision_passes"] == 0 and status["vision_passes_loaded"] == 1


def test_more_like_this_on_a_video_searches_by_all_its_frames(served):
    """The detail view's "More like this" sends like=<the video's id>: half red, half blue, the
    clip is as like the red photo as the blue one (the mean of its frames), not an error."""
    r = served.client.get("/api/search", params={"like": served.video_id, "kind": "photo"})
    assert r.status_code == 200, r.text
    hits = r.json()["hits"]
    assert {Path(h["path"]).name for h in hits} == {"red.png", "blue.png"}
    assert abs(hits[0]["score"] - hits[1]["score"]) < 1e-3
