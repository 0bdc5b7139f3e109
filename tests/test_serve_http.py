"""`wherein serve` as HTTP clients use it: a video the catalog holds as one whatever its name,
HEAD on every GET route, validators (ETag, Last-Modified) with If-Range and If-None-Match,
long Range headers, and JSON for every error that reaches the app.

The library holds a photo and a clip saved as ``IMG_0042`` (no extension, as some phones
and cameras name files): the indexer knows it is a video by its content, so the web app
must too (it once decided by the extension, and answered the clip's video_url with 404).
"""

from __future__ import annotations

import socket
from email.utils import format_datetime, parsedate_to_datetime
from pathlib import Path

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from live_server import live_server
from video_files import BLUE, segments, write_video

from wherein.search.cli import cli
from wherein.search.web import schemas
from wherein.search.web.app import create_app

from conftest import draw_shape

BASE = "http://127.0.0.1"


class Served:
    def __init__(self, client: TestClient, video: Path, photo: Path) -> None:
        self.client, self.video, self.photo = client, video, photo
        hits = client.get("/api/search", params={"q": "blue", "per_page": 50}).json()["hits"]
        self.hits = {Path(h["path"]).name: h for h in hits}
        self.video_id = self.hits[video.name]["id"]
        self.photo_id = self.hits[photo.name]["id"]
        self.url = f"/api/video/{self.video_id}"


@pytest.fixture(scope="module")
def served(standin_models, tmp_path_factory):
    root = tmp_path_factory.mktemp("serve-http")
    library, index = root / "library", root / "index"
    photo = library / "red.png"
    draw_shape(photo, "red")
    video = write_video(library / "IMG_0042", segments, seconds=8.0, fmt="mp4")
    r = CliRunner().invoke(
        cli, ["index", str(library), "--index", str(index), "--models", str(standin_models), "-q"]
    )
    assert r.exit_code == 0, r.output
    with TestClient(create_app(index, standin_models, prefetch_masks=0), base_url=BASE) as c:
        yield Served(c, video, photo)


# -- a video is what the catalog says, not what its name says ------------------------------------
def test_a_video_without_an_extension_plays_with_range_requests(served):
    hit = served.hits["IMG_0042"]
    schemas.validator("hit.schema.json").validate(
        {k: v for k, v in hit.items() if not k.endswith("_url")}
    )
    assert hit["kind"] == "video" and hit["video_url"].startswith(served.url)
    data = served.video.read_bytes()
    r = served.client.get(hit["video_url"], headers={"Range": "bytes=0-99"})
    assert r.status_code == 206, r.text
    assert r.content == data[:100]
    assert r.headers["content-range"] == f"bytes 0-99/{len(data)}"
    assert r.headers["content-type"] == "video/mp4"  # from its first bytes: an MP4
    tail = served.client.get(hit["video_url"], headers={"Range": "bytes=-200"})
    assert tail.status_code == 206 and tail.content == data[-200:]


def test_a_video_without_an_extension_shows_its_frame_and_says_it_is_a_video(served):
    record = served.client.get(f"/api/hit/{served.video_id}").json()
    assert record["kind"] == "video" and "video_url" in record
    thumb = served.client.get(f"/api/thumb/{served.video_id}", params={"t": 6.0})
    assert thumb.status_code == 200 and thumb.headers["content-type"] == "image/jpeg"
    import io

    from PIL import Image

    colour = Image.open(io.BytesIO(thumb.content)).convert("RGB").resize((1, 1)).getpixel((0, 0))
    assert all(abs(int(a) - int(b)) <= 30 for a, b in zip(colour, BLUE, strict=True))


def test_a_photo_is_still_not_a_video(served):
    r = served.client.get(f"/api/video/{served.photo_id}")
    assert r.status_code == 404 and r.json()["status"] == 404
    assert served.client.get(f"/api/hit/{served.photo_id}").json()["kind"] == "photo"


