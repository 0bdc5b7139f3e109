"""--unlike (CLI) and unlike= (web) subtract an image from the query: the photos like it sink
to the bottom of the results, where --like lifts them to the top. A sign slip that adds the
image instead would leave the red photos first in every test here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from wherein.search.cli import cli
from wherein.search.web.app import create_app

REDS = {"red_square.jpg", "red_disc.png"}


@pytest.fixture()
def indexed(env, shapes) -> Path:
    res = CliRunner().invoke(cli, ["index", str(shapes), "-q"])
    assert res.exit_code == 0, res.output
    return shapes


def _names(*args: str) -> list[str]:
    res = CliRunner().invoke(cli, ["search", *args, "-k", "6", "--json"])
    assert res.exit_code == 0, res.output
    body = json.loads(res.stdout)
    hits = body["hits"] if isinstance(body, dict) else body
    return [Path(h["path"]).name for h in hits]


def test_unlike_sinks_the_photos_like_it_and_like_lifts_them(indexed):
    red = str(indexed / "red_square.jpg")
    assert set(_names("red", "--like", red)[:2]) == REDS
    # "red" minus a red photo: whatever is left of red scores below every other colour
    assert set(_names("red", "--unlike", red)[-2:]) == REDS
    assert set(_names("green", "--unlike", red)[-2:]) == REDS


def test_the_web_apps_unlike_subtracts_an_indexed_photo(indexed, env):
    with TestClient(create_app(env["index"], env["models"]), base_url="http://127.0.0.1") as c:
        hits = c.get("/api/search", params={"q": "red", "per_page": 6}).json()["hits"]
        red = next(h["id"] for h in hits if Path(h["path"]).name == "red_square.jpg")
        body = c.get("/api/search", params={"q": "red", "unlike": red, "per_page": 6}).json()
        assert {Path(h["path"]).name for h in body["hits"][-2:]} == REDS, body["hits"]
