"""End to end in a real browser: `wherein serve` on a loopback port, headless Chromium types a
query, sees the red images first, opens a hit and sees its mask overlay, box and area."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from live_server import live_server

from wherein.search.web.app import create_app

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Set WHEREIN_SCREENSHOT=PATH to keep a copy (bench/results/serve-screenshot.png was made so);
# a test run never writes into the checkout by default.
SCREENSHOT_COPY = os.environ.get("WHEREIN_SCREENSHOT")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="needs Debian's chromium at /usr/bin/chromium (apt-get install chromium)",
    ),
]


def serve(folder: Path, index: Path, models: Path):
    """`wherein index` over folder, then the app on a loopback port (yields its base URL)."""
    from click.testing import CliRunner

    from wherein.search.cli import cli

    r = CliRunner().invoke(
        cli, ["index", str(folder), "--index", str(index), "--models", str(models), "-q"]
    )
    assert r.exit_code == 0, r.output
    with live_server(create_app(index, models)) as (_, port):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture()
def server(standin_models, shapes, tmp_path):
    yield from serve(shapes, tmp_path / "index", standin_models)


@contextmanager
def opened_page(url: str) -> Iterator[tuple[Any, list[str]]]:
    """Headless Chromium at url (CSP bypassed: Playwright's wait_for_function evaluates), and
    the page errors it collects."""
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="needs the [browser] extra (playwright)"
    )
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800}, bypass_csp=True)
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url)
            yield page, errors
        finally:
            browser.close()


def test_search_open_a_hit_and_see_its_mask(server, tmp_path):
    with opened_page(server + "/") as (page, errors):
        page.fill("#q", "red")
        page.press("#q", "Enter")
        page.wait_for_selector("#grid .card")
        names = page.eval_on_selector_all("#grid .card .name", "els => els.map(e => e.textContent)")
        assert len(names) == 6
        assert set(names[:2]) == {"red_square.jpg", "red_disc.png"}, names
        probs = page.eval_on_selector_all("#grid .card .prob", "els => els.map(e => e.textContent)")
        assert probs[0].endswith("%") and float(probs[0].rstrip(" %")) > 50
        # Six hits fit one page: no pager (a `display: flex` once overrode `hidden`).
        assert page.is_hidden("#pager")
        page.wait_for_function(
            "[...document.querySelectorAll('#grid .card img')].every(i => i.complete && i.naturalWidth > 0)"
        )
        # Where: the red hits' thumbnails get their mask's box, first hits first.
        page.wait_for_function(
            "document.querySelectorAll('#grid .card .where').length >= 2", timeout=60_000
        )
        boxed = page.eval_on_selector_all(
            "#grid .card", "els => els.map(e => !!e.querySelector('.where'))"
        )
        assert boxed[:2] == [True, True], boxed
        left = page.eval_on_selector("#grid .card .where", "e => parseFloat(e.style.left)")
        assert 5 < left < 25, left  # the shapes start 10-15% in from the left
        page.uncheck("#show-where")
        assert page.is_hidden("#grid .card .where")
        page.check("#show-where")
        assert page.is_visible("#grid .card .where")
        page.screenshot(path=str(tmp_path / "grid.png"))

        page.click("#grid .card >> nth=0")
        page.wait_for_selector("#detail[open]")
        page.wait_for_function(
            "document.getElementById('d-img').naturalWidth > 0"
            " && document.getElementById('d-img').src.includes('/overlay')"
            " && document.getElementById('d-bbox').textContent.startsWith('x ')",
            timeout=60_000,
        )
        area = page.text_content("#d-area")
        bbox = page.text_content("#d-bbox")
        assert "% of the image" in area and 30 < float(area.split("%")[0]) < 70, area
        assert "px" in bbox, bbox
        shot = tmp_path / "serve-screenshot.png"
        page.screenshot(path=str(shot))

        # Another prompt on the same image: blue finds nothing on a red image.
        page.fill("#d-prompt", "blue")
        page.press("#d-prompt", "Enter")
        page.wait_for_function("document.getElementById('d-bbox').textContent.startsWith('none')")

        # More like this: an image query from the hit's indexed vector.
        page.click("#d-like")
        page.wait_for_selector(".chip")
        page.wait_for_function("document.querySelector('#message').textContent.startsWith('Hits')")
        like_names = page.eval_on_selector_all(
            "#grid .card .name", "els => els.map(e => e.textContent)"
        )
        assert set(like_names[:2]) == {"red_square.jpg", "red_disc.png"}, like_names
        assert errors == []
    if SCREENSHOT_COPY:
        shutil.copyfile(shot, SCREENSHOT_COPY)


@pytest.fixture()
def video_server(standin_models, tmp_path):
    """A photo and a clip: red with a grey strip 0-2 s, blue 2-6 s, red 6-8 s: two moments for
    "red" whose best frames do not tie, the best one not at the start (a player starts there)."""
    from video_files import BLUE, RED, W, solid, write_video

    from conftest import draw_shape

    library = tmp_path / "library"
    draw_shape(library / "blue.png", "blue")
    part_red = solid(RED)
    part_red[:, -W // 5 :] = (128, 128, 128)  # a grey strip: red, but less of it
    write_video(
        library / "clip.mp4",
        lambda t: part_red if t < 2 else solid(BLUE if t < 6 else RED),
        seconds=8.0,
    )
    yield from serve(library, tmp_path / "index", standin_models)


def test_a_video_hit_plays_from_its_moment_and_steps_through_its_moments(video_server):
    with opened_page(video_server + "/") as (page, errors):
        hit = page.evaluate(
            "fetch('/api/search?q=red').then(r => r.json())"
            ".then(b => b.hits.find(h => h.kind === 'video'))"
        )
        moments = hit["moments"]
        assert len(moments) == 2, moments  # the red at the start and the red at the end
        assert hit["time"] >= 6.0, moments  # the redder one
        page.fill("#q", "red")
        page.press("#q", "Enter")
        card = f"#grid .card[data-id='{hit['id']}']"
        page.wait_for_selector(card + " .badge")
        assert "0:08" in page.text_content(card + " .badge")  # its duration

        page.click(card)
        page.wait_for_selector("#detail[open]")
        at_time = (
            "t => { const v = document.getElementById('d-video');"
            " return !v.hidden && v.readyState >= 1 && v.paused && !v.seeking"
            " && Math.abs(v.currentTime - t) < 0.05; }"
        )
        page.wait_for_function(at_time, arg=hit["time"], timeout=30_000)
        src = page.eval_on_selector("#d-video", "v => v.currentSrc")
        assert src.endswith(hit["video_url"]), src
        marks = page.eval_on_selector_all(
            "#d-timeline .mark", "els => els.map(e => Number(e.dataset.time))"
        )
        assert marks == [m["time"] for m in moments]
        # The overlay of the paused frame: the mask at the moment's time.
        page.wait_for_function(
            "() => { const i = document.getElementById('d-img');"
            " return !i.hidden && i.naturalWidth > 0 && i.src.includes('/overlay')"
            " && i.src.includes('t='); }",
            timeout=60_000,
        )
        j = next(i for i, m in enumerate(moments) if m["time"] == hit["time"])
        step, back = (
            ("#d-next-moment", "#d-prev-moment") if j == 0 else ("#d-prev-moment", "#d-next-moment")
        )
        other = moments[1 - j]["time"]
        page.click(step)
        page.wait_for_function(at_time, arg=other, timeout=30_000)
        assert page.is_disabled(step)  # two moments: the end of the list
        page.click(back)
        page.wait_for_function(at_time, arg=hit["time"], timeout=30_000)
        assert errors == []


@pytest.fixture()
def long_name_server(standin_models, tmp_path):
    """A clip whose name is longer than a card is wide."""
    from video_files import RED, solid, write_video

    library = tmp_path / "library"
    long_name = "holiday-on-the-beach-with-the-whole-family-and-the-dog-2024-06-01.mp4"
    write_video(library / long_name, lambda t: solid(RED), seconds=4.0)
    yield from serve(library, tmp_path / "index", standin_models)


def test_a_video_cards_time_shows_however_long_its_name(long_name_server):
    # The grid cut "@ 0:06" off with the end of a long name: when was invisible until a click.
    with opened_page(long_name_server + "/") as (page, _):
        page.fill("#q", "red")
        page.press("#q", "Enter")
        page.wait_for_selector("#grid .card .badge")
        shown = page.text_content("#grid .card .name")
        assert shown is not None and "@ 0:0" in shown, shown
        at = page.eval_on_selector(
            "#grid .card .name",
            "n => { const c = n.getBoundingClientRect(); const all = [...n.querySelectorAll('*')];"
            " const at = all.find(e => e.textContent.includes('@'));"
            " const r = at ? at.getBoundingClientRect() : null;"
            " return r && r.width > 0 && r.left >= c.left && r.right <= c.right + 0.5; }",
        )
        assert at, shown


@pytest.fixture()
def animation_server(standin_models, shapes, tmp_path):
    from test_animation import animated

    animated(shapes / "moving" / "anim.gif", "GIF")
    yield from serve(shapes, tmp_path / "index", standin_models)


def test_the_kind_filter_offers_every_registered_kind(animation_server):
    """The Kind menu lists the kinds wherein knows (from /api/status), so moving pictures can
    be chosen: with it, red finds the animated GIF alone; kind=... in the address chooses it."""
    from wherein.indexer.kinds import registry

    with opened_page(animation_server + "/") as (page, errors):
        page.wait_for_function("document.querySelectorAll('#kind option').length > 1")
        offered = page.eval_on_selector_all("#kind option", "els => els.map(e => e.value)")
        assert sorted(offered) == sorted(["", *registry.names()]), offered
        page.select_option("#kind", "animation")
        page.fill("#q", "red")
        page.press("#q", "Enter")
        page.wait_for_selector("#grid .card")
        names = page.eval_on_selector_all("#grid .card .name", "els => els.map(e => e.textContent)")
        assert names == ["anim.gif"], names
        page.goto(animation_server + "/#q=red&kind=animation")
        page.reload()
        page.wait_for_function("document.getElementById('kind').value === 'animation'")
        assert not errors, errors
