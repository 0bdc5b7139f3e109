"""One CLI vocabulary: an option name means one thing everywhere, and each command that
opens an index or models takes --index and --models. Each test is a mistake a newcomer
made with the earlier CLI."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import click
import pytest
from cli_run import run

from wherein.search.cli import options
from wherein.search.cli.serve import DEFAULT_PORT

from conftest import cli_commands as commands

# Commands that open an existing index (or make one from photos).
INDEX_COMMANDS = (
    "index",
    "status",
    "search",
    "mask",
    "select",
    "label",
    "dupes",
    "unique",
    "serve",
)
BANNER = "Using STAND-IN models from"


def option(cmd: click.Command, name: str) -> click.Option | None:
    return next(
        (
            p
            for p in cmd.params
            if isinstance(p, click.Option) and name in p.opts + p.secondary_opts
        ),
        None,
    )


@pytest.fixture()
def indexed(env, shapes) -> Path:
    run("index", shapes, "-q")
    return shapes


# -- --index / --models -----------------------------------------------------------------------
@pytest.mark.parametrize("name", INDEX_COMMANDS)
def test_index_commands_take_index_and_models_with_their_env_vars(name):
    cmd = commands()[name]
    for opt, env in (("--index", "WHEREIN_INDEX"), ("--models", "WHEREIN_MODELS")):
        found = option(cmd, opt)
        assert found is not None, f"`wherein {name}` has no {opt}"
        assert found.envvar == env


def test_every_index_and_models_option_is_the_shared_one():
    """Same name, same meaning: one definition, so the same type, env var and help."""
    for opt in ("--index", "--models"):
        seen = {
            (o.envvar, o.help, o.name, type(o.type))
            for cmd in commands().values()
            if (o := option(cmd, opt)) is not None
        }
        assert len(seen) == 1, (opt, seen)


def test_status_dupes_unique_accept_models(indexed, env):
    for args in (["status"], ["dupes"], ["unique", "-k", "2"]):
        run(*args, "--models", env["models"])
    info = json.loads(run("status", "--json", "--models", env["models"]).stdout)
    assert info["models"]["matches_index"] is True


def test_status_says_when_models_differ_from_the_index(indexed, env, tmp_path):
    other = tmp_path / "other-models"
    other.mkdir()
    info = json.loads(run("status", "--json", "--models", other).stdout)
    assert info["models"]["dir"] == str(other) and info["models"]["matches_index"] is None
    assert "no image tower" in run("status", "--models", other).stdout


def test_mask_takes_a_catalog_id_from_index(indexed, env):
    hit = json.loads(run("search", "red", "--json", "-k", "1").stdout)[0]
    r = run("mask", f"id:{hit['id']}", "red", "--no-files", "--json", "--index", env["index"])
    data = json.loads(r.stdout)
    assert data["image"] == hit["path"] and data["masks"][0]["mask_area"] > 0.1
    r = run("mask", "id:999", "red", "--no-files", ok=False)
    assert r.exit_code == 1 and "no image with id 999" in r.output


def test_mask_of_a_missing_file_is_a_usage_error(env, tmp_path):
    r = run("mask", tmp_path / "nope.jpg", "red", ok=False)
    assert r.exit_code == 2 and "nope.jpg" in r.output


def test_build_index_honours_WHEREIN_INDEX(monkeypatch, tmp_path):
    import wherein.indexer.scale.build_index as B

    seen = {}

    def fake_build(embed_dirs, index_dir, *args, **kwargs):
        seen["index"] = index_dir
        raise B.IndexError_("stop here")

    monkeypatch.setattr(B, "build_index", fake_build)
    emb = tmp_path / "emb"
    emb.mkdir()
    r = run("build-index", emb, env={"WHEREIN_INDEX": str(tmp_path / "big")}, ok=False)
    assert r.exit_code == 1 and seen["index"] == tmp_path / "big"


# -- stand-ins are named on every surface --------------------------------------------------
STANDIN_NOTICE = "STAND-IN models"
FORMATS = ("table", "json", "nl", "csv", "paths", "paths0")
# Each command that loads models or reads an index, with the output switches it has.
STANDIN_COMMANDS = {
    "index": (["index", "{photos}", "-q"], ("table", "json")),
    "status": (["status"], ("table", "json")),
    "search": (["search", "red"], FORMATS),
    "select": (["select", "red", "-p", "0.5"], FORMATS),
    "label": (["label", "-l", "red,blue", "--no-store"], FORMATS),
    "dupes": (["dupes"], FORMATS),
    "unique": (["unique", "-k", "3"], FORMATS),
    "mask": (["mask", "{photos}/red_square.jpg", "red", "--no-files"], ("table", "json")),
    "embed": (["embed", "{photos}", "--out", "{tmp}/emb", "-q"], ("table", "json")),
    "models check": (["models", "check"], ("table", "json")),
}


@pytest.fixture(scope="module")
def standin_index(standin_models, tmp_path_factory) -> dict[str, str]:
    """One index of the shapes on the stand-ins, shared by the read-only checks below."""
    from conftest import draw_shape

    root = tmp_path_factory.mktemp("standin-surfaces")
    photos = root / "photos"
    for colour in ("red", "blue", "green"):
        draw_shape(photos / f"{colour}_square.jpg", colour)
    draw_shape(photos / "blue_copy.png", "blue")
    e = {"WHEREIN_MODELS": str(standin_models), "WHEREIN_INDEX": str(root / "index")}
    run("index", photos, "-q", env=e)
    return {**e, "photos": str(photos)}


def _parses(fmt: str, out: str) -> None:
    """stdout is exactly the format asked for: a program can read it whole."""
    import csv

    if fmt == "json":
        json.loads(out)
    elif fmt == "nl":
        assert out, "no rows"
        for line in out.splitlines():
            json.loads(line)
    elif fmt == "csv":
        assert "path" in next(csv.reader(io.StringIO(out)))
    elif fmt in ("paths", "paths0"):
        paths = out.split("\0" if fmt == "paths0" else "\n")
        assert paths[-1] == "" and all(Path(p).is_file() for p in paths[:-1]), out


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, fmt",
    [(name, fmt) for name, (_args, fmts) in STANDIN_COMMANDS.items() for fmt in fmts],
)
def test_every_surface_names_the_standins_on_stderr(standin_index, tmp_path, name, fmt):
    args, _fmts = STANDIN_COMMANDS[name]
    args = [a.format(photos=standin_index["photos"], tmp=tmp_path) for a in args]
    r = run(*args, *([] if fmt == "table" else [f"--{fmt}"]), env=standin_index)
    notices = [line for line in r.stderr.splitlines() if STANDIN_NOTICE in line]
    assert len(notices) == 1, r.stderr  # one line, once
    assert STANDIN_NOTICE not in r.stdout  # never in what a pipe reads
    _parses(fmt, r.stdout)


@pytest.mark.slow
def test_embed_and_build_index_name_the_standins_and_embed_follows_its_schema(
    standin_index, tmp_path
):
    import jsonschema

    from wherein.schemas.records import EMBED_RUN_SCHEMA_PATH

    e = {**standin_index, "WHEREIN_INDEX": str(tmp_path / "built")}
    r = run("embed", standin_index["photos"], "--out", tmp_path / "emb", "-q", "--json", env=e)
    embedded = json.loads(r.stdout)
    jsonschema.validate(embedded, json.loads(EMBED_RUN_SCHEMA_PATH.read_text()))
    assert embedded["embedded"] == 4 and embedded["complete"]
    r = run("build-index", tmp_path / "emb", "-q", "--json", env=e)
    assert STANDIN_NOTICE in r.stderr and json.loads(r.stdout)["space"].startswith(
        "wherein-standin"
    )


def test_real_models_get_no_notice(standin_index, tmp_path, capsys):
    """The notice follows the models and the index, not the command: real ones are quiet."""
    from wherein.indexer.models.modeldir import REAL_SPACE, ModelDir

    options.standin_banner(ModelDir(tmp_path), space=REAL_SPACE, index=tmp_path)
    options.standin_banner(space=None)
    assert capsys.readouterr().err == ""
    options.standin_banner(space="wherein-standin-colour-v1", index=tmp_path)
    assert STANDIN_NOTICE in capsys.readouterr().err


# -- names that mean the same everywhere ------------------------------------------------------
def test_top_means_at_most_n_results_on_every_command():
    for name in ("search", "select", "unique"):
        opt = option(commands()[name], "-k")
        assert opt is not None and "--top" in opt.opts, name
    assert option(commands()["unique"], "--k") is None  # was the neighbour count


def test_unique_k_is_how_many_images(indexed):
    hits = json.loads(run("unique", "-k", "2", "--neighbours", "3", "--json").stdout)
    assert len(hits) == 2
    assert len(json.loads(run("unique", "--top", "3", "--json").stdout)) == 3


@pytest.mark.parametrize(
    "args",
    [
        ["search", "red"],
        ["select", "red", "-p", "0.5"],
        ["label", "-l", "red"],
        ["dupes"],
        ["unique"],
    ],
)
def test_two_output_formats_are_a_usage_error(args, tmp_path):
    # Refused before any work: no index is needed to see it.
    r = run(*args, "--json", "--csv", "--index", tmp_path / "none", ok=False)
    assert r.exit_code == 2
    assert "--json and --csv" in r.output


# -- exit statuses ----------------------------------------------------------------------------
def test_usage_errors_exit_2_and_errors_exit_1(env):
    assert run("search", "--no-such-option", ok=False).exit_code == 2
    r = run("status", ok=False)  # no index yet: an error, not a usage error
    assert r.exit_code == 1 and r.output.startswith("Error: ")


def test_bad_values_are_usage_errors_exit_2(indexed):
    """The README's exit table: a bad value is a usage error (2), whichever check finds it."""
    ref = indexed / "red_square.jpg"
    for args, says in [
        (["search", "red:1e309"], "weight"),
        (["search", "red:-inf"], "weight"),
        (["search", "red", "--add", "x:nan"], "weight"),
        (["search", "--like", f"{ref}:abc"], "'abc' after ':' is not a weight"),
        (["search", "red", "--glob", "["], "never closed"),
        (["select", "red", "-p", "0.5", "--glob", "photos/[a"], "never closed"),
        (["search", "red", "--taken", "June"], "not a date"),
        (["search", "--like", ref, "-p", "0.5"], "needs a text term"),
        (["search", "-", "red"], "positive"),
        (["label", "-l", " , "], "no labels"),
        (["label", "-l", "red", "--template", "no braces"], "template"),
    ]:
        r = run(*args, ok=False)
        errors = [line for line in r.output.splitlines() if line.startswith("Error:")]
        assert r.exit_code == 2 and len(errors) == 1 and says in errors[0], (args, r.output)
        assert "Traceback" not in r.output


