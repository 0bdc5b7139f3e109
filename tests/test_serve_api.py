"""`wherein serve`'s JSON API through FastAPI's TestClient: results, paging, filters, masks,
caches, and what it refuses (hostile ids, paths, swapped files, foreign Host headers)."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from PIL import Image

from wherein.search.cli import cli
from wherein.search.web import schemas
from wherein.search.web.app import create_app

from conftest import draw_shape

BASE = "http://127.0.0.1"


def build_index(photos: Path, index: Path, models: Path) -> None:
    r = CliRunner().invoke(
        cli, ["index", str(photos), "--index", str(index), "--models", str(models), "-q"]
    )
    assert r.exit_code == 0, r.output


def draw_photos(root: Path) -> dict[str, tuple]:
    """The `shapes` set (module-scoped here, so one index serves most tests); name -> pixel box."""
    return {
        "red_square.jpg": draw_shape(root / "red_square.jpg", "red", quality=95),
        "red_disc.png": draw_shape(
            root / "red_disc.png", "red", size=(400, 300), shape="ellipse", box=(0.1, 0.1, 0.9, 0.9)
        ),
        "blue_square.png": draw_shape(root / "blue_square.png", "blue"),
        "blue_wide.webp": draw_shape(
            root / "nested" / "blue_wide.webp", "blue", size=(480, 200), lossless=True
        ),
        "green.bmp": draw_shape(root / "green.bmp", "green"),
        "yellow.gif": draw_shape(root / "nested" / "yellow.gif", "yellow", size=(200, 300)),
    }


class Served:
    def __init__(self, client: TestClient, photos: Path, index: Path, boxes: dict) -> None:
        self.client = client
        self.photos = photos
        self.index = index
        self.boxes = boxes
        hits = client.get("/api/search", params={"q": "red", "per_page": 50}).json()["hits"]
        self.ids = {Path(h["path"]).name: h["id"] for h in hits}

    def get(self, url: str, **params):
        return self.client.get(url, params=params or None)


@pytest.fixture(scope="module")
def served(standin_models, tmp_path_factory):
    root = tmp_path_factory.mktemp("serve")
    photos, index = root / "photos", root / "index"
    boxes = draw_photos(photos)
    build_index(photos, index, standin_models)
    # No masks made in the background: tests here count vision passes and cache files.
    with TestClient(create_app(index, standin_models, prefetch_masks=0), base_url=BASE) as client:
        yield Served(client, photos, index, boxes)


@pytest.fixture()
def own(standin_models, shapes, tmp_path):
    """A fresh index over `shapes` for tests that change files."""
    index = tmp_path / "index"
    build_index(shapes, index, standin_models)
    with TestClient(create_app(index, standin_models), base_url=BASE) as client:
        yield Served(client, shapes, index, {})


def names(hits) -> list[str]:
    return [Path(h["path"]).name for h in hits]


def assert_error(r, status: int | None = None, contains: str = "") -> dict:
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    if status is not None:
        assert r.status_code == status, r.text
    body = r.json()
    schemas.validator("api.error.schema.json").validate(body)
    assert "Traceback" not in r.text and 'File "' not in r.text
    assert contains.lower() in body["error"].lower(), body
    return body


# -- search ------------------------------------------------------------------------------------
def test_search_results_validate_against_the_hit_schema(served):
    r = served.get("/api/search", q="red")
    assert r.status_code == 200
    body = r.json()
    schemas.validator("api.search.schema.json").validate(body)
    hit_validator = schemas.validator("hit.schema.json")
    for h in body["hits"]:
        hit_validator.validate(h)
    assert set(names(body["hits"])[:2]) == {"red_square.jpg", "red_disc.png"}
    assert body["hits"][0]["probability"] > 0.5 > body["hits"][2]["probability"]
    assert body["mask_prompt"] == "red" and body["standin"] is True


def test_query_algebra_is_the_clis(served):
    hits = served.get("/api/search", q="blue - red", per_page=6).json()["hits"]
    assert set(names(hits[:2])) == {"blue_square.png", "blue_wide.webp"}
    assert set(names(hits[-2:])) == {"red_square.jpg", "red_disc.png"}


def test_paging_walks_every_hit_once(served):
    full = served.get("/api/search", q="red", per_page=50).json()["hits"]
    seen, page = [], 1
    while True:
        body = served.get("/api/search", q="red", per_page=4, page=page).json()
        assert body["page"] == page and len(body["hits"]) <= 4
        seen += [h["id"] for h in body["hits"]]
        if not body["has_more"]:
            break
        page += 1
    assert page == 2
    assert seen == [h["id"] for h in full] and len(seen) == 6


def test_min_probability_and_folder_filters(served):
    body = served.get("/api/search", q="red", min_probability=0.5).json()
    assert body["total"] == 2 and set(names(body["hits"])) == {"red_square.jpg", "red_disc.png"}
    nested = served.get("/api/search", q="blue", under=str(served.photos / "nested")).json()["hits"]
    assert set(names(nested)) == {"blue_wide.webp", "yellow.gif"}
    assert served.get("/api/search", q="blue").json()["warnings"] == []
    elsewhere = served.get("/api/search", q="blue", under="/nowhere/at/all").json()
    assert elsewhere["hits"] == []
    assert len(elsewhere["warnings"]) == 1 and "/nowhere/at/all" in elsewhere["warnings"][0]
    folders = served.get("/api/folders").json()["folders"]
    assert {f["folder"]: f["count"] for f in folders} == {
        str(served.photos): 4,
        str(served.photos / "nested"): 2,
    }


def test_more_like_this_uses_the_indexed_vector(served):
    blue = served.ids["blue_square.png"]
    body = served.get("/api/search", like=blue).json()
    assert set(names(body["hits"][:2])) == {"blue_square.png", "blue_wide.webp"}
    assert body["hits"][0]["probability"] is None  # image-only query: no calibrated probability
    mixed = served.get("/api/search", q="red", like=blue, min_probability=0.5).json()
    assert set(names(mixed["hits"])) == {"red_square.jpg", "red_disc.png"}


def test_sort_by_path(served):
    hits = served.get("/api/search", q="red", sort="path").json()["hits"]
    paths = [h["path"] for h in hits]
    assert paths == sorted(paths)


# -- bad parameters and hostile input -------------------------------------------------------------
@pytest.mark.parametrize(
    ("url", "status", "contains"),
    [
        ("/api/search", 400, "empty query"),
        ("/api/search?q=-+red", 400, "positive term"),
        ("/api/search?q=red&sort=evil", 400, "sort"),
        ("/api/search?q=red&min_probability=2", 400, "min_probability"),
        ("/api/search?q=red&per_page=0", 400, "per_page"),
        ("/api/search?q=red&page=100000", 400, "page"),
        ("/api/search?q=red&under=../../etc", 400, "absolute"),
        ("/api/search?like=../../etc/passwd", 400, "like"),
        ("/api/search?like=999999", 404, "not in this index"),
        ("/api/thumb/abc", 400, "integer"),
        ("/api/thumb/1.5", 400, "integer"),
        ("/api/thumb/-1", 400, "greater than"),
        ("/api/thumb/0", 400, "greater than"),
        ("/api/thumb/99999999999999999999999999", 400, "less than"),
        ("/api/thumb/999999", 404, "not in this index"),
        ("/api/thumb/..%2F..%2F..%2Fetc%2Fpasswd", 404, ""),
        ("/api/image/%2Fetc%2Fpasswd", 404, ""),
        ("/api/hit/1%20OR%201=1", 400, "integer"),
        ("/api/mask/1", 400, "prompt"),
        ("/api/mask/1?prompt=%20%20", 400, "prompt"),
        ("/api/mask/1/passwd?prompt=red", 400, "kind"),
        ("/api/mask/1/..%2F..%2Fcatalog.db?prompt=red", 404, ""),
        ("/static/..%2Fcatalog.db", 404, ""),
        ("/static/%2e%2e/%2e%2e/indexer/catalog.py", 404, ""),
        ("/api/nope", 404, "no such"),
    ],
)
def test_bad_parameters_get_a_clear_4xx(served, url, status, contains):
    r = served.client.get(url)
    body = assert_error(r, status, contains)
    assert "catalog" not in body["error"] or "not in this index" in body["error"]
    assert not r.headers["content-type"].startswith("image/")


def test_prompts_with_path_tricks_stay_inside_the_cache(served):
    green = served.ids["green.bmp"]
    r = served.get(f"/api/mask/{green}", prompt="../../../../tmp/evil red")
    assert r.status_code == 200
    written = [p for p in served.index.rglob("*") if "evil" in p.name]
    assert written and all(
        p.resolve().is_relative_to((served.index / "cache" / "masks").resolve()) for p in written
    )
    assert all("/" not in p.name and ".." not in p.name.split("-")[0] for p in written)


def test_foreign_host_header_is_refused(served):
    # A DNS-rebinding page reaches 127.0.0.1 with its own host name: no answer for it.
    r = served.client.get("/api/status", headers={"host": "evil.example"})
    assert r.status_code == 400
    assert served.client.get("/api/status", headers={"host": "localhost:8765"}).status_code == 200


def test_every_answer_tells_the_browser_not_to_sniff_and_the_page_its_policy(served):
    """A JSON answer, an image, an error and a refused Host all carry the headers; /docs
    (Swagger UI from a CDN) has no Content-Security-Policy of the page's."""
    red = served.ids["red_square.jpg"]
    for r in (
        served.get("/api/search", q="red"),
        served.get(f"/api/thumb/{red}"),
        served.get("/api/thumb/999999"),
        served.client.get("/api/status", headers={"host": "evil.example"}),
    ):
        assert r.headers["x-content-type-options"] == "nosniff", r.url
        assert r.headers["referrer-policy"] == "no-referrer"
        assert "default-src 'self'" in r.headers["content-security-policy"]
    docs = served.get("/docs")
    assert docs.status_code == 200 and "content-security-policy" not in docs.headers


