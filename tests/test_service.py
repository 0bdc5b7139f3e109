"""The service layer (search/service/): the workflows the CLI and the web app call.

Each returns a typed result whose to_dict() follows its schema in schemas/; the CLI
prints what the library found (the same hits); the missing-extra error and the engine
dispatch are one each, whichever command meets them.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import jsonschema
import pytest
from cli_run import run

from wherein.schemas import records as R

RED = {"red_square.jpg", "red_disc.png"}
MISSING_RAY = "Error: ray is not installed: pip install 'wherein[scale]'"


def errors(result) -> list[str]:
    """stderr without the stand-in banner."""
    return [ln for ln in result.stderr.splitlines() if "STAND-IN" not in ln]


def validator(path: Path, definition: str | None = None):
    schema = json.loads(path.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    if definition is not None:  # one $defs entry, its sibling $defs resolvable
        schema = {**schema["$defs"][definition], "$defs": schema["$defs"]}
    return jsonschema.Draft202012Validator(schema)


@pytest.fixture()
def indexed(env, shapes) -> Path:
    run("index", shapes, "-q")
    return shapes


# -- curate ---------------------------------------------------------------------------------
def test_select_result_follows_its_schema_and_is_what_the_cli_prints(indexed, env, tmp_path):
    from wherein.search.service import curate as C

    export, dest = tmp_path / "sel.csv", tmp_path / "copies"
    request = C.SelectRequest(
        ["red"],
        0.5,
        mask=True,
        out_dir=tmp_path / "masks",
        copy_to=dest,
        export_path=export,
    )
    result = C.select(request)
    summary = result.to_dict()
    validator(R.CURATE_SCHEMA_PATH, "select").validate(summary)
    validator(R.CURATE_SCHEMA_PATH).validate(summary)  # and the file's own oneOf
    assert {Path(h.path).name for h in result.hits} == RED
    assert summary["selected"] == 2 and summary["placed"]["files"] == 2
    assert summary["mask"]["engine"] == "local" and summary["mask"]["masked"] == 2
    assert summary["export"] == {
        "path": str(export),
        "format": "csv",
        "kind": "table",
        "rows": 2,
        "masked": 0,
    }
    assert sorted(p.name for p in dest.rglob("*") if p.is_file()) == sorted(RED)
    printed = json.loads(run("select", "red", "-p", "0.5", "--json").stdout)
    assert [h["path"] for h in printed] == [h.path for h in result.hits]


def test_label_dupes_unique_results_follow_their_schemas(indexed, tmp_path):
    from wherein.search.service import curate as C
    from wherein.search.service.export import ExportTo

    label = C.label("red,blue", export=ExportTo(tmp_path / "l.jsonl"))
    validator(R.CURATE_SCHEMA_PATH, "label").validate(label.to_dict())
    assert label.to_dict()["stored"] == 2 * label.images and label.export.rows == label.images
    dupes = C.dupes(exact=True)
    validator(R.CURATE_SCHEMA_PATH, "dupes").validate(dupes.to_dict())
    assert dupes.to_dict()["exact"] and dupes.groups == 0  # every shape file differs
    unique = C.unique(3, limit=4, export=ExportTo(tmp_path / "u.csv"))
    validator(R.CURATE_SCHEMA_PATH, "unique").validate(unique.to_dict())
    assert unique.to_dict()["rows"] == 4 == unique.export.rows
    for d in (label.to_dict(), dupes.to_dict(), unique.to_dict()):
        validator(R.CURATE_SCHEMA_PATH).validate(d)


# -- one missing-extra error, one engine dispatch --------------------------------------------
def test_a_missing_ray_is_the_same_one_line_for_embed_and_select(indexed, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ModuleNotFoundError
    res = run("embed", indexed, "--out", tmp_path / "emb", "--engine", "ray", "-q", ok=False)
    assert res.exit_code == 1 and errors(res) == [MISSING_RAY], res.output
    coco = tmp_path / "red.coco.json"
    res = run("select", "red", "-p", "0.5", "--mask", "--engine", "ray", "--export", coco, ok=False)
    assert res.exit_code == 1 and errors(res) == [MISSING_RAY], res.output
    assert "Traceback" not in res.output and not coco.exists()


def test_the_missing_extra_error_names_the_extra_and_the_pip_command():
    from wherein.schemas.errors import WhereinError
    from wherein.search.service.errors import MissingExtra, needs_extra

    with pytest.raises(MissingExtra) as caught, needs_extra():
        import pyarrow.no_such_module  # noqa: F401  (a submodule of the extra's module)
    assert isinstance(caught.value, WhereinError) and caught.value.exit_code == 1
    assert (caught.value.module, caught.value.extra) == ("pyarrow", "scale")
    assert str(caught.value) == "pyarrow is not installed: pip install 'wherein[scale]'"
    with pytest.raises(ModuleNotFoundError), needs_extra():  # not the extra's: a real bug
        import wherein_no_such_module  # noqa: F401


def test_a_ray_address_without_the_ray_engine_is_a_usage_error_for_every_command(indexed, tmp_path):
    out = tmp_path / "emb"
    for args in (
        ["embed", indexed, "--out", out, "--ray-address", "127.0.0.1:1"],
        ["select", "red", "-p", "0.5", "--ray-address", "127.0.0.1:1"],
    ):
        res = run(*args, ok=False)
        assert res.exit_code == 2, res.output
        assert "Error: --ray-address only applies with --engine ray" in res.output
    assert not out.exists()


# -- scale ----------------------------------------------------------------------------------
@pytest.mark.slow
def test_build_index_json_follows_its_schema(env, shapes, tmp_path):
    emb, index = tmp_path / "emb", tmp_path / "built"
    run("embed", shapes, "--out", emb, "-q")
    built = json.loads(run("build-index", emb, "--index", index, "--json").stdout)
    validator(R.BUILD_INDEX_SCHEMA_PATH).validate(built)
    assert built["vectors"] == built["added"] == 6 and built["index"] == str(index)


# -- index, watch, status -------------------------------------------------------------------
def test_index_and_status_results_follow_their_schemas(env, shapes):
    from wherein.search.service import index as I

    result = I.index(I.IndexRequest([shapes]))
    validator(R.INDEX_RUN_SCHEMA_PATH).validate(result.to_dict())
    assert result.images == 6 and result.watched is None
    status = I.status(check=True)
    assert status.ok and not status.damaged
    validator(R.STATUS_SCHEMA_PATH).validate(status.to_dict())
    assert status.to_dict()["images"] == 6


def test_a_watch_line_follows_its_schema():
    from wherein.search.service.index import WATCH_COUNTS, WatchBatch

    counts = {k: 0 for k in WATCH_COUNTS} | {"embedded": 2, "deleted": 1}
    line = WatchBatch(["/photos/new"], counts, 7).to_dict()
    validator(R.WATCH_SCHEMA_PATH).validate(line)
    assert (line["embedded"], line["deleted"], line["images"]) == (2, 1, 7)


def test_index_refuses_only_ignored_roots_before_making_an_index(env, tmp_path):
    from wherein.schemas.errors import WhereinError
    from wherein.search.service import index as I

    notes = tmp_path / "notes.txt"
    notes.write_text("not a photo")
    with pytest.raises(WhereinError, match="not a folder or an image file"):
        I.index(I.IndexRequest([notes]))
    assert not env["index"].exists()


# -- models ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_optimize_and_check_results_follow_their_schema(standin_models, tmp_path):
    from wherein.search.service import models as M

    root = tmp_path / "models"
    shutil.copytree(standin_models, root)
    result = M.optimize(root, tmp_path / "no-index", parts=["siglip2-text"])
    assert result.self_test is not None and result.ok
    validator(R.MODELS_SCHEMA_PATH, "optimize").validate(result.to_dict())
    printed = run("models", "optimize", "--models", root, "--index", tmp_path / "no-index")
    assert "self-test  ok" in printed.output
    check = M.check(root)
    assert check.ok and check.problem() is None
