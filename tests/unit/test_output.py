"""Output formats: every structured format carries the same hit objects, and no file name
can break a line, a JSON document or the user's terminal."""

from __future__ import annotations

import base64
import json
import os

import jsonschema
import pytest

from wherein.schemas.records import HIT_SCHEMA_PATH, Hit
from wherein.search import output

LATIN1 = os.fsdecode(b"/photos/caf\xe9.jpg")  # a name from an old Windows share


def hit(path: str, rank: int = 1, **extra) -> Hit:
    return Hit(
        rank=rank,
        path=path,
        score=0.31,
        probability=0.8,
        width=640,
        height=480,
        id=rank,
        exists=True,
        **extra,
    )


@pytest.fixture(scope="module")
def validator():
    return jsonschema.Draft202012Validator(json.loads(HIT_SCHEMA_PATH.read_text()))


def test_json_nl_and_csv_carry_the_same_objects(validator):
    hits = [hit("/a/red.jpg", 1), hit("/b/blue, with comma.png", 2)]
    as_json = json.loads(output.render(hits, "json"))
    as_nl = [json.loads(line) for line in output.render(hits, "nl").splitlines()]
    as_csv = output.read_csv(output.render(hits, "csv"))
    assert as_json == as_nl == [h.to_dict() for h in hits]
    for obj in as_json:
        validator.validate(obj)
    assert [(d["path"], d["rank"], d["score"]) for d in as_csv] == [
        (d["path"], d["rank"], d["score"]) for d in as_json
    ]


def test_a_non_utf8_name_is_readable_and_lossless_in_json(validator):
    obj = json.loads(output.render([hit(LATIN1)], "json"))[0]
    validator.validate(obj)
    assert obj["path"] == "/photos/caf\ufffd.jpg"
    assert base64.b64decode(obj["path_b64"]) == b"/photos/caf\xe9.jpg"
    assert "path_b64" not in hit("/photos/café.jpg").to_dict()


def test_a_non_utf8_name_round_trips_through_csv():
    row = output.read_csv(output.render([hit(LATIN1)], "csv"))[0]
    assert base64.b64decode(row["path_b64"]) == b"/photos/caf\xe9.jpg"


def test_paths0_gives_back_the_original_bytes():
    text = output.render([hit(LATIN1), hit("/x/new\nline.jpg", 2)], "paths0")
    raw = text.encode("utf-8", "surrogateescape")
    assert raw.split(b"\0")[:2] == [b"/photos/caf\xe9.jpg", b"/x/new\nline.jpg"]


def test_the_table_escapes_control_characters_and_undecodable_bytes():
    names = ["/x/two\nlines.jpg", "/x/tab\there.jpg", "/x/\x1b[31mred.jpg", LATIN1]
    table = output.render([hit(n, i + 1) for i, n in enumerate(names)], "table")
    lines = table.splitlines()
    assert len(lines) == 2 + len(names)  # header, rule, one line per hit
    assert "\x1b" not in table and "\t" not in table
    assert "two\\nlines.jpg" in table and "tab\\there.jpg" in table
    assert "\\x1b[31mred.jpg" in table and "caf\\xe9.jpg" in table
