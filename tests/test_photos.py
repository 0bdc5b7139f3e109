"""Photo metadata: EXIF written by Pillow is read at index time, backfilled into older indexes,
and filters (--taken, --camera, --near) and --sort taken work before the top-k cut."""

from __future__ import annotations

import json
import os
import re
import sqlite3
from datetime import datetime
from pathlib import Path

import pytest
from cli_run import run
from PIL import Image
from PIL.TiffImagePlugin import IFDRational

from wherein.indexer.photometa import PhotoMeta, read_photo_meta
from wherein.schemas.records import HIT_SCHEMA_PATH
from wherein.search.photofilter import FilterError, Near, bounding_box, parse_near, parse_taken
from wherein.search.service.search import open_index

from conftest import draw_shape


def exif(
    make=None,
    model=None,
    taken=None,
    offset=None,
    lat=None,
    lon=None,
    lens=None,
    orientation=None,
) -> bytes:
    """EXIF as a camera writes it: IFD0, the Exif IFD (0x8769) and the GPS IFD (0x8825)."""
    e = Image.Exif()
    if make:
        e[0x010F] = make
    if model:
        e[0x0110] = model
    if orientation:
        e[0x0112] = orientation
    sub = e.get_ifd(0x8769)
    if taken:
        sub[0x9003] = taken
    if offset:
        sub[0x9011] = offset
    if lens:
        sub[0xA434] = lens
    if lat is not None:
        gps = e.get_ifd(0x8825)

        def dms(v: float):  # degrees, minutes, seconds as rationals
            v = abs(v)
            d = int(v)
            m = int((v - d) * 60)
            sec = (v - d - m / 60) * 3600
            return (IFDRational(d, 1), IFDRational(m, 1), IFDRational(round(sec * 10000), 10000))

        gps[1], gps[2] = ("N" if lat >= 0 else "S"), dms(lat)
        gps[3], gps[4] = ("E" if lon >= 0 else "W"), dms(lon)
    return e.tobytes()


def hits_json(*args) -> list[dict]:
    return json.loads(run("search", *args, "--json").stdout)


def names(hits) -> list[str]:
    return [Path(h["path"] if isinstance(h, dict) else h.path).name for h in hits]


# -- reading EXIF ---------------------------------------------------------------------------
@pytest.mark.parametrize("ext", ["jpg", "png", "webp"])
def test_exif_written_by_pillow_is_read_back(tmp_path, ext):
    path = tmp_path / f"p.{ext}"
    draw_shape(
        path,
        "red",
        exif=exif(
            "Canon",
            "Canon EOS R5",
            "2024:06:15 14:03:22",
            "+02:00",
            -33.8568,
            151.2153,
            lens="RF24-105mm F4 L IS USM",
            orientation=6,
        ),
    )
    m = read_photo_meta(path)
    assert (m.taken, m.taken_offset) == ("2024-06-15 14:03:22", "+02:00")
    assert (m.make, m.model, m.lens, m.orientation) == (
        "Canon",
        "Canon EOS R5",
        "RF24-105mm F4 L IS USM",
        6,
    )
    assert m.lat == pytest.approx(-33.8568, abs=1e-4) and m.lon == pytest.approx(151.2153, abs=1e-4)


def test_missing_and_placeholder_values_are_dropped(tmp_path):
    draw_shape(tmp_path / "plain.png", "red")
    assert read_photo_meta(tmp_path / "plain.png") == PhotoMeta()
    # An unset camera clock and a receiver without a fix write zeros: no date, no place.
    draw_shape(
        tmp_path / "zeros.jpg", "red", exif=exif("X", "Y", "0000:00:00 00:00:00", lat=0.0, lon=0.0)
    )
    m = read_photo_meta(tmp_path / "zeros.jpg")
    assert m.taken is None and m.lat is None and m.lon is None and m.model == "Y"
    assert read_photo_meta(tmp_path / "gone.jpg") is None  # unreadable now: try again later


# -- filters: parsing -----------------------------------------------------------------------
def test_taken_ranges_cover_whole_periods_with_open_ends():
    r = parse_taken("2024-06-01..2024-08-31")
    assert (r.lo, r.hi) == ("2024-06-01 00:00:00", "2024-09-01 00:00:00")
    assert parse_taken("2024-02").hi == "2024-03-01 00:00:00"
    assert parse_taken("2023-12").hi == "2024-01-01 00:00:00"
    assert (parse_taken("..2023").lo, parse_taken("..2023").hi) == (None, "2024-01-01 00:00:00")
    assert parse_taken("2024-06-01T09:30..").lo == "2024-06-01 09:30:00"
    for bad in ("2024-13", "yesterday", "2024..2023", ".."):
        with pytest.raises(FilterError):
            parse_taken(bad)