def test_ctrl_c_exits_130(indexed, monkeypatch):
    import wherein.indexer.store.status as S

    def interrupted(store):
        raise KeyboardInterrupt

    monkeypatch.setattr(S, "index_status", interrupted)
    r = run("status", ok=False)
    assert r.exit_code == 130 and "interrupted" in r.output


# -- models ------------------------------------------------------------------------------------
def test_models_check_names_the_converted_graph_it_checks(standin_models, tmp_path):
    import shutil

    models = tmp_path / "models"
    shutil.copytree(standin_models, models)
    image_dir = models / "siglip2-image"
    (image_dir / "siglip2_base_224_fp16.tflite").rename(image_dir / "siglip2_image_fp32_b1.tflite")
    (image_dir / "manifest.json").write_text(json.dumps({"file": "siglip2_image_fp32_b1.tflite"}))
    rows = json.loads(run("models", "check", models, "--json").stdout)["checks"]
    image = next(r for r in rows if r["model"] == "siglip2-image")
    assert image["file"] == "siglip2_image_fp32_b1.tflite" and image["status"] == "ok"


def test_convert_text_tower_reads_and_writes_the_out_directory(monkeypatch, tmp_path):
    import wherein.indexer.models.convert.build as C

    seen = {}

    def fake_convert(source, out_root, precision, log=print):
        seen.update(source=source, out=out_root)
        return {}

    monkeypatch.setattr(C, "convert_text_tower", fake_convert)
    out = tmp_path / "mine"
    for root in (out, tmp_path / "elsewhere"):  # an open_clip directory in each
        (root / "siglip2-text").mkdir(parents=True)
        (root / "siglip2-text" / "open_clip_config.json").write_text("{}")
    elsewhere = {"WHEREIN_MODELS": str(tmp_path / "elsewhere")}
    run("models", "convert", "siglip2-text", "--out", out, env=elsewhere)
    assert seen["out"] == out and Path(seen["source"].ref) == out / "siglip2-text"
    # Without --out, the --models directory is both source and destination.
    run("models", "convert", "siglip2-text", env=elsewhere)
    assert seen["out"] == tmp_path / "elsewhere"
    assert Path(seen["source"].ref) == tmp_path / "elsewhere" / "siglip2-text"


