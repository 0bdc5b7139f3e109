"""The web app's two guards without a server: the Host check, and serving only indexed content."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import threading
from pathlib import Path

import pytest

from wherein.indexer.indexed import IndexedFile, read_verified
from wherein.schemas.errors import FileChanged, NotFound
from wherein.search.web.app import LOOPBACK_HOSTS, TrustedHosts


# -- the Host check (DNS rebinding) ---------------------------------------------------------
def ask(host: str, allowed: list[str] = LOOPBACK_HOSTS) -> tuple[int, dict | str]:
    """One GET through TrustedHosts in front of an app that answers 200 'ok'."""

    async def inner(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    scope = {
        "type": "http",
        "method": "GET",
        "path": "/api/status",
        "raw_path": b"/api/status",
        "query_string": b"",
        "headers": [(b"host", host.encode("latin-1"))],
        "http_version": "1.1",
        "scheme": "http",
        "root_path": "",
    }
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    asyncio.run(TrustedHosts(inner, allowed)(scope, receive, send))
    status = sent[0]["status"]
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return status, (body.decode() if status == 200 else json.loads(body))


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "127.0.0.1:8765",
        "localhost",
        "localhost:8765",
        "LOCALHOST:8765",
        "[::1]",
        "[::1]:8765",
    ],
)
def test_loopback_names_are_served(host):
    assert ask(host) == (200, "ok")


@pytest.mark.parametrize(
    "host", ["evil.com", "evil.com:8765", "127.0.0.1.evil.com", "localhost.evil.com:8765"]
)
def test_other_names_get_a_json_400_that_says_what_to_open(host):
    status, body = ask(host)
    assert status == 400
    assert isinstance(body, dict) and body["status"] == 400
    assert "not served here" in body["error"] and "\n" not in body["error"]


def test_a_server_started_for_any_host_serves_every_name():
    assert ask("evil.com:80", allowed=["*"]) == (200, "ok")


def test_an_allowed_list_is_matched_without_case():
    assert ask("Photos.LAN:8765", allowed=["photos.lan"]) == (200, "ok")
    assert ask("localhost:8765", allowed=["photos.lan"])[0] == 400


# -- serving only what was indexed ----------------------------------------------------------
def indexed(path: Path, id_: int = 7) -> IndexedFile:
    """The catalog row wherein index would have written for path as it is now."""
    st = os.stat(path)
    row = {
        "id": id_,
        "path": str(path),
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "width": 2,
        "height": 2,
        "format": "PNG",
        "indexed_at": None,
    }
    return IndexedFile.from_row(row)


@pytest.fixture()
def photo(tmp_path) -> Path:
    p = tmp_path / "photo.png"
    p.write_bytes(b"\x89PNG pretend image bytes")
    return p


def test_the_indexed_content_is_served(photo):
    assert read_verified(indexed(photo)) == photo.read_bytes()


def test_a_file_edited_since_indexing_is_refused(photo):
    f = indexed(photo)
    photo.write_bytes(b"\x89PNG other bytes, longer")
    with pytest.raises(FileChanged, match="changed since it was indexed"):
        read_verified(f)


def test_same_size_and_time_but_other_content_is_refused(photo):
    """A tool that restores the mtime (rsync -t, cp -p) cannot sneak other bytes in."""
    f = indexed(photo)
    photo.write_bytes(photo.read_bytes().replace(b"pretend", b"PRETEND"))
    os.utime(photo, ns=(f.mtime_ns, f.mtime_ns))
    with pytest.raises(FileChanged, match="content differs"):
        read_verified(f)


def test_a_vanished_file_is_not_found(photo):
    f = indexed(photo)
    photo.unlink()
    with pytest.raises(NotFound, match="gone"):
        read_verified(f)


def test_a_symlink_swapped_in_to_another_file_is_refused(photo, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"not for the web")
    f = indexed(photo)
    photo.unlink()
    photo.symlink_to(secret)
    with pytest.raises(FileChanged):
        read_verified(f)


def test_an_image_indexed_through_a_symlink_still_serves(photo, tmp_path):
    link = tmp_path / "album" / "link.png"
    link.parent.mkdir()
    link.symlink_to(photo)
    assert read_verified(indexed(link)) == photo.read_bytes()


def test_a_fifo_or_folder_in_its_place_is_refused_without_hanging(photo):
    f = indexed(photo)
    photo.unlink()
    os.mkfifo(photo)
    # Opening a FIFO for reading blocks until a writer comes; a worker must not hang on one.
    result: list[BaseException] = []
    worker = threading.Thread(target=lambda: _capture(result, f), daemon=True)
    worker.start()
    worker.join(timeout=10)  # a guard against hanging the suite, not a measurement
    assert not worker.is_alive() and isinstance(result[0], FileChanged)
    photo.unlink()
    photo.mkdir()
    with pytest.raises(FileChanged, match="no longer a regular file"):
        read_verified(f)


def _capture(out: list[BaseException], f: IndexedFile) -> None:
    try:
        read_verified(f)
    except BaseException as exc:  # noqa: BLE001 - handed to the test thread to assert on
        out.append(exc)


def test_an_unreadable_file_is_not_found_not_a_crash(photo, monkeypatch):
    f = indexed(photo)

    def refuse(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", path)

    # chmod 0 would do where the tests do not run as root; root opens any file regardless.
    monkeypatch.setattr(os, "open", refuse)
    with pytest.raises(NotFound, match="cannot open its file .Permission denied"):
        read_verified(f)


@pytest.mark.parametrize("sha", ["", "xyz", "A" * 64, "0" * 63, "../" + "0" * 61])
def test_a_row_without_a_hex_sha256_is_refused(photo, sha):
    """Cache file names are built from the hash: anything but 64 hex digits never gets that far."""
    row = {"id": 3, "path": str(photo), "size": 1, "mtime_ns": 1, "sha256": sha}
    with pytest.raises(FileChanged, match="no valid SHA-256"):
        IndexedFile.from_row(row)


def test_the_cache_key_names_the_id_and_the_content(photo):
    f = indexed(photo, id_=12)
    assert f.key == f"12-{f.sha256[:16]}"
