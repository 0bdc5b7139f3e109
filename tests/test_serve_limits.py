"""The web app under pressure: a foreign Host header gets the same JSON error as every other
refusal, and INDEX/cache stays under its size limit, dropping the least recently used
entries and never a file that is being served."""

from __future__ import annotations

import os
import threading
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from wherein.schemas.errors import IndexError_
from wherein.search.cache.limit import CacheJanitor, cache_limit_bytes
from wherein.search.cli import cli
from wherein.search.service.mask import MaskSession as MaskService
from wherein.search.web import schemas
from wherein.search.web.app import create_app, host_name

from conftest import draw_shape

BASE = "http://127.0.0.1"
ROOT = Path(__file__).resolve().parents[1]


def test_web_app_is_part_of_the_base_install():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = {d.split(">")[0].split("=")[0].split("[")[0].strip() for d in project["dependencies"]}
    assert {"fastapi", "uvicorn"} <= base


# -- Host header ------------------------------------------------------------------------------
def build(root: Path, models: Path) -> Path:
    for i, colour in enumerate(["red", "blue", "green", "yellow", "red", "blue"]):
        draw_shape(root / "photos" / f"{i}-{colour}.png", colour, size=(640 + 8 * i, 480))
    r = CliRunner().invoke(
        cli,
        ["index", str(root / "photos"), "--index", str(root / "index")]
        + ["--models", str(models), "-q"],
    )
    assert r.exit_code == 0, r.output
    return root / "index"


@pytest.fixture(scope="module")
def app_client(standin_models, tmp_path_factory):
    return build(tmp_path_factory.mktemp("limits"), standin_models), standin_models


def test_foreign_host_is_a_json_400(app_client):
    index, models = app_client
    with TestClient(create_app(index, models), base_url=BASE) as client:
        r = client.get("/api/search", params={"q": "red"}, headers={"host": "evil.example:8765"})
        assert r.status_code == 400 and r.headers["content-type"] == "application/json"
        body = r.json()
        schemas.validator("api.error.schema.json").validate(body)
        assert body["status"] == 400 and "evil.example" in body["error"]
        for ok in ("127.0.0.1:8765", "localhost", "[::1]:8765", "LOCALHOST:1"):
            assert client.get("/api/status", headers={"host": ok}).status_code == 200, ok


@pytest.mark.parametrize(
    "header, host",
    [
        ("localhost:8765", "localhost"),
        ("[::1]:8765", "[::1]"),
        ("[::1]", "[::1]"),
        ("127.0.0.1", "127.0.0.1"),
        ("Evil.Example", "evil.example"),
        ("photos.local:65535", "photos.local"),
    ],
)
def test_host_name(header, host):
    assert host_name(header) == host


HOSTILE_HOSTS = [
    "127.0.0.1:80@evil.com",  # user-info trick: a lax split would read 127.0.0.1
    '"127.0.0.1 "',
    "127.0.0.1 ",
    " localhost",
    "localhost:8765:80",
    "localhost:",
    "localhost:80x",
    "localhost:99999",
    "localhost:+80",
    "localhost/evil",
    "localhost\\evil",
    "evil.com#.localhost",
    "[::1]evil",
    "[::1]:80@evil.com",
    "[::1",
    "[fe80::1%25eth0]",
    "[localhost]",
    "-localhost",
    "local_host",
    "",
]


@pytest.mark.parametrize("header", HOSTILE_HOSTS)
def test_host_name_refuses_anything_but_host_and_port(header):
    assert host_name(header) is None


def test_hostile_host_headers_are_refused(app_client):
    index, models = app_client
    with TestClient(create_app(index, models), base_url=BASE) as client:
        for header in HOSTILE_HOSTS:
            r = client.get("/api/status", headers={"host": header})
            assert r.status_code == 400, header
            assert r.json()["status"] == 400


