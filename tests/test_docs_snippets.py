"""Every Python snippet in the docs (README.md and docs/*.md) runs as written, against a small
index made with the stand-in models: a snippet a newcomer copies must not raise."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from wherein.search.cli import cli

from conftest import draw_shape

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _snippets() -> list:
    found = []
    for page in _pages():
        text = page.read_text()
        for m in FENCE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            found.append(pytest.param(m.group(1), id=f"{page.relative_to(ROOT)}:{line}"))
    return found


def test_the_snippets_are_found():
    # README.md's and docs/search.md's Python API: the collection itself must not go blind.
    ids = [p.id for p in _snippets()]
    assert any(i.startswith("README.md:") for i in ids)
    assert any(i.startswith("docs/search.md:") for i in ids)


@pytest.fixture()
def library(env, tmp_path) -> Path:
    """A small indexed library (photos of coloured shapes, a red car among them), and a
    folder to run in that holds ref.jpg, the photo the snippets' --like names."""
    photos = tmp_path / "photos"
    for name, colour in [("red_car.jpg", "red"), ("beach.png", "yellow"), ("sea.png", "blue")]:
        draw_shape(photos / name, colour)
    r = CliRunner().invoke(cli, ["index", str(photos), "-q"])
    assert r.exit_code == 0, r.output
    here = tmp_path / "here"
    here.mkdir()
    shutil.copy(photos / "red_car.jpg", here / "ref.jpg")
    return here


@pytest.mark.parametrize("code", _snippets())
def test_a_docs_snippet_runs(code, library, monkeypatch):
    monkeypatch.chdir(library)
    exec(compile(code, "<docs snippet>", "exec"), {"__name__": "__docs__"})