def test_unexpected_errors_are_500_without_traceback(served, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("secret internal detail")

    for name in ("search", "ranked"):  # the web asks for ranked hits, built a page at a time
        monkeypatch.setattr(served.client.app.state.wherein.searcher, name, boom)
    c = TestClient(
        served.client.app, base_url=BASE, raise_server_exceptions=False
    )  # no `with`: keep the app open
    # A query this module never asked: an answer kept from an earlier test runs no search.
    r = c.get("/api/search", params={"q": "red", "camera": "never asked"})
    assert r.status_code == 500
    assert r.json() == {
        "error": "internal error: the details are in the server's log",
        "status": 500,
    }
    assert "secret" not in r.text and "Traceback" not in r.text


# -- files that changed since indexing ----------------------------------------------------------
def test_a_file_swapped_for_a_symlink_to_etc_passwd_is_refused(own):
    red = own.ids["red_square.jpg"]
    target = own.photos / "red_square.jpg"
    target.unlink()
    target.symlink_to("/etc/passwd")
    for url in (f"/api/thumb/{red}", f"/api/image/{red}", f"/api/mask/{red}?prompt=red"):
        r = own.client.get(url)
        assert_error(r, 409, "changed")
        assert b"root:" not in r.content
    # "More like this" uses the stored vector and never reads the file: still allowed, no leak.
    r = own.get("/api/search", like=red)
    assert r.status_code == 200 and b"root:" not in r.content
    assert Path(r.json()["hits"][0]["path"]).name in {"red_square.jpg", "red_disc.png"}


def test_same_size_and_time_but_other_content_is_refused(own):
    blue = own.ids["blue_square.png"]
    path = own.photos / "blue_square.png"
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[-20] ^= 0xFF  # same length, other bytes
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert_error(own.get(f"/api/thumb/{blue}"), 409, "content differs")


@pytest.mark.parametrize("special", ["fifo", "dev-zero"])
def test_a_special_file_in_place_of_the_file_is_a_json_error(own, special):
    green = own.ids["green.bmp"]
    path = own.photos / "green.bmp"
    path.unlink()
    os.mkfifo(path) if special == "fifo" else path.symlink_to("/dev/zero")
    for url in (
        f"/api/thumb/{green}",
        f"/api/image/{green}",
        f"/api/mask/{green}?prompt=green",
        f"/api/mask/{green}/overlay?prompt=green",
        f"/api/mask/{green}/mask?prompt=green",
    ):
        assert_error(own.get(url), 409, "no longer a regular file")


def test_a_deleted_file_is_404(own):
    yellow = own.ids["yellow.gif"]
    (own.photos / "nested" / "yellow.gif").unlink()
    assert_error(own.get(f"/api/image/{yellow}"), 404, "gone")
    hit = own.get(f"/api/hit/{yellow}").json()
    assert hit["exists"] is False


def test_a_deleted_file_shows_as_gone_on_whichever_page_it_falls(own):
    """Each page of a search says whether its files are still there, as they are now: also
    on a later page and on a page turn that reuses the search's answer."""
    walk = [own.get("/api/search", q="yellow", per_page=2, page=p).json() for p in (1, 2, 3)]
    assert all(h["exists"] for body in walk for h in body["hits"])
    yellow = own.ids["yellow.gif"]
    (own.photos / "nested" / "yellow.gif").unlink()
    for q in ("yellow", "yellow:2"):  # the answer asked before, then a new one
        seen = {}
        for p in (1, 2, 3):
            for h in own.get("/api/search", q=q, per_page=2, page=p).json()["hits"]:
                seen[h["id"]] = h["exists"]
        assert seen[yellow] is False
        assert all(exists for i, exists in seen.items() if i != yellow)


def cached_urls(image_id: int) -> list[str]:
    """What the page fetches of one hit: thumbnail, preview, a mask, its overlay and PNG."""
    return [
        f"/api/thumb/{image_id}",
        f"/api/image/{image_id}",
        f"/api/mask/{image_id}?prompt=red",
        f"/api/mask/{image_id}/overlay?prompt=red",
        f"/api/mask/{image_id}/mask?prompt=red",
    ]


def cache_entries(index: Path, image_id: int) -> list[Path]:
    cache = index / "cache"
    return [
        p for kind in ("thumbs", "previews", "masks") for p in (cache / kind).glob(f"{image_id}-*")
    ]


def test_a_deleted_photo_is_not_served_from_the_cache(own):
    red = own.ids["red_square.jpg"]
    for url in cached_urls(red):
        assert own.client.get(url).status_code == 200, url
    assert own.client.get(f"/api/thumb/{red}").headers["x-wherein-cache"] == "hit"
    assert len(cache_entries(own.index, red)) == 3
    (own.photos / "red_square.jpg").unlink()
    # Its cached derivatives are gone with it, and a new prompt does not reuse its vision pass.
    for url in cached_urls(red) + [f"/api/mask/{red}?prompt=blue"]:
        assert_error(own.client.get(url), 404, "gone")
    assert cache_entries(own.index, red) == []
    assert own.get(f"/api/hit/{red}").json()["exists"] is False


@pytest.mark.parametrize("same_size_and_time", [False, True])
def test_a_replaced_photo_never_serves_its_old_derivatives(own, same_size_and_time):
    red = own.ids["red_square.jpg"]
    path = own.photos / "red_square.jpg"
    for url in cached_urls(red):
        assert own.client.get(url).status_code == 200, url
    st = path.stat()
    if same_size_and_time:  # other bytes, same length, the old mtime put back
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    else:
        draw_shape(path, "blue")
    for url in cached_urls(red) + [f"/api/mask/{red}?prompt=blue"]:
        assert_error(own.client.get(url), 409, "changed" if not same_size_and_time else "differs")


def test_a_restarted_server_checks_the_content_of_what_an_earlier_one_cached(own, monkeypatch):
    from collections import OrderedDict

    from wherein.indexer import indexed as files

    green = own.ids["green.bmp"]
    path = own.photos / "green.bmp"
    assert own.client.get(f"/api/thumb/{green}").status_code == 200
    assert own.client.get(f"/api/thumb/{green}").headers["x-wherein-cache"] == "hit"
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[-100] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    monkeypatch.setattr(files, "_verified", OrderedDict())  # a new process has seen no file
    assert_error(own.get(f"/api/thumb/{green}"), 409, "differs")


def test_a_cached_photo_that_is_unchanged_still_serves_from_the_cache(own):
    # Re-saved under a new inode with the same bytes and times (a copy back, a restore):
    # its content hashes as indexed, so the cache still serves it.
    blue = own.ids["blue_square.png"]
    path = own.photos / "blue_square.png"
    assert own.client.get(f"/api/thumb/{blue}").status_code == 200
    st, data = path.stat(), path.read_bytes()
    path.unlink()
    path.write_bytes(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    r = own.client.get(f"/api/thumb/{blue}")
    assert r.status_code == 200 and r.headers["x-wherein-cache"] == "hit"


def test_an_image_indexed_through_a_symlink_still_serves(standin_models, tmp_path):
    outside = tmp_path / "elsewhere" / "red.png"
    draw_shape(outside, "red")
    photos = tmp_path / "photos"
    photos.mkdir()
    (photos / "linked.png").symlink_to(outside)
    build_index(photos, tmp_path / "index", standin_models)
    with TestClient(create_app(tmp_path / "index", standin_models), base_url=BASE) as c:
        hit = c.get("/api/search", params={"q": "red"}).json()["hits"][0]
        assert hit["path"] == str(photos / "linked.png")
        r = c.get(hit["thumb_url"])
    assert r.status_code == 200 and r.headers["content-type"] == "image/jpeg"


# -- thumbnails, previews, masks -------------------------------------------------------------------
def test_thumbnails_are_made_once_and_cached_under_the_index(served):
    blue = served.ids["blue_wide.webp"]
    hit = served.get(f"/api/hit/{blue}").json()
    schemas.validator("api.image.schema.json").validate(hit)
    first = served.client.get(hit["thumb_url"])
    assert first.status_code == 200 and first.headers["x-wherein-cache"] == "miss"
    cached = served.index / "cache" / "thumbs" / f"{blue}-{hit['sha256'][:16]}.jpg"
    assert cached.is_file()
    inode = cached.stat().st_ino  # a re-made entry would be a new file renamed into place
    second = served.client.get(hit["thumb_url"])
    assert second.headers["x-wherein-cache"] == "hit" and second.content == first.content
    assert cached.stat().st_ino == inode
    img = Image.open(io.BytesIO(first.content))
    assert img.format == "JPEG" and img.size == (384, 160)  # 480x200 fitted into 384
    preview = served.get(f"/api/image/{blue}")
    assert preview.status_code == 200 and Image.open(io.BytesIO(preview.content)).size == (480, 200)


def test_mask_of_red_on_a_red_image_boxes_the_red_region(served):
    red = served.ids["red_square.jpg"]
    before = served.get("/api/status").json()["masks"]
    r = served.get(f"/api/mask/{red}", prompt="red")
    assert r.status_code == 200
    m = r.json()
    schemas.validator("api.mask.schema.json").validate(m)
    x0, y0, x1, y1 = served.boxes["red_square.jpg"]  # drawn box, inclusive corners
    bx0, by0, bx1, by1 = m["bbox"]["largest"]
    tol = 16  # CLIPSeg (and its stand-in) see 16-px patches
    assert (
        abs(bx0 - x0) <= tol
        and abs(by0 - y0) <= tol
        and abs(bx1 - (x1 + 1)) <= tol
        and abs(by1 - (y1 + 1)) <= tol
    )
    assert (
        0.35 < m["mask_area"] < 0.65
        and m["regions"] == 1
        and (m["width"], m["height"]) == (320, 240)
    )
    overlay = served.client.get(m["overlay_url"])
    assert overlay.status_code == 200 and overlay.headers["content-type"] == "image/jpeg"
    assert Image.open(io.BytesIO(overlay.content)).size == (320, 240)
    mask = Image.open(io.BytesIO(served.client.get(m["mask_url"]).content))
    assert mask.size == (320, 240)
    # Cached on disk under INDEX/cache/masks; asking again runs nothing.
    folder = (
        served.index
        / "cache"
        / "masks"
        / f"{red}-{served.get(f'/api/hit/{red}').json()['sha256'][:16]}"
    )
    assert len(list(folder.glob("red-*.overlay.jpg"))) == 1
    again = served.get(f"/api/mask/{red}", prompt="red").json()
    assert again["cached"] is True and again["bbox"] == m["bbox"]
    # Another prompt on the same image reuses the vision pass.
    blue = served.get(f"/api/mask/{red}", prompt="blue").json()
    assert blue["bbox"] is None and blue["mask_area"] < 0.05
    after = served.get("/api/status").json()["masks"]
    assert after["vision_passes"] - before["vision_passes"] == 1
    assert after["decoder_runs"] - before["decoder_runs"] == 2


def test_after_a_search_the_first_hits_masks_are_made_in_the_background(
    standin_models, shapes, tmp_path
):
    build_index(shapes, tmp_path / "index", standin_models)
    app = create_app(tmp_path / "index", standin_models, prefetch_masks=2)
    with TestClient(app, base_url=BASE) as client:
        hits = client.get("/api/search", params={"q": "red", "per_page": 10}).json()["hits"]
        assert len(hits) >= 3

        def masks() -> dict:
            return client.get("/api/status").json()["masks"]

        deadline = time.monotonic() + 120
        while masks()["prefetched"] < 2:
            assert time.monotonic() < deadline, masks()
            time.sleep(0.05)
        made = masks()
        assert made["vision_passes"] == 2 and made["prefetch_queued"] == 0
        opened = client.get(f"/api/mask/{hits[0]['id']}", params={"prompt": "red"}).json()
        assert opened["cached"] is True  # ready before it was asked for
        assert masks()["vision_passes"] == 2
        third = client.get(f"/api/mask/{hits[2]['id']}", params={"prompt": "red"}).json()
        assert third["cached"] is False  # beyond the first two: made on request
        # An image query names no prompt: nothing is guessed.
        client.get("/api/search", params={"like": hits[0]["id"]})
        assert masks()["prefetch_queued"] == 0 and masks()["prefetched"] == 2


def test_status(served):
    s = served.get("/api/status").json()
    schemas.validator("api.status.schema.json").validate(s)
    assert s["images"] == 6 and s["standin"] is True and s["cache"]["writable"] is True
    assert s["index"] == str(served.index)


def test_status_is_one_object_in_the_cli_and_the_web_app(served, standin_models):
    """`wherein status --json` and /api/status report the index in one shape
    (schemas/status.schema.json): `models` was a dict in one and a string in the other."""
    import json

    import jsonschema

    from wherein.schemas.records import STATUS_SCHEMA_PATH

    r = CliRunner().invoke(
        cli, ["status", "--json", "--index", str(served.index), "--models", str(standin_models)]
    )
    assert r.exit_code == 0, r.output
    cli_status = json.loads(r.stdout)
    web = served.get("/api/status").json()
    schemas.validator("status.schema.json").validate(cli_status)
    schemas.validator("status.schema.json").validate(web)  # the web app extends it
    schemas.validator("api.status.schema.json").validate(web)
    jsonschema.Draft202012Validator.check_schema(json.loads(STATUS_SCHEMA_PATH.read_text()))
    assert web["models"] == cli_status["models"]
    assert web["models"]["standin"] is True and web["models"]["matches_index"] is True
    shared = set(cli_status) - {"skipped"}  # /api/status leaves the (long) list out
    assert shared <= set(web)
    assert {k: web[k] for k in shared} == {k: cli_status[k] for k in shared}


def test_nothing_is_written_outside_the_index_cache(own):
    before_photos = sorted(p.relative_to(own.photos) for p in own.photos.rglob("*"))
    before_index = {p for p in own.index.iterdir() if p.name != "cache"}
    red = own.ids["red_disc.png"]
    for url in (
        f"/api/thumb/{red}",
        f"/api/image/{red}",
        f"/api/mask/{red}?prompt=red",
        "/api/status",
    ):
        assert own.client.get(url).status_code == 200
    assert sorted(p.relative_to(own.photos) for p in own.photos.rglob("*")) == before_photos
    assert {p for p in own.index.iterdir() if p.name != "cache"} <= before_index | {
        own.index / "catalog.db-wal",
        own.index / "catalog.db-shm",
    }


def test_the_page_and_its_static_files(served):
    page = served.client.get("/")
    assert page.status_code == 200 and 'id="q"' in page.text
    assert "default-src 'self'" in page.headers["content-security-policy"]
    for name in ("app.js", "style.css", "favicon.svg"):
        assert served.client.get(f"/static/{name}").status_code == 200


def test_openapi_documents_the_json_schemas(served):
    doc = served.client.get("/openapi.json").json()
    comps = doc["components"]["schemas"]
    assert {
        "Hit",
        "SearchResponse",
        "MaskResponse",
        "StatusResponse",
        "IndexStatus",
        "ImageRecord",
        "Error",
    } <= set(comps)
    ok = doc["paths"]["/api/search"]["get"]["responses"]["200"]["content"]["application/json"][
        "schema"
    ]
    assert ok == {"$ref": "#/components/schemas/SearchResponse"}


# -- the command -------------------------------------------------------------------------------
def test_serve_binds_loopback_by_default_and_warns_otherwise(served, standin_models, monkeypatch):
    from wherein.search.web import protocol

    calls = []

    class Bound:  # the server serve would run, on the socket it bound (not started here)
        def __init__(self, app, sock) -> None:
            calls.append(sock.getsockname()[:2])

        def serve_forever(self) -> bool:
            return True

    monkeypatch.setattr(protocol, "HTTPServer", Bound)
    args = ["serve", "--index", str(served.index), "--models", str(standin_models)]
    quiet = CliRunner().invoke(cli, args)
    assert quiet.exit_code == 0, quiet.output
    assert calls[-1] == ("127.0.0.1", 8765)
    assert "WARNING" not in quiet.output
    loud = CliRunner().invoke(cli, [*args, "--host", "0.0.0.0", "--port", "9000"])
    assert loud.exit_code == 0 and calls[-1] == ("0.0.0.0", 9000)
    assert "WARNING: listening on 0.0.0.0" in loud.output


def test_serve_without_an_index_is_a_one_line_error(tmp_path, standin_models):
    r = CliRunner().invoke(
        cli, ["serve", "--index", str(tmp_path / "none"), "--models", str(standin_models)]
    )
    assert r.exit_code == 1 and "no wherein index here" in r.output
