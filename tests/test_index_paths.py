"""`wherein index` takes any file name the OS allows: not UTF-8, or the same name in NFC and NFD."""

from __future__ import annotations

import base64
import json
import os
import unicodedata
from pathlib import Path

from click.testing import CliRunner

from wherein.indexer.store.index_store import IndexStore
from wherein.search.cli import cli

from conftest import draw_shape


def index_json(*args: str) -> dict:
    res = CliRunner().invoke(cli, ["index", "--json", *args], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return json.loads(res.output[res.output.index("{") :])


def test_odd_names_are_indexed_once_and_then_unchanged(env, tmp_path):
    root = tmp_path / "photos"
    latin1 = os.fsdecode(os.fsencode(root) + b"/caf\xe9.png")  # a Latin-1 name: not UTF-8
    nfc = str(root / unicodedata.normalize("NFC", "r\u00e9sum\u00e9.png"))
    nfd = str(root / unicodedata.normalize("NFD", "r\u00e9sum\u00e9.png"))
    draw_shape(Path(latin1), "red")
    draw_shape(Path(nfc), "blue")
    draw_shape(Path(nfd), "green")
    assert len(os.listdir(os.fsencode(root))) == 3

    first = index_json(str(root))
    assert first["embedded"] == 3 and first["skipped"] == 0
    second = index_json(str(root))
    assert second["unchanged"] == 3 and second["embedded"] == 0 and second["skipped"] == 0

    with IndexStore.open(env["index"]) as store:
        known = store.catalog.known_files()
        assert set(known) == {latin1, nfc, nfd}
        assert len({row[0] for row in known.values()}) == 3  # three rows, three vectors
        assert store.catalog.skipped() == []
    status = CliRunner().invoke(cli, ["status", "--check", "--json"])
    assert status.exit_code == 0, status.output

    # Search and the web app hand such a name on instead of failing on it.
    # JSON text carries a readable path and the exact bytes (schemas/hit.schema.json).
    exact = base64.b64encode(os.fsencode(latin1)).decode()
    readable = os.fsencode(latin1).decode("utf-8", "replace")
    hits = CliRunner().invoke(cli, ["search", "red", "--json", "-k", "3"])
    top = json.loads(hits.stdout)[0]
    assert hits.exit_code == 0 and (top["path"], top["path_b64"]) == (readable, exact)
    from fastapi.testclient import TestClient

    from wherein.search.web.app import create_app

    app = create_app(env["index"], env["models"])
    with TestClient(app, base_url="http://127.0.0.1") as client:
        res = client.get("/api/search", params={"q": "red"})
        top = res.json()["hits"][0]
        assert res.status_code == 200 and (top["path"], top["path_b64"]) == (readable, exact)
        image = client.get(f"/api/image/{top['id']}")
        assert image.status_code == 200 and image.headers["content-type"].startswith("image/")


def test_shell_hostile_names_round_trip(env, tmp_path):
    """Newline, tab, a leading dash, a 255-byte name and 40 nested folders: indexed once,
    found by search with the exact name, and moves and deletions seen by the next run."""
    root = tmp_path / "photos"
    deep = root.joinpath(*[f"d{i:02d}" for i in range(40)])
    names = {
        root / "line\nbreak.png": "red",
        root / "tab\there.png": "blue",
        root / "-rf.png": "green",
        root / ("a" * 251 + ".png"): "yellow",
        deep / "deep.png": "red",
    }
    assert len(os.fsencode("a" * 251 + ".png")) == 255
    for path, colour in names.items():
        draw_shape(path, colour)
    wanted = {str(p) for p in names}

    first = index_json("--", str(root))
    # deep.png has the same bytes as line\nbreak.png: one model run for the two
    assert (first["embedded"], first["copied"], first["skipped"]) == (4, 1, 0), first
    second = index_json("--", str(root))
    assert second["unchanged"] == 5 and second["embedded"] == 0, second

    def found() -> tuple[set[str], set[bytes]]:
        hits = CliRunner().invoke(cli, ["search", "red", "--json", "-k", "50"])
        assert hits.exit_code == 0, hits.output
        paths0 = CliRunner().invoke(cli, ["search", "red", "--paths0", "-k", "50"])
        assert paths0.exit_code == 0, paths0.output
        chunks = paths0.stdout_bytes.split(b"\0")
        assert chunks[-1] == b""
        return {h["path"] for h in json.loads(hits.stdout)}, set(chunks[:-1])

    assert found() == (wanted, {os.fsencode(p) for p in wanted})

    moved_from, moved_to = root / "-rf.png", root / "new\nline -x.png"
    os.rename(moved_from, moved_to)
    (root / "tab\there.png").unlink()
    third = index_json("--", str(root))
    assert (third["moved"], third["deleted"], third["embedded"]) == (1, 1, 0), third
    wanted = (wanted - {str(moved_from), str(root / "tab\there.png")}) | {str(moved_to)}
    assert found() == (wanted, {os.fsencode(p) for p in wanted})
