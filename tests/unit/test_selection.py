"""One Selection value: what a search selects, parsed once per front-end and checked once."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from wherein.schemas.errors import UsageError
from wherein.search.cli.options import filter_options, gathers_selection, kind_options, top_option
from wherein.search.query import Query
from wherein.search.selection import Selection
from wherein.search.service.curate import SelectRequest
from wherein.search.service.search import ExportRequest, MaskRequest, SearchRequest


def test_a_query_string_and_one_folder_are_the_same_selection_as_parsed_values():
    typed = Selection("red:2 - blue", under="/photos", glob="*.jpg", kind="video")
    parsed = Selection(
        Query.parse("red:2 - blue"), under=[Path("/photos")], glob=("*.jpg",), kind="video"
    )
    assert typed.parsed == parsed.parsed
    assert [str(u) for u in typed.folders] == [str(u) for u in parsed.folders] == ["/photos"]
    assert typed.patterns == parsed.patterns == ("*.jpg",)
    assert Selection("red", under=None, glob="").folders == Selection("red").folders == ()


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"kind": "audio"}, "unknown kind 'audio'"),
        ({"glob": "[ab"}, "never closed"),
        ({"sort": "colour"}, "unknown sort key 'colour'"),
        ({"k": 0}, "k must be at least 1"),
        ({"min_probability": 1.0}, "between 0 and 1"),
        ({"min_score": 1.5}, "a cosine"),
        ({"taken": "2024-13"}, "2024-13"),
        ({"near": "91,0"}, "91"),
    ],
)
def test_check_refuses_each_bad_value_with_its_own_message(fields, says):
    with pytest.raises(UsageError, match=says):
        Selection("red", **fields).check()


def test_check_refuses_a_probability_for_an_image_only_query_and_an_empty_query():
    with pytest.raises(UsageError, match="needs a text term"):
        Selection(Query().like_id(1), min_probability=0.5).check()
    with pytest.raises(UsageError, match="empty query"):
        Selection("").check()


def test_the_cli_options_become_the_selections_fields():
    got: dict = {}

    @click.command()
    @click.argument("query", nargs=-1)
    @top_option(None, "k")
    @filter_options
    @kind_options
    @gathers_selection
    def cmd(query, selection):
        got["selection"] = Selection(list(query), **selection)

    args = ["red", "-k", "3", "--under", "/a", "--under", "/b", "--kind", "video", "--frames"]
    result = CliRunner().invoke(cmd, [*args, "--taken", "2024-06", "--near", "1,2,3"])
    assert result.exit_code == 0, result.output
    want = Selection(
        "red", k=3, under=("/a", "/b"), kind="video", frames=True, taken="2024-06", near="1,2,3"
    )
    assert got["selection"] == want


def test_options_that_only_apply_with_another_are_refused_on_the_request():
    with pytest.raises(UsageError, match="--category-from-labels only applies with --mask"):
        SearchRequest("red", export=ExportRequest("x.coco.json", category_from_labels=True))
    SearchRequest(
        "red", mask=MaskRequest(), export=ExportRequest("x.coco.json", category_from_labels=True)
    )
    with pytest.raises(UsageError, match="--flat only applies with --copy-to or --link-to"):
        SelectRequest("red", 0.5, flat=True)
    with pytest.raises(UsageError, match="--out only applies with --mask"):
        SelectRequest("red", 0.5, out_dir=Path("masks"))
    with pytest.raises(UsageError, match="not both"):
        SelectRequest("red", 0.5, copy_to=Path("a"), link_to=Path("b"))
    assert SelectRequest("red", 0.5, k=3).min_probability == 0.5
