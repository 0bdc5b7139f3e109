"""Whatever a user types gets a result or a one-line error, never a traceback.

Property-based (hypothesis): the query parser, every option of the search, curation and
`mask` commands (drawn from the commands' own click parameters, so a new option is fuzzed
the day it appears), and the catalog's handling of arbitrary path strings, surrogates
included (what Python makes of a non-UTF-8 file name).
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import click
import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wherein.indexer.store.catalog import Catalog
from wherein.schemas.errors import WhereinError
from wherein.search.cli import cli
from wherein.search.query import MAX_WEIGHT, MIN_WEIGHT, Query, QueryError

from conftest import draw_shape

# Non-UTF-8 bytes in argv reach Python as lone surrogates U+DC80..U+DCFF (surrogateescape);
# argv never holds NUL, nor any other surrogate.
SURROGATES = ["\udce9", "caf\udce9", "\udcff\udcfe"]
ARGV_CHARS = st.characters(exclude_categories=("Cs",), exclude_characters="\x00")
TYPED = [
    "red",
    "red:2",
    "red:1e309",
    "red:-inf",
    "red:nan",
    "red:0",
    "red - blue",
    "- red",
    "+",
    "-",
    "red + + blue",
    "'quoted'",
    ":",
    "a:b:2",
    "id:1",
    "id:0",
    "id:99999999999999999999",
    "*.jpg",
    "[",
    "%",
    "_",
    "..",
    "/",
    "~",
    "",
    " ",
    *SURROGATES,
]
SETTINGS = {
    "deadline": None,  # the first example loads the models
    "database": None,  # no .hypothesis folder in the repository
    "derandomize": True,  # the same examples on every CI run
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}


def typed() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(TYPED),
        st.text(ARGV_CHARS, max_size=24),
        st.binary(max_size=12).filter(lambda b: b"\0" not in b).map(os.fsdecode),
    )


# -- the query parser -------------------------------------------------------------------------
@settings(max_examples=400, **SETTINGS)
@given(st.lists(typed(), max_size=6).map(" ".join), st.lists(typed(), max_size=2))
def test_any_query_text_parses_or_is_a_query_error(text, extra):
    try:
        q = Query.build(text, add=extra, subtract=extra)
        q.validate()
    except QueryError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    for t in q.terms:  # every weight that got through is one the search can use
        assert math.isfinite(t.weight) and MIN_WEIGHT <= abs(t.weight) <= MAX_WEIGHT
        assert t.value.strip()
    assert str(q)  # the web app echoes it back


@pytest.mark.parametrize("typo", ["red:1e309", "red:-inf", "red:inf", "red:nan", "red:1e-9"])
def test_absurd_weights_are_refused(typo):
    with pytest.raises(QueryError, match="weight"):
        Query.parse(typo)
    with pytest.raises(QueryError, match="weight"):
        Query.build(None, add=[typo])


@pytest.mark.parametrize("w", [math.inf, -math.inf, math.nan, 0.0, 1e6])
def test_api_weights_are_checked_too(w):
    with pytest.raises(QueryError, match="weight"):
        Query().plus("red", w)


# -- every option of the search, curation and mask commands ---------------------------------------
# Options that write files get paths inside the sandbox (the fuzzer must not write elsewhere).
WRITES = {"out_dir", "export_path", "copy_to", "link_to"}
INDEX_DIRS = {"index_dir", "models_dir"}


@pytest.fixture(scope="module")
def sandbox(standin_models, tmp_path_factory) -> Iterator[Path]:
    """An indexed `shapes` set; the current folder and WHEREIN_* point into it."""
    root = tmp_path_factory.mktemp("fuzz")
    photos = root / "photos"
    draw_shape(photos / "red_square.jpg", "red")
    draw_shape(photos / "blue.png", "blue")
    draw_shape(photos / "dup" / "red_copy.jpg", "red")
    saved = {k: os.environ.get(k) for k in ("WHEREIN_MODELS", "WHEREIN_INDEX")}
    cwd = os.getcwd()
    os.environ["WHEREIN_MODELS"] = str(standin_models)
    os.environ["WHEREIN_INDEX"] = str(root / "index")
    os.chdir(root)
    try:
        r = CliRunner().invoke(cli, ["index", str(photos), "-q"])
        assert r.exit_code == 0, r.output
        yield root
    finally:
        os.chdir(cwd)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def sandbox_path(root: Path) -> st.SearchStrategy[str]:
    inside = st.text(st.sampled_from("abc.-_ \udce9"), min_size=1, max_size=8)
    return st.one_of(
        inside.map(lambda n: str(root / "out" / n)),
        inside.map(lambda n: str(root / "out" / f"{n}.csv")),
        inside.map(lambda n: str(root / "out" / f"{n}.coco.json")),
        st.sampled_from(
            [
                str(root / "photos" / "red_square.jpg"),  # a file where a folder is wanted
                str(root / "out" / "x.parquet"),
                str(root / "out" / "x.yolo"),
                str(root / "out" / "x.masks"),
                str(root / "out" / "x.unknown"),
                str(root / "missing" / "deep" / "x.jsonl"),
                "",
            ]
        ),
    )


def mostly(valid: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """Three in four draws valid (so the command gets past parsing), the rest anything."""
    return st.one_of(valid, valid, valid, typed())


def in_range(t: click.IntRange | click.FloatRange) -> st.SearchStrategy[str]:
    if isinstance(t, click.IntRange):
        lo = t.min if t.min is not None else -10
        return st.integers(lo, t.max if t.max is not None else lo + 50).map(str)
    return st.floats(
        t.min if t.min is not None else -2.0,
        t.max if t.max is not None else 2.0,
        exclude_min=bool(t.min_open),
        exclude_max=bool(t.max_open),
    ).map(repr)


NUMBERS = ["0", "1", "-1", "0.5", "1e309", "-1e309", "nan", "inf", "1e-320", "10000000"]


def value_for(param: click.Parameter, root: Path) -> st.SearchStrategy[str]:
    t = param.type
    if param.name in WRITES:
        return sandbox_path(root)
    if param.name in INDEX_DIRS:
        return st.sampled_from([str(root / "nowhere"), str(root / "photos"), str(root / "index")])
    if isinstance(t, click.Choice):
        return mostly(st.sampled_from([str(c) for c in t.choices]))
    if isinstance(t, click.IntRange | click.FloatRange):
        return mostly(in_range(t)) | st.sampled_from(NUMBERS)
    if t in (click.INT, click.FLOAT):
        return mostly(st.integers(-3, 100).map(str)) | st.sampled_from(NUMBERS)
    if param.name in ("like", "unlike", "image"):
        photo = str(root / "photos" / "red_square.jpg")
        return mostly(st.sampled_from([photo, photo + ":2", photo + ":inf", "id:1", "id:3"]))
    if param.name == "under":
        return mostly(st.sampled_from([str(root / "photos"), str(root / "photos" / "dup"), "/"]))
    return mostly(st.sampled_from(["red", "blue", "red - blue", "red:2", "a red square"]))


@st.composite
def command_line(draw, command: str, root: Path) -> list[str]:
    cmd = cli.commands[command]
    args: list[str] = [command]
    for param in cmd.params:
        if isinstance(param, click.Argument):
            continue
        # Each option in few draws: most command lines then get past the checks that
        # options agree, into the work (a draw with five format flags only tests click).
        if param.is_flag:  # type: ignore[attr-defined]
            if draw(st.integers(0, 7)) == 0:
                args.append(param.opts[0])
            continue
        odds = 9 if param.name in INDEX_DIRS else 3
        if param.required or draw(st.integers(0, odds)) == 0:
            for _ in range(draw(st.integers(1, 2)) if param.multiple else 1):
                args += [draw(st.sampled_from(param.opts)), draw(value_for(param, root))]
    for param in cmd.params:
        if isinstance(param, click.Argument):
            n = draw(st.sampled_from([0, 1, 1, 1, 2, 3])) if param.nargs == -1 else 1
            args += [draw(value_for(param, root)) for _ in range(n)]
    return args


def check_outcome(args: list[str]) -> None:
    result = CliRunner().invoke(cli, args)
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        import traceback

        tb = "".join(traceback.format_exception(exc))
        pytest.fail(f"wherein {args!r} raised instead of reporting:\n{tb}")
    assert result.exit_code in (0, 1, 2), (args, result.exit_code, result.output)
    if result.exit_code:
        errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1, (args, result.output)
    assert "Traceback" not in result.output


@pytest.mark.slow
@pytest.mark.parametrize(
    "command, examples",
    [("search", 60), ("select", 40), ("dupes", 25), ("unique", 25), ("label", 25), ("mask", 25)],
)
def test_any_command_line_gets_a_result_or_one_error(sandbox, command, examples):
    @settings(max_examples=examples, **SETTINGS)
    @given(command_line(command, sandbox))
    def run(args):
        check_outcome(args)

    run()


def test_under_outside_the_index_warns(sandbox):
    result = CliRunner().invoke(cli, ["search", "red", "--under", str(sandbox / "elsewhere")])
    assert result.exit_code == 0
    assert "warning: --under" in result.output and "no indexed image" in result.output
    inside = CliRunner().invoke(cli, ["search", "red", "--under", str(sandbox / "photos" / "dup")])
    assert inside.exit_code == 0 and "warning" not in inside.output
    assert "red_copy.jpg" in inside.output


def test_typed_weight_typos_are_one_line_errors(sandbox):
    for args in (
        ["search", "red:1e309"],
        ["search", "red:-inf"],
        ["search", "red", "--add", "x:nan"],
    ):
        result = CliRunner().invoke(cli, args)
        # A bad value: a usage error (the README's exit table).
        assert result.exit_code == 2 and "weight" in result.output, (args, result.output)


# -- the catalog and arbitrary path strings ------------------------------------------------------
# What a file name can be in Python: any text without NUL, where non-UTF-8 bytes appear as
# the lone surrogates U+DC80..U+DCFF (os.fsdecode's surrogateescape).
NAME_CHARS = st.characters(exclude_categories=("Cs",), exclude_characters="\x00/")
NAME_PARTS = st.one_of(
    st.text(NAME_CHARS, min_size=1, max_size=12),
    st.binary(min_size=1, max_size=12)
    .filter(lambda b: b"\0" not in b and b"/" not in b)
    .map(os.fsdecode),
    st.sampled_from(["\udce9", "caf\udce9", "\udcff\udcfe", ".", "..", "%", "_"]),
)


# A catalog per example: in memory-backed /dev/shm where there is one (fsyncs cost ms on disk).
FAST_TMP = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


def record(path: str) -> dict:
    return {
        "path": path,
        "size": 1,
        "mtime_ns": 1,
        "sha256": "0" * 64,
        "width": 1,
        "height": 1,
        "format": "jpg",
        "indexed_at": "2024-01-01T00:00:00+00:00",
        "model_id": "m",
    }


@settings(max_examples=150, **SETTINGS)
@given(st.lists(NAME_PARTS, min_size=1, max_size=4).map(lambda parts: "/" + "/".join(parts)))
def test_catalog_keeps_any_file_name(path):
    with tempfile.TemporaryDirectory(dir=FAST_TMP) as tmp:
        cat = Catalog(Path(tmp) / "catalog.db")
        try:
            with cat.transaction():
                image_id = cat.insert_image(record(path), np.ones(4, np.float32))
            assert cat.rows_by_ids([image_id])[image_id]["path"] == path
            assert cat.known_files()[path][0] == image_id
            row = cat.row_by_path(path)
            assert row is not None and row["id"] == image_id
            assert (image_id, path) in cat.embedded_paths([os.path.dirname(path)])
            assert cat.embedded_paths([path + "x"]) == []
        finally:
            cat.close()


@settings(max_examples=30, **SETTINGS)
@given(st.sampled_from(["/\ud800", "/a/\udfff", "/x\ud83d"]))
def test_catalog_refuses_impossible_paths_cleanly(path):
    with tempfile.TemporaryDirectory(dir=FAST_TMP) as tmp:
        cat = Catalog(Path(tmp) / "catalog.db")
        try:
            for call in (
                lambda: cat.row_by_path(path),
                lambda: cat.embedded_paths([path]),
                lambda: cat.insert_image(record(path), None),
            ):
                with pytest.raises(WhereinError, match="not a possible file name") as exc:
                    call()
                assert "\n" not in str(exc.value)
        finally:
            cat.close()


# -- a non-UTF-8 file name, end to end ---------------------------------------------------------
@pytest.mark.slow
def test_non_utf8_file_name_prints_as_its_bytes(env, tmp_path):
    import subprocess
    import sys

    photos = os.fsencode(tmp_path / "photos")
    os.makedirs(photos)
    name = os.path.join(photos, b"caf\xe9 \xff.png")  # Latin-1 bytes: not UTF-8
    draw_shape(Path(os.fsdecode(name)), "red")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "wherein.search.cli", *args],
            capture_output=True,
            env={**os.environ, "LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "utf-8"},
        )

    indexed = run("index", os.fsdecode(photos), "-q")
    assert indexed.returncode == 0, indexed.stderr
    found = run("search", "red", "--paths0")
    assert found.returncode == 0 and b"Traceback" not in found.stderr, found.stderr
    assert name + b"\0" in found.stdout  # the file's own bytes, usable by xargs -0
    table = run("search", "red")  # for people: shown readably, but shown
    assert table.returncode == 0 and b"caf" in table.stdout, table.stderr