def test_near_parses_and_its_box_holds_the_circle():
    assert parse_near("48.85,2.29") == Near(48.85, 2.29, 10.0)
    assert parse_near("48.85, 2.29, 2.5") == Near(48.85, 2.29, 2.5)
    for bad in ("48.85", "91,0", "0,0,-1", "a,b"):
        with pytest.raises(FilterError):
            parse_near(bad)
    # Across the antimeridian the box spans every longitude; the exact distance decides.
    assert bounding_box(Near(0.0, 179.99, 20))[2:] == (-180.0, 180.0)


# -- index + search -------------------------------------------------------------------------
@pytest.fixture()
def photos(env, tmp_path) -> Path:
    """Red photos: big red shapes from 2024 (rank first for "red"), small ones from 2023."""
    root = tmp_path / "photos"
    big = (0.1, 0.1, 0.9, 0.9)
    small = (0.4, 0.4, 0.6, 0.6)
    specs = [
        (
            "paris.jpg",
            big,
            exif("Canon", "Canon EOS R5", "2024:06:15 14:03:22", "+02:00", 48.8584, 2.2945),
        ),
        (
            "louvre.jpg",
            big,
            exif("Canon", "Canon EOS R5", "2024:06:16 09:00:00", "+02:00", 48.8606, 2.3376),
        ),
        ("august.jpg", big, exif("SONY", "ILCE-7M3", "2024:08:31 23:59:59")),
        ("fiji.jpg", big, exif("SONY", "ILCE-7M3", "2024:09:01 00:00:00", lat=-17.8, lon=179.99)),
        (
            "xmas.jpg",
            small,
            exif("Apple", "iPhone 15", "2023:12:24 18:00:00", "-05:00", 40.7128, -74.006),
        ),
        (
            "nye.jpg",
            small,
            exif("Apple", "iPhone 15", "2023:12:31 23:00:00", "-05:00", 40.7580, -73.9855),
        ),
        (
            "fiji_east.jpg",
            small,
            exif("Apple", "iPhone 15", "2023:05:01 12:00:00", lat=-17.8, lon=-179.99),
        ),
    ]
    for name, box, data in specs:
        draw_shape(root / name, "red", box=box, exif=data, quality=95)
    draw_shape(root / "scan.png", "red", box=small)  # no EXIF: taken falls back to mtime
    when = datetime(2022, 3, 4, 5, 6, 7).timestamp()
    os.utime(root / "scan.png", (when, when))
    run("index", root, "-q")
    return root


def test_hits_carry_taken_camera_gps_and_say_where_taken_came_from(photos):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(HIT_SCHEMA_PATH.read_text())
    hits = {Path(h["path"]).name: h for h in hits_json("red", "-k", "20")}
    assert len(hits) == 8
    paris = hits["paris.jpg"]
    assert (paris["taken"], paris["taken_source"]) == ("2024-06-15T14:03:22+02:00", "exif")
    assert paris["camera"] == "Canon EOS R5"
    assert paris["gps"]["lat"] == pytest.approx(48.8584, abs=1e-4)
    assert hits["august.jpg"]["camera"] == "SONY ILCE-7M3"
    assert hits["august.jpg"]["taken"] == "2024-08-31T23:59:59"  # no offset recorded
    scan = hits["scan.png"]
    local = datetime(2022, 3, 4, 5, 6, 7).astimezone().isoformat(timespec="seconds")
    assert (scan["taken"], scan["taken_source"], scan["camera"], scan["gps"]) == (
        local,
        "mtime",
        None,
        None,
    )
    for h in hits.values():
        jsonschema.validate(h, schema)


def test_filters_cut_before_top_k(photos):
    # Unfiltered, the 2024 photos (big red shapes) fill the top 2 ...
    assert set(names(hits_json("red", "-k", "2"))) <= {
        "paris.jpg",
        "louvre.jpg",
        "august.jpg",
        "fiji.jpg",
    }
    # ... yet a filter on 2023 still returns k hits: it selects before FAISS ranks.
    assert sorted(names(hits_json("red", "-k", "2", "--taken", "2023-12"))) == [
        "nye.jpg",
        "xmas.jpg",
    ]
    iphone = names(hits_json("red", "-k", "2", "--camera", "iphone"))
    assert len(iphone) == 2 and set(iphone) <= {"nye.jpg", "xmas.jpg", "fiji_east.jpg"}
    near = hits_json("red", "-k", "2", "--near", "40.75,-73.99,10")
    assert sorted(names(near)) == ["nye.jpg", "xmas.jpg"]