# -- HEAD on every GET route ------------------------------------------------------------------
def _get_urls(served) -> list[str]:
    """A URL for every GET route the app has, its parameters filled in."""
    fill = {"file_id": str(served.video_id), "kind": "overlay"}
    query = {
        "/api/search": "?q=red",
        "/api/mask/{file_id}": "?prompt=red&t=1.0",
        "/api/mask/{file_id}/{kind}": "?prompt=red&t=1.0",
        "/api/thumb/{file_id}": "?t=1.0",
        "/api/image/{file_id}": "?t=1.0",
    }
    from wherein.search.web.routes import ROUTERS

    urls = []
    routes = [r for r in served.client.app.routes if getattr(r, "path", None)]
    for route in routes + [r for router in ROUTERS for r in router.routes]:
        path = getattr(route, "path", "")
        if "GET" not in (getattr(route, "methods", None) or set()):
            if path == "/static":
                urls.append("/static/app.js")
            continue
        url = path
        for name, value in fill.items():
            url = url.replace("{" + name + "}", value)
        urls.append(url + query.get(path, ""))
    return urls


def test_every_get_route_answers_head_with_the_gets_status_and_headers(served):
    urls = _get_urls(served)
    assert {"/api/status", "/api/search?q=red", served.url, "/static/app.js"} <= set(urls)
    assert len(urls) >= 12
    for url in urls:
        got = served.client.get(url)
        head = served.client.head(url)
        assert head.status_code == got.status_code == 200, (url, head.status_code, got.text)
        assert head.content == b""
        for name in ("content-type", "content-length", "etag", "last-modified"):
            if name in got.headers and name != "content-length" or url.startswith("/api/video"):
                assert head.headers.get(name) == got.headers.get(name), (url, name)


def test_head_of_a_video_range_reads_nothing_and_says_what_a_get_would(served):
    r = served.client.head(served.url, headers={"Range": "bytes=10-19"})
    assert r.status_code == 206 and r.content == b""
    assert r.headers["content-length"] == "10"
    assert r.headers["content-range"].startswith("bytes 10-19/")


# -- validators -----------------------------------------------------------------------------
def test_files_carry_an_etag_and_last_modified(served):
    mtime = served.video.stat().st_mtime
    r = served.client.get(served.url, headers={"Range": "bytes=0-9"})
    assert r.headers["etag"].startswith('"') and r.headers["etag"].endswith('"')
    assert abs(parsedate_to_datetime(r.headers["last-modified"]).timestamp() - mtime) < 1
    thumbs = [served.client.get(f"/api/thumb/{served.video_id}", params={"t": t}) for t in (1, 5)]
    photo = served.client.get(f"/api/thumb/{served.photo_id}")
    tags = {x.headers["etag"] for x in (*thumbs, photo, r)}
    assert len(tags) == 4  # each file and each moment its own


def test_if_range_with_the_files_etag_or_date_gets_the_range(served):
    first = served.client.get(served.url, headers={"Range": "bytes=0-9"})
    for validator in (first.headers["etag"], first.headers["last-modified"]):
        r = served.client.get(served.url, headers={"Range": "bytes=5-9", "If-Range": validator})
        assert r.status_code == 206 and r.content == served.video.read_bytes()[5:10], validator


@pytest.mark.parametrize(
    "validator",
    [
        '"0123456789abcdef0123456789abcdef"',  # another file's tag
        "W/{etag}",  # a weak tag never matches for a range
        "Sat, 01 Jan 2000 00:00:00 GMT",  # a date the file is not from
        "not a date",
    ],
)
def test_if_range_that_does_not_match_gets_the_whole_file(served, validator):
    tag = served.client.get(served.url, headers={"Range": "bytes=0-0"}).headers["etag"]
    r = served.client.get(
        served.url, headers={"Range": "bytes=5-9", "If-Range": validator.format(etag=tag)}
    )
    assert r.status_code == 200 and r.content == served.video.read_bytes()
    assert "content-range" not in r.headers