# -- the cache janitor ------------------------------------------------------------------------
def entry(folder: Path, name: str, size: int, used_s: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / name
    p.write_bytes(b"x" * size)
    os.utime(p, ns=(used_s * 10**9, used_s * 10**9))
    return p


def test_prunes_least_recently_used_first(tmp_path):
    thumbs = tmp_path / "thumbs"
    files = [entry(thumbs, f"{i}-abc.jpg", 1000, used_s=1000 + i) for i in range(10)]
    janitor = CacheJanitor(tmp_path, limit_bytes=5000)
    janitor.used(files[0])  # the oldest, just used again: now the most recent
    janitor.added([entry(thumbs, "new-abc.jpg", 1000, used_s=5000)])
    kept = sorted(p.name for p in thumbs.iterdir())
    # Back under 90% of the limit, deleting in order of last use: 1, 2, ..., 7; the two
    # most recent old ones, the one used again and the new entry stay.
    assert kept == ["0-abc.jpg", "8-abc.jpg", "9-abc.jpg", "new-abc.jpg"]
    assert janitor.pruned == 7


def test_never_deletes_a_file_being_served(tmp_path):
    thumbs = tmp_path / "thumbs"
    files = [entry(thumbs, f"{i}-abc.jpg", 1000, used_s=1000 + i) for i in range(6)]
    janitor = CacheJanitor(tmp_path, limit_bytes=3000)
    with janitor.pinned(files[0]), janitor.pinned(files[1]):
        janitor.prune()
        assert files[0].exists() and files[1].exists()  # the two oldest, but in use
    assert not any(f.exists() for f in files[2:])  # the rest had to go instead
    janitor.added([entry(thumbs, "6-abc.jpg", 1500, used_s=3000)])  # over the limit again
    assert not files[0].exists() and files[1].exists()  # unpinned, the oldest goes first


def test_mask_entry_goes_as_one_unit_json_first(tmp_path, monkeypatch):
    folder = tmp_path / "masks" / "3-0123456789abcdef"
    old = [entry(folder, f"red-aaaaaaaaaaaa.{s}", 400, 1000) for s in ("overlay.jpg", "mask.png")]
    old.append(entry(folder, "red-aaaaaaaaaaaa.json", 200, 1000))
    new = entry(folder, "blue-bbbbbbbbbbbb.json", 200, 3000)
    entry(folder, "blue-bbbbbbbbbbbb.overlay.jpg", 400, 3000)
    order: list[str] = []
    real_unlink = Path.unlink

    def unlink(self, missing_ok=False):
        order.append(self.name)
        real_unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", unlink)
    CacheJanitor(tmp_path, limit_bytes=1000).prune()
    assert order[0] == "red-aaaaaaaaaaaa.json" and len(order) == 3
    assert not any(p.exists() for p in old) and new.exists()


def test_pruning_everything_keeps_the_kind_folders(tmp_path):
    # Request threads write and list thumbs/ while a prune runs: it must never vanish.
    thumbs = [entry(tmp_path / "thumbs", f"{i}-abc.jpg", 1000, 1000 + i) for i in range(3)]
    mask = entry(tmp_path / "masks" / "3-0123456789abcdef", "red-aaaaaaaaaaaa.json", 1000, 1)
    CacheJanitor(tmp_path, limit_bytes=10).prune()
    assert not any(p.exists() for p in [*thumbs, mask])
    assert (tmp_path / "thumbs").is_dir() and (tmp_path / "masks").is_dir()
    assert not mask.parent.exists()  # an image's emptied mask folder goes


def test_limit_setting(monkeypatch):
    monkeypatch.delenv("WHEREIN_CACHE_MB", raising=False)
    assert cache_limit_bytes() == 512 * 1024 * 1024
    monkeypatch.setenv("WHEREIN_CACHE_MB", "2")
    assert cache_limit_bytes() == 2 * 1024 * 1024
    assert cache_limit_bytes(0.5) == 512 * 1024


# -- the app with a tiny cache, many clients ------------------------------------------------------
@pytest.mark.slow
def test_tiny_cache_under_concurrent_clients_never_fails(app_client):
    index, models = app_client
    limit = 60_000  # a few previews' worth: pruning runs all the time
    with TestClient(create_app(index, models, cache_mb=limit / 2**20), base_url=BASE) as client:
        hits = client.get("/api/search", params={"q": "red", "per_page": 50}).json()["hits"]
        urls = [h[k] for h in hits for k in ("thumb_url", "image_url")]
        urls += [f"/api/mask/{h['id']}/overlay?prompt=red" for h in hits[:2]]
        errors: list[str] = []
        lock = threading.Lock()

        def fetch(url: str) -> None:
            r = client.get(url)
            if r.status_code != 200 or not r.content:
                with lock:
                    errors.append(f"{url}: {r.status_code} {r.text[:200]}")

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(fetch, urls * 6))
        assert errors == []
        cache = client.app.state.wherein.janitor
        assert cache.pruned > 0
        status = client.get("/api/status").json()
        schemas.validator("api.status.schema.json").validate(status)
        biggest = max(len(client.get(u).content) for u in urls)
        cache.prune()
        assert client.get("/api/status").json()["cache"]["bytes"] <= limit + biggest