def test_csv_round_trips_the_photo_fields(photos):
    from wherein.search.output import read_csv

    as_json = hits_json("red", "-k", "20")
    back = read_csv(run("search", "red", "-k", "20", "--csv").stdout)
    fields = ("taken", "taken_source", "camera", "gps")
    assert [{k: h[k] for k in fields} for h in back] == [{k: h[k] for k in fields} for h in as_json]
    assert any(h["gps"] for h in back)


def test_taken_ranges_camera_and_near(photos):
    summer = names(hits_json("red", "-k", "20", "--taken", "2024-06-01..2024-08-31"))
    assert sorted(summer) == ["august.jpg", "louvre.jpg", "paris.jpg"]  # Aug 31 included, Sep 1 not
    assert sorted(names(hits_json("red", "-k", "20", "--taken", "..2022"))) == ["scan.png"]
    assert names(hits_json("red", "-k", "20", "--taken", "2024-09..")) == ["fiji.jpg"]
    assert sorted(names(hits_json("red", "-k", "20", "--camera", "eos r5"))) == [
        "louvre.jpg",
        "paris.jpg",
    ]
    # The Eiffel Tower and the Louvre are 3.2 km apart.
    assert names(hits_json("red", "-k", "20", "--near", "48.8584,2.2945,2")) == ["paris.jpg"]
    assert len(hits_json("red", "-k", "20", "--near", "48.8584,2.2945,5")) == 2
    # Two photos 2 km apart on either side of the antimeridian.
    assert sorted(names(hits_json("red", "-k", "20", "--near", "-17.8,179.995,5"))) == [
        "fiji.jpg",
        "fiji_east.jpg",
    ]
    both = names(hits_json("red", "-k", "20", "--camera", "iPhone", "--taken", "2023-12-25.."))
    assert both == ["nye.jpg"]
    res = run("search", "red", "--taken", "June", ok=False)
    assert res.exit_code == 2 and "not a date" in res.output and "Traceback" not in res.output


def test_sort_taken_is_newest_photo_first(photos):
    order = names(hits_json("red", "-k", "20", "--sort", "taken"))
    assert order == [
        "fiji.jpg",
        "august.jpg",
        "louvre.jpg",
        "paris.jpg",
        "nye.jpg",
        "xmas.jpg",
        "fiji_east.jpg",
        "scan.png",
    ]
    assert names(hits_json("red", "-k", "20", "--sort", "taken", "--reverse")) == order[::-1]


def test_python_api_and_select_take_the_same_filters(photos, env):
    with open_index(env["index"], env["models"]) as s:
        hits = s.search("red", k=5, taken="2023", camera="iphone", sort="taken")
        assert names(hits) == ["nye.jpg", "xmas.jpg", "fiji_east.jpg"]
        assert hits[0].camera == "Apple iPhone 15" and hits[0].taken_source == "exif"
    sel = json.loads(run("select", "red", "-p", "0.5", "--near", "48.86,2.3,10", "--json").stdout)
    assert sorted(names(sel)) == ["louvre.jpg", "paris.jpg"]


def test_older_index_is_backfilled_without_re_embedding(photos, env):
    db = env["index"] / "catalog.db"
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("DELETE FROM photos")  # as after the migration of an index from before
    conn.close()
    assert hits_json("red", "-k", "20", "--camera", "canon") == []
    out = json.loads(run("index", photos, "--json").stdout)
    assert out["embedded"] == 0 and out["unchanged"] == 8 and out["photo_metadata_read"] == 8
    assert len(hits_json("red", "-k", "20", "--camera", "canon")) == 2
    again = json.loads(run("index", photos, "--json").stdout)
    assert again["photo_metadata_read"] == 0  # read once, not on every run


def test_new_photos_metadata_comes_from_the_read_that_embeds_them(env, tmp_path, monkeypatch):
    """One open per new file: the EXIF is parsed from the bytes the run hashed and decoded,
    so the metadata pass (which opens files again) has nothing left to do."""
    from wherein.indexer import photometa

    root = tmp_path / "new"
    draw_shape(root / "a.jpg", "red", exif=exif("Canon", "Canon EOS R5", "2024:06:15 14:03:22"))
    draw_shape(root / "b.jpg", "blue", exif=exif("SONY", "ILCE-7M3", "2023:01:02 03:04:05"))
    draw_shape(root / "plain.png", "green")  # no EXIF: an empty row, not a second read

    def reopened(path):
        raise AssertionError(f"{path} was opened a second time for its metadata")

    monkeypatch.setattr(photometa, "read_photo_meta", reopened)
    out = json.loads(run("index", root, "--json").stdout)
    assert out["embedded"] == 3 and out["photo_metadata_read"] == 3
    hits = {Path(h["path"]).name: h for h in hits_json("red", "-k", "3")}
    assert hits["a.jpg"]["camera"] == "Canon EOS R5" and hits["b.jpg"]["camera"] == "SONY ILCE-7M3"
    assert hits["a.jpg"]["taken"] == "2024-06-15T14:03:22"
    assert hits["plain.png"]["camera"] is None and hits["plain.png"]["taken_source"] == "mtime"


