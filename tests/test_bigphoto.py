"""One size rule for every decode: at most imaging.MAX_PIXELS pixels are decoded.

A JPEG decodes reduced (libjpeg's 1/2..1/8) until it fits, so a 200-MP phone photo indexes
and masks; another format above the limit is refused the same way by `index` and `mask`.
Pillow's own DecompressionBombWarning is never printed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from launch import python_argv
from PIL import Image, ImageDraw

from wherein.indexer import imaging
from wherein.indexer.models.standins.palette import rgb255
from wherein.search.cli import cli

PHONE = (16320, 12240)  # a 200-MP phone sensor


def _photo(path: Path, size: tuple[int, int], **save) -> Path:
    """A red rectangle over the left half on a light background."""
    w, h = size
    img = Image.new("RGB", size, (247, 247, 247))
    ImageDraw.Draw(img).rectangle((w // 10, h // 10, w // 2, h * 9 // 10), fill=rgb255("red"))
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path, **save)
    return path


def _wherein(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        python_argv("-m", "wherein.search.cli", *args), capture_output=True, text=True, timeout=600
    )


def test_200mp_jpeg_indexes_and_masks_at_full_size(env, tmp_path):
    photo = _photo(tmp_path / "photos" / "phone.jpg", PHONE, quality=85)
    assert PHONE[0] * PHONE[1] > imaging.MAX_PIXELS  # bigger than anything decoded whole
    res = _wherein("index", str(photo.parent), "--json")
    assert res.returncode == 0, res.stderr
    assert "Warning" not in res.stderr, res.stderr
    assert json.loads(res.stdout[res.stdout.index("{") :])["embedded"] == 1
    out = tmp_path / "masks"
    res = _wherein("mask", str(photo), "red", "--out", str(out), "--json")
    assert res.returncode == 0, res.stderr
    assert "Warning" not in res.stderr, res.stderr
    (mask,) = json.loads(res.stdout)["masks"]
    assert (mask["width"], mask["height"]) == PHONE
    x0, y0, x1, y1 = mask["bbox"]["largest"]  # the red half, in the photo's own pixels
    assert abs(x0 - PHONE[0] // 10) < 200 and abs(x1 - PHONE[0] // 2) < 200
    with Image.open(mask["mask_path"]) as png:
        assert png.size == PHONE and png.mode == "1"


@pytest.fixture
def small_limit(monkeypatch):
    """A limit of 1 MP: what holds for 200-MP photos at the real limit, at test sizes."""
    monkeypatch.setattr(imaging, "MAX_PIXELS", 1_000_000)


def test_index_and_mask_apply_one_rule(env, tmp_path, small_limit):
    photos = tmp_path / "photos"
    _photo(photos / "big.jpg", (1600, 1200), quality=90)  # decodes at 1/2: 0.48 MP
    _photo(photos / "big.png", (1600, 1200))  # decodes whole: 1.92 MP
    _photo(photos / "fits.png", (1000, 1000))
    runner = CliRunner()
    res = runner.invoke(cli, ["index", str(photos), "--json"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(cli, ["status", "--json"])
    skipped = {Path(s["path"]).name: s["reason"] for s in json.loads(res.stdout)["skipped"]}
    assert list(skipped) == ["big.png"] and "decompression bomb" in skipped["big.png"]
    assert json.loads(res.stdout)["images"] == 2
    for name, ok in (("big.jpg", True), ("fits.png", True), ("big.png", False)):
        res = runner.invoke(cli, ["mask", str(photos / name), "red", "--no-files", "--json"])
        if ok:
            assert res.exit_code == 0, res.output
            continue
        assert res.exit_code == 1, res.output
        assert res.stderr.strip().splitlines()[-1] == f"Error: {photos / name}: {skipped[name]}"


def test_full_size_overlay_of_a_big_jpeg_stays_under_the_limit(env, tmp_path, small_limit):
    photo = _photo(tmp_path / "big.jpg", (1600, 1200), quality=90)
    res = CliRunner().invoke(
        cli, ["mask", str(photo), "red", "--full-size-overlays", "--out", str(tmp_path), "--json"]
    )
    assert res.exit_code == 0, res.output
    (mask,) = json.loads(res.stdout)["masks"]
    with Image.open(mask["mask_path"]) as png:
        assert png.size == (1600, 1200)  # the mask keeps the photo's size
    with Image.open(mask["overlay_path"]) as overlay:
        assert overlay.width * overlay.height <= 1_000_000


def test_a_thread_never_prints_pillows_warning(tmp_path):
    """The indexer decodes in threads, where warning filters cannot be set safely: the 102-MP
    JPEG of the issue printed DecompressionBombWarning raw."""
    photo = _photo(tmp_path / "p.jpg", (11648, 8736), quality=70)
    code = (
        "import sys, concurrent.futures as f\n"
        "from wherein.indexer.imaging import prepare\n"
        "from wherein.schemas.models import SIGLIP2\n"
        "data = open(sys.argv[1], 'rb').read()\n"
        "def one(d): return prepare(d, SIGLIP2.image)\n"
        "with f.ThreadPoolExecutor(2) as pool:\n"
        "    print([r.error or r.width for r in pool.map(one, [data, data])])\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, str(photo)], capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[11648, 11648]" and res.stderr == "", res.stderr
