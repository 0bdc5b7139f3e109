"""Readers while `wherein index` commits, and two writers on one index.

Readers (search, select, dupes, a running `serve`) never fail while a real indexer
process commits batches, only ever see whole batches, and `serve` picks the new
images up without a restart. A second writer is refused with the holder's PID and exit
status 75, or waits for it with --wait.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from wherein.indexer.store.index_store import IndexStore
from wherein.indexer.store.vectors import index_ids
from wherein.search.cli import cli

from conftest import draw_shape

N_PHOTOS = 320
DEADLINE_S = 240  # bounds every loop below; the runs take a fraction of it


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("many")
    rng = np.random.default_rng(11)
    for i in range(N_PHOTOS):
        Image.fromarray(rng.integers(0, 256, (96, 128, 3), dtype=np.uint8)).save(
            root / f"{i:04d}.png"
        )
    return root


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def popen(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "wherein.search.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        **kw,
    )


# -- one reader, one commit landing in the middle of its sync ----------------------------
def test_sync_racing_a_commit_never_loses_the_batch(env, shapes, tmp_path, monkeypatch):
    assert invoke("index", str(shapes), "-q").exit_code == 0
    reader = IndexStore.open(env["index"])
    draw_shape(tmp_path / "more" / "a.png", "green")
    draw_shape(tmp_path / "late" / "b.png", "yellow", size=(200, 120))
    assert invoke("index", str(tmp_path / "more"), "-q").exit_code == 0  # the reader is behind

    real = reader.catalog.vectors_for
    landed = []

    def commit_meanwhile(ids):
        if not landed:  # another process commits a batch between the reader's reads
            landed.append(invoke("index", str(tmp_path / "late"), "-q").exit_code)
        return real(ids)

    monkeypatch.setattr(reader.catalog, "vectors_for", commit_meanwhile)
    with reader:
        reader.ensure_vectors(persist=False)
        assert landed == [0]
        reader.ensure_vectors(persist=False)  # nothing new since: must now hold everything
        have = np.sort(index_ids(reader.vectors.index))
        assert have.tolist() == reader.catalog.embedded_ids().tolist()
        assert len(have) == 8


# -- a real indexer and real readers ------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=60) as r:
        assert r.status == 200
        return json.loads(r.read())


@pytest.mark.slow
def test_readers_while_index_commits(env, photos, tmp_path):
    first = tmp_path / "first"
    draw_shape(first / "red.png", "red")
    assert invoke("index", str(first), "-q").exit_code == 0
    port = free_port()
    server = popen("serve", "--port", str(port))
    base = f"http://127.0.0.1:{port}"
    indexer = None
    try:
        deadline = time.monotonic() + DEADLINE_S
        while True:  # serve is up
            assert server.poll() is None, server.stderr.read()
            try:
                get_json(base + "/api/status")
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.2)

        readers = [
            ("search", "red", "--json", "-k", "100000"),
            ("select", "red", "-p", "0.000001", "--json"),
            ("dupes", "--json"),
        ]
        for args in readers:  # models loaded before the indexer starts
            assert invoke(*args).exit_code == 0
        get_json(base + "/api/search?q=red")
        indexer = popen("index", str(photos), "-q")
        seen = {"search": [], "serve": []}
        mid_run = 0
        while indexer.poll() is None:
            assert time.monotonic() < deadline, "the indexer did not finish"
            r = invoke(*readers[0])
            assert r.exit_code == 0, r.output
            hits = json.loads(r.stdout)
            assert all(h["sha256"] and h["size"] for h in hits)  # whole rows only
            seen["search"].append(len(hits))

            page = get_json(base + "/api/search?q=red&per_page=200")
            seen["serve"].append(len(page["hits"]))
            mid_run += 1 < len(hits) < N_PHOTOS + 1

            for args in readers[1:]:
                r = invoke(*args)
                assert r.exit_code == 0, r.output
                json.loads(r.stdout)
        assert indexer.wait() == 0, indexer.stderr.read()
        assert mid_run, f"no reader ran while the indexer was committing: {seen}"
        for name, counts in seen.items():  # images only arrive: a view never goes back
            assert counts == sorted(counts), (name, counts)

        # serve picks up the finished run without a restart.
        total = N_PHOTOS + 1
        assert len(get_json(base + "/api/search?q=red&per_page=200")["hits"]) == 200
        assert get_json(base + "/api/status")["images"] == total
        last = get_json(base + f"/api/search?q=red&per_page=200&page={-(-total // 200)}")
        assert (total - 1) % 200 + 1 == len(last["hits"]) and not last["has_more"]
        r = invoke("status", "--check", "--json")
        assert r.exit_code == 0 and json.loads(r.stdout)["vectors_in_faiss"] == total
    finally:
        for proc in (indexer, server):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=60)


# -- two writers ----------------------------------------------------------------------------
HOLD = (
    "import sys\n"
    "from wherein.indexer.store.index_store import IndexStore\n"
    "with IndexStore.open(sys.argv[1], write=True, create=True):\n"
    "    print('holding', flush=True)\n"
    "    sys.stdin.read()\n"  # until the test closes our stdin
)


def hold_lock(index: Path) -> subprocess.Popen:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(index)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=os.environ,
    )
    assert holder.stdout.readline().strip() == "holding"
    return holder


@pytest.mark.slow
def test_second_writer_gets_pid_and_exit_75_or_waits(env, shapes):
    index = env["index"]
    holder = hold_lock(index)
    try:
        refused = popen("index", str(shapes), "-q")
        _, err = refused.communicate(timeout=DEADLINE_S)
        assert refused.returncode == 75
        errors = [line for line in err.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1 and f"locked by PID {holder.pid}" in errors[0], err

        waiting = popen("index", str(shapes), "-q", "--wait", "--json")
        line = waiting.stderr.readline()
        while "locked by" not in line:  # the stand-in banner may come first
            assert line, "index --wait ended without saying what it waits for"
            line = waiting.stderr.readline()
        assert f"PID {holder.pid}" in line and "waiting" in line
        assert waiting.poll() is None  # still waiting while the lock is held
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    out, err = waiting.communicate(timeout=DEADLINE_S)
    assert waiting.returncode == 0, err
    assert json.loads(out)["images"] == 6
