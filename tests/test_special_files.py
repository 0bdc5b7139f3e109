"""Only regular files are read (issue 28): a FIFO, /dev/zero or /dev/urandom under a media name,
or swapped in for an indexed photo, is a recorded skip or a one-line error: never a hang,
never unbounded memory, never a traceback.

Every command runs in a child with a data-size limit and a timeout, so a regression fails
the test instead of hanging the suite or eating the machine's memory.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
from launch import python_argv

from wherein.schemas.records import HIT_SCHEMA_PATH

MEMORY_LIMIT = 3 << 30  # bytes of data a child may hold: ample for a search, not for /dev/zero
TIMEOUT = 120

_CLI = """\
import resource, runpy, sys
resource.setrlimit(resource.RLIMIT_DATA, ({limit}, {limit}))
{patch}
sys.argv = ["wherein", *sys.argv[1:]]
runpy.run_module("wherein.search.cli", run_name="__main__", alter_sys=True)
"""


def wherein(*args: str | Path, patch: str = "") -> subprocess.CompletedProcess:
    script = _CLI.format(limit=MEMORY_LIMIT, patch=patch)
    return subprocess.run(
        python_argv("-c", script, *map(str, args)),
        capture_output=True,
        text=True,
        env=os.environ,
        timeout=TIMEOUT,  # a FIFO read on main: this raises, the test fails, the suite goes on
    )


def no_traceback(proc: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr, proc.stderr


def skips(index: Path) -> dict[str, str]:
    proc = wherein("status", "--index", index, "--json")
    assert proc.returncode == 0, proc.stderr
    return {s["path"]: s["reason"] for s in json.loads(proc.stdout)["skipped"]}


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


SPECIALS = {
    "dev-zero": lambda p: p.symlink_to("/dev/zero"),
    "fifo": fifo,
    "dev-urandom": lambda p: p.symlink_to("/dev/urandom"),
}


@pytest.mark.parametrize(
    ("name", "special"), [("z.jpg", "dev-zero"), ("f.jpg", "fifo"), ("u.mp4", "dev-urandom")]
)
def test_a_named_special_file_is_a_recorded_skip(env, tmp_path, name, special):
    path = tmp_path / name
    SPECIALS[special](path)
    proc = wherein("index", path, "--index", env["index"])
    no_traceback(proc)
    assert proc.returncode in (0, 1), proc.stderr
    reason = skips(env["index"])[str(path)]
    assert "not a regular file" in reason, reason


def test_a_photo_swapped_for_dev_zero_after_the_walk_is_a_recorded_skip(env, shapes):
    victim = shapes / "red_square.jpg"
    # The walk sees the photo; before it is read, it becomes a link to /dev/zero.
    patch = f"""
import os
import wherein.indexer.ingest.run as run
_walk = run.walk
def walk(*a, **k):
    found = list(_walk(*a, **k))
    os.unlink({str(victim)!r})
    os.symlink("/dev/zero", {str(victim)!r})
    return iter(found)
run.walk = walk
"""
    proc = wherein("index", shapes, "--index", env["index"], patch=patch)
    no_traceback(proc)
    assert proc.returncode in (0, 1), proc.stderr
    assert "not a regular file" in skips(env["index"])[str(victim)]
    assert wherein("status", "--check", "--index", env["index"]).returncode == 0


@pytest.mark.parametrize("special", ["dev-zero", "fifo"])
def test_search_mask_on_a_hit_that_became_special_skips_that_mask(env, shapes, tmp_path, special):
    assert wherein("index", shapes, "--index", env["index"], "-q").returncode == 0
    victim = shapes / "red_square.jpg"
    victim.unlink()
    SPECIALS[special](victim)
    out = tmp_path / "masks"
    proc = wherein(
        "search", "red", "-k", "6", "--mask", "--out", out, "--json", "--index", env["index"]
    )
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    hits = json.loads(proc.stdout)
    by_path = {h["path"]: h for h in hits}
    assert by_path[str(victim)].get("mask_path") is None  # its mask is skipped...
    assert any(h.get("mask_path") for h in hits)  # ...the other hits get theirs
    assert not [p for p in out.iterdir() if "red_square" in p.name]
    # ...and said so: on the hit, and in one line on standard error.
    kind = "a FIFO" if special == "fifo" else "a character device"
    why = f"cannot read: not a regular file ({kind}); never read"
    assert by_path[str(victim)]["mask_skipped"] == why
    assert f"warning: no mask for {victim}: {why}" in proc.stderr.splitlines()
    assert not [h for h in hits if h.get("mask_skipped") and h["path"] != str(victim)]
    schema = json.loads(HIT_SCHEMA_PATH.read_text())
    for h in hits:
        jsonschema.validate(h, schema)


def test_select_mask_on_a_hit_that_became_special_says_so(env, shapes, tmp_path):
    assert wherein("index", shapes, "--index", env["index"], "-q").returncode == 0
    victim = shapes / "red_disc.png"
    victim.unlink()
    fifo(victim)
    out, export = tmp_path / "masks", tmp_path / "red.jsonl"
    args = ("select", "red", "-p", "0.5", "--mask", "--out", out, "--export", export)
    proc = wherein(*args, "--json", "--index", env["index"])
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    why = "cannot read: not a regular file (a FIFO); never read"
    warning = f"no mask for {victim}: {why}"
    assert f"warning: {warning}" in proc.stderr.splitlines()
    printed = {h["path"]: h for h in json.loads(proc.stdout)}
    rows = {r["path"]: r for r in map(json.loads, export.read_text().splitlines())}
    for hits in (printed, rows):
        assert hits[str(victim)]["mask_skipped"] == why and "mask_path" not in hits[str(victim)]
        assert hits[str(shapes / "red_square.jpg")]["mask_path"]


@pytest.fixture(autouse=True)
def _needs_mkfifo():
    if not hasattr(os, "mkfifo") or shutil.which("true") is None:
        pytest.skip("needs FIFOs")