# -- serve: a taken port -----------------------------------------------------------------------
@pytest.fixture()
def taken_port():
    """A port something else listens on, on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def test_serve_on_a_taken_port_given_with_port_is_one_line(taken_port, tmp_path):
    r = run("serve", "--port", taken_port, "--index", tmp_path / "none", ok=False)
    assert r.exit_code == 1
    assert r.output.strip().splitlines() == [
        f"Error: port {taken_port} on 127.0.0.1 is taken by another program; pass another "
        "--port (--port 0 picks a free one)"
    ]


def test_serve_on_the_default_port_taken_picks_a_free_one(indexed, monkeypatch):
    from wherein.search.web import protocol

    served = []

    class Bound:  # the server serve would run, on the socket it bound (not started here)
        def __init__(self, app, sock) -> None:
            # Keep a copy of the socket: serve's own closes when the command returns.
            served.append(os.dup(sock.fileno()))

        def serve_forever(self) -> bool:
            return True

    monkeypatch.setattr(protocol, "HTTPServer", Bound)
    with socket.socket() as other:
        try:  # take the default port, unless someone already has it
            other.bind(("127.0.0.1", DEFAULT_PORT))
            other.listen()
        except OSError:
            pass
        r = run("serve")
    (fd,) = served
    with socket.socket(fileno=fd) as sock:  # the socket uvicorn would serve
        port = sock.getsockname()[1]
    assert port != DEFAULT_PORT
    assert f"port {DEFAULT_PORT} is taken; using free port {port}" in r.output
    assert f"open http://127.0.0.1:{port} " in r.output
    assert "Errno" not in r.output


# -- stderr: progress and native notices -------------------------------------------------------
class _TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_draws_nothing_when_there_is_nothing_to_do(monkeypatch):
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    monkeypatch.setattr(sys, "stderr", _TTY())
    with options.progress(quiet=False, fmt="table") as bar:
        bar.reset(0)
    assert sys.stderr.getvalue() == ""
    with options.progress(quiet=False, fmt="table") as bar:
        bar.reset(3)
        bar.update(3)
    assert "3/3" in sys.stderr.getvalue()


@pytest.mark.parametrize("quiet, fmt", [(True, "table"), (False, "json")])
def test_progress_is_off_with_quiet_and_json(monkeypatch, quiet, fmt):
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    monkeypatch.setattr(sys, "stderr", _TTY())
    with options.progress(quiet=quiet, fmt=fmt) as bar:
        bar.reset(3)
        bar.update(3)
    assert sys.stderr.getvalue() == ""


def test_native_notice_is_dropped_and_real_errors_kept(monkeypatch, capfd):
    from wherein.indexer.models import litert_graph as G

    monkeypatch.setattr(G, "_notice_pending", True)
    with G._native_notice_filtered():
        os.write(2, b"INFO: Created TensorFlow Lite XNNPACK delegate for CPU.\n")
        os.write(2, b"ERROR: something real\n")
    assert capfd.readouterr().err == "ERROR: something real\n"
    assert G._notice_pending is False


@pytest.mark.slow
def test_commands_print_only_what_the_user_needs_on_stderr(env, shapes, tmp_path):
    """Subprocesses, so LiteRT's native fd-2 output is seen as a user sees it."""
    exe = [sys.executable, "-c", "from wherein.search.cli import cli; cli()"]

    def stderr(*args) -> list[str]:
        p = subprocess.run([*exe, *map(str, args)], capture_output=True, text=True, env=os.environ)
        assert p.returncode == 0, p.stderr
        return p.stderr.splitlines()

    banner = [f"{BANNER} {env['models']} (they only know colours)."]
    assert stderr("index", shapes) == banner  # stderr is no terminal: no progress bar
    assert stderr("search", "red") == banner
    assert stderr("search", "red", "--json") == banner  # stderr: the JSON on stdout stays clean
    assert stderr("mask", shapes / "red_square.jpg", "red", "--out", tmp_path / "m") == banner


# -- words ---------------------------------------------------------------------------------------
def test_files_and_items_are_counted_in_the_same_words_everywhere(indexed):
    # One library read "6 images in the index (0.0 images/s)" after a re-run, "images 6" in
    # status, and "6 vectors (photos and video frames)" on a first run with a video.
    again = run("index", indexed).stdout
    assert "6 files: 0 embedded, 6 unchanged; 6 items in the index (" in again
    assert "files/s)" in again and "images" not in again
    table = run("status").stdout.splitlines()
    assert "files      6" in table and "items      6" in table
    assert not any(line.startswith("images") for line in table)
    info = json.loads(run("status", "--json").stdout)
    assert info["files"] == info["items"] == info["searchable"] == 6
    assert info["images"] == info["searchable"]  # the old key, deprecated, for one release
    summary = json.loads(run("index", indexed, "--json").stdout)
    assert summary["items"] == summary["images"] == 6
    assert summary["files_per_second"] == summary["images_per_second"]
    none = run("select", "red", "-p", "0.5", "--kind", "video")  # a library of photos
    assert "no file reaches probability 0.5" in none.stderr