# -- shutdown ----------------------------------------------------------------------------------
def test_shutdown_waits_for_a_running_mask_guess(standin_models, tmp_path, monkeypatch):
    """A guess runs on the mask worker (reading catalog rows) when the app shuts down: the
    worker finishes it before the catalog closes, the queued guesses are cancelled, and a
    read after close is a clean error, not a closed connection (once, a segfault)."""
    from wherein.indexer.models.clipseg import load_cached

    index = build(tmp_path, standin_models)
    app = create_app(index, standin_models, prefetch_masks=3)
    state = app.state.wherein
    real = load_cached(standin_models, None)
    started, closing = threading.Event(), threading.Event()

    class SlowUntilShutdown:
        """The real model, whose vision pass lasts until the app starts closing."""

        def __getattr__(self, name):
            return getattr(real, name)

        def image_features(self, img):
            started.set()
            closing.wait(60)
            return real.image_features(img)

    slow = SlowUntilShutdown()
    monkeypatch.setattr(MaskService, "model", property(lambda self: slow))
    close_masks, close_catalog = state.masks.close, state.catalog.close
    at_catalog_close: dict[str, object] = {}

    def masks_close() -> None:
        closing.set()
        close_masks()

    def catalog_close() -> None:
        at_catalog_close["worker_alive"] = state.masks._runner._thread.is_alive()
        at_catalog_close["prefetched"] = state.masks.prefetched
        close_catalog()

    monkeypatch.setattr(state.masks, "close", masks_close)
    monkeypatch.setattr(state.catalog, "close", catalog_close)
    with TestClient(app, base_url=BASE) as client:
        assert client.get("/api/search", params={"q": "red"}).status_code == 200
        assert started.wait(60)  # a guess is inside the vision pass
    assert at_catalog_close == {"worker_alive": False, "prefetched": 1}
    assert state.masks.prefetch_queued == 0  # the other two were cancelled
    with pytest.raises(IndexError_, match="shutting down"):
        state.indexed(1)


# -- memory under many clients ---------------------------------------------------------------------
def test_photos_are_decoded_and_searches_run_on_a_few_threads(
    standin_models, tmp_path, monkeypatch
):
    """However many clients ask at once, the heavy work (decoding a photo for a thumbnail or
    preview, a search) runs on the app's few work threads, not on each request's: malloc
    keeps a busy thread's freed memory, and a search starts OpenMP threads per caller, so
    the server's memory grew with its clients (991 -> 1714 MB at 32)."""
    from wherein.search.cache.thumbs import ResizedCache
    from wherein.search.web.app import WORK_THREADS

    index = build(tmp_path, standin_models)
    decoders: set[str] = set()
    searchers: set[str] = set()
    real_render = ResizedCache.render

    def render(self, data):
        decoders.add(threading.current_thread().name)
        return real_render(self, data)

    monkeypatch.setattr(ResizedCache, "render", render)
    app = create_app(index, standin_models, prefetch_masks=0)
    searcher = app.state.wherein.searcher
    real_search, real_rows = searcher.ranked, searcher.store.catalog.hit_rows
    joins: set[str] = set()

    def search(*args, **kwargs):
        searchers.add(threading.current_thread().name)
        return real_search(*args, **kwargs)

    def hit_rows(ids):
        joins.add(threading.current_thread().name)
        return real_rows(ids)

    # The web's way in (hits built as read); a new search's page is built on its thread.
    monkeypatch.setattr(searcher, "ranked", search)
    monkeypatch.setattr(searcher.store.catalog, "hit_rows", hit_rows)
    with TestClient(app, base_url=BASE) as client:
        ids = [h["id"] for h in client.get("/api/search", params={"q": "red"}).json()["hits"]]
        urls = [f"/api/{kind}/{i}" for i in ids for kind in ("thumb", "image")]
        urls += [f"/api/search?q={c}" for c in ["red", "blue", "green", "yellow"] * 4]
        with ThreadPoolExecutor(16) as pool:
            statuses = list(pool.map(lambda u: client.get(u).status_code, urls))
    assert statuses == [200] * len(urls)
    assert len(decoders) <= WORK_THREADS and len(searchers) <= WORK_THREADS
    assert all(n.startswith("wherein-decode") for n in decoders), decoders
    assert searchers and all(n.startswith("wherein-search") for n in searchers), searchers
    assert joins and all(n.startswith("wherein-search") for n in joins), joins
