"""The query algebra: how a user's words become signed, weighted terms."""

from __future__ import annotations

import pytest

from wherein.search.query import Query, QueryError, Term


def terms(text) -> list[tuple[str, str, float]]:
    return [(t.kind, t.value, t.weight) for t in Query.parse(text).terms]


def test_one_phrase_is_one_term():
    assert terms("a red car") == [("text", "a red car", 1.0)]


def test_lone_operators_split_terms_but_hyphens_do_not():
    assert terms("red car - people + sky") == [
        ("text", "red car", 1.0),
        ("text", "people", -1.0),
        ("text", "sky", 1.0),
    ]
    assert terms("a t-shirt") == [("text", "a t-shirt", 1.0)]


def test_cli_words_are_joined():
    # `wherein search "beach" - "people"` arrives as three words
    assert terms(["beach", "-", "people"]) == [("text", "beach", 1.0), ("text", "people", -1.0)]


def test_weights_and_leading_operator():
    assert terms("beach:2 + sunset:0.5 - people:1.5") == [
        ("text", "beach", 2.0),
        ("text", "sunset", 0.5),
        ("text", "people", -1.5),
    ]
    assert terms("- people + dog") == [("text", "people", -1.0), ("text", "dog", 1.0)]


def test_quotes_keep_a_colon_literal_and_are_stripped():
    assert terms('"ratio 16:9" - "people"') == [
        ("text", "ratio 16:9", 1.0),
        ("text", "people", -1.0),
    ]
    assert terms("time 10:30am") == [("text", "time 10:30am", 1.0)]


@pytest.mark.parametrize("bad", ["beach -", "a - - b", "+", "x:0", "x:-2"])
def test_malformed_queries_are_clear_errors(bad):
    with pytest.raises(QueryError):
        Query.parse(bad)


def test_build_adds_cli_options(tmp_path):
    photo = tmp_path / "ref.jpg"
    photo.write_bytes(b"x")
    q = Query.build(
        ["beach"], add=["sea:2"], subtract=["people"], like=[f"{photo}:0.5"], unlike=[str(photo)]
    )
    assert q.terms == (
        Term("text", "beach", 1.0),
        Term("text", "sea", 2.0),
        Term("text", "people", -1.0),
        Term("image", str(photo), 0.5),
        Term("image", str(photo), -1.0),
    )
    assert [t.value for t in q.text_terms] == ["beach", "sea", "people"]
    assert len(q.image_terms) == 2


def test_an_existing_file_name_with_a_colon_is_not_a_weight(tmp_path):
    odd = tmp_path / "shot:2"
    odd.write_bytes(b"x")
    assert Query.build(like=[str(odd)]).terms == (Term("image", str(odd), 1.0),)


def test_a_weight_that_is_not_a_number_is_an_error_unless_that_file_exists(tmp_path):
    photo = tmp_path / "ref.jpg"
    photo.write_bytes(b"x")
    with pytest.raises(QueryError, match="'abc' after ':' is not a weight"):
        Query.build(like=[f"{photo}:abc"])
    with pytest.raises(QueryError, match="no image file"):
        Query.build(unlike=[str(tmp_path / "nope.jpg:abc")])
    odd = tmp_path / "ref.jpg:abc"  # the file's own name wins
    odd.write_bytes(b"x")
    assert Query.build(like=[str(odd)]).terms == (Term("image", str(odd), 1.0),)


def test_validate_needs_a_positive_term():
    with pytest.raises(QueryError, match="empty"):
        Query().validate()
    with pytest.raises(QueryError, match="positive"):
        Query.parse("- people").validate()
    Query.parse("dog - people").validate()


def test_str_round_trips():
    q = Query.parse("beach:2 - people")
    assert Query.parse(str(q).replace("'", '"')).terms == q.terms


def test_the_mask_prompt_is_the_first_wanted_text_term_unless_given():
    assert Query.parse("- people + beach + sea").mask_prompt() == "beach"
    assert Query.parse("beach").mask_prompt("the sand") == "the sand"
    assert Query.build([]).like("ref.jpg").mask_prompt() is None