def test_a_changed_photo_is_read_again(photos):
    draw_shape(
        photos / "paris.jpg",
        "red",
        box=(0.1, 0.1, 0.9, 0.9),
        quality=90,
        exif=exif("Nikon", "NIKON Z 8", "2025:01:02 03:04:05"),
    )
    run("index", photos, "-q")
    (h,) = [h for h in hits_json("red", "-k", "20") if h["path"].endswith("paris.jpg")]
    assert (h["camera"], h["taken"], h["gps"]) == ("NIKON Z 8", "2025-01-02T03:04:05", None)


def test_web_api_filters_and_sorts(photos, env):
    from fastapi.testclient import TestClient

    from wherein.search.web.app import create_app

    with TestClient(create_app(env["index"], env["models"]), base_url="http://127.0.0.1") as c:
        r = c.get("/api/search", params={"q": "red", "taken": "2023-12", "per_page": 24})
        assert r.status_code == 200 and sorted(names(r.json()["hits"])) == ["nye.jpg", "xmas.jpg"]
        r = c.get("/api/search", params={"q": "red", "near": "48.8584,2.2945,2", "sort": "taken"})
        assert names(r.json()["hits"]) == ["paris.jpg"] and r.json()["hits"][0]["camera"]
        r = c.get("/api/search", params={"q": "red", "camera": "sony", "sort": "taken"})
        assert names(r.json()["hits"]) == ["fiji.jpg", "august.jpg"]
        bad = c.get("/api/search", params={"q": "red", "taken": "soon"})
        assert bad.status_code == 400 and "not a date" in bad.json()["error"]


def table_rows(text: str) -> list[dict[str, str]]:
    """An aligned table back as rows of cells (columns from the dashes under the header)."""
    head, rule, *body = text.splitlines()
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", rule)]
    names_ = [head[a:b].strip() for a, b in spans[:-1]] + [head[spans[-1][0] :].strip()]
    return [
        {n: line[a:b].strip() for n, (a, b) in zip(names_[:-1], spans[:-1], strict=True)}
        | {names_[-1]: line[spans[-1][0] :].strip()}
        for line in body
    ]


@pytest.mark.parametrize(
    "args, column, want",
    [
        (["--sort", "date"], "date", {"scan.png": "2022-03-04 05:06"}),
        (
            ["--sort", "taken"],
            "taken",
            {"paris.jpg": "2024-06-15 14:03", "scan.png": "2022-03-04 05:06 (mtime)"},
        ),
        (["--taken", "2024-06"], "taken", {"louvre.jpg": "2024-06-16 09:00"}),
        (["--camera", "canon"], "camera", {"paris.jpg": "Canon EOS R5"}),
        (["--near", "48.8584,2.2945,5"], "km", {"paris.jpg": "0.0000", "louvre.jpg": "3.1"}),
    ],
)
def test_the_table_shows_what_it_was_sorted_or_filtered_by(photos, args, column, want):
    rows = table_rows(run("search", "red", "-k", "20", *args).stdout)
    assert rows and all(column in r for r in rows)
    by_name = {Path(r["path"]).name: r[column] for r in rows}
    for name, cell in want.items():
        assert by_name[name].startswith(cell), (name, by_name[name])
    if column == "km":  # every photo listed is within the radius asked for
        assert all(0 <= float(v) <= 5 for v in by_name.values())
    # and a plain search keeps the plain table
    assert list(table_rows(run("search", "red", "-k", "3").stdout)[0]) == [
        "rank",
        "prob",
        "score",
        "pixels",
        "path",
    ]


def test_select_shows_the_photo_columns_it_filtered_by(photos):
    rows = table_rows(run("select", "red", "-p", "0.01", "--camera", "sony").stdout)
    assert {Path(r["path"]).name: r["camera"] for r in rows} == {
        "august.jpg": "SONY ILCE-7M3",
        "fiji.jpg": "SONY ILCE-7M3",
    }