def test_if_none_match_with_the_current_tag_is_304(served):
    for url in (served.url, f"/api/thumb/{served.photo_id}", f"/api/image/{served.photo_id}"):
        tag = served.client.get(url).headers["etag"]
        r = served.client.get(url, headers={"If-None-Match": tag})
        assert r.status_code == 304 and r.content == b"" and r.headers["etag"] == tag, url
        other = served.client.get(url, headers={"If-None-Match": '"other"'})
        assert other.status_code == 200 and other.content, url


# -- long Range headers ---------------------------------------------------------------------
def test_a_valid_range_header_over_200_characters_is_answered(served):
    data = served.video.read_bytes()
    long_first = "bytes=" + "0" * 250 + "7-" + "0" * 250 + "16"  # leading zeros: still 7-16
    r = served.client.get(served.url, headers={"Range": long_first})
    assert r.status_code == 206, r.text
    assert r.content == data[7:17]
    many = "bytes=" + ",".join(f"{i * 10}-{i * 10 + 4}" for i in range(60))  # several ranges
    r = served.client.get(served.url, headers={"Range": many})
    assert len(many) > 200 and r.status_code == 200 and r.content == data


# -- errors -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("method", "url", "status"),
    [
        ("POST", "/api/search?q=red", 405),
        ("DELETE", "/api/video/1", 405),
        ("GET", "/api/nothing-here", 404),
        ("GET", "/static/nothing.js", 404),
        ("GET", "/api/video/abc", 400),
    ],
)
def test_what_reaches_the_app_is_answered_in_json(served, method, url, status):
    r = served.client.request(method, url)
    assert r.status_code == status
    assert r.headers["content-type"] == "application/json"
    assert r.json()["status"] == status and r.json()["error"]


@pytest.fixture()
def one_photo_app(standin_models, tmp_path):
    """The web app over an index of one photo, for a server on a real socket."""
    library, index = tmp_path / "library", tmp_path / "index"
    draw_shape(library / "red.png", "red")
    r = CliRunner().invoke(
        cli, ["index", str(library), "--index", str(index), "--models", str(standin_models), "-q"]
    )
    assert r.exit_code == 0, r.output
    return create_app(index, standin_models, prefetch_masks=0)


def test_a_malformed_request_line_gets_a_json_error_from_the_server(one_photo_app):
    """What uvicorn refuses before the app sees it (a request line that is not HTTP) gets the
    same JSON body as the app's own errors, from `wherein serve`'s protocol."""
    with (
        live_server(one_photo_app, "critical") as (_, port),
        socket.create_connection(("127.0.0.1", port)) as c,
    ):
        c.sendall(b"GET / HTTP/1.1 garbage here\r\n\r\n")
        answer = b""
        while chunk := c.recv(4096):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400")
    assert b"content-type: application/json" in head.lower()
    import json

    doc = json.loads(body)
    assert doc["status"] == 400 and "request" in doc["error"]


def test_the_http_date_is_an_imf_fixdate(served):
    r = served.client.get(served.url, headers={"Range": "bytes=0-0"})
    when = parsedate_to_datetime(r.headers["last-modified"])
    assert r.headers["last-modified"] == format_datetime(when, usegmt=True)


def test_keep_alive_responses_are_not_held_back_by_nagle(one_photo_app):
    """`wherein serve`'s connections send each write at once (TCP_NODELAY): with Nagle's
    algorithm on, the body of every response after the first on a keep-alive connection
    (a browser's thumbnails) waited ~40 ms for the client's delayed ACK of its headers."""
    with (
        live_server(one_photo_app, "critical") as (srv, port),
        socket.create_connection(("127.0.0.1", port)) as c,
    ):
        c.sendall(b"GET /api/status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert c.recv(4096).startswith(b"HTTP/1.1 200")
        (conn,) = srv.server_state.connections
        accepted = conn.transport.get_extra_info("socket")
        assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
