"""Kill the indexer mid-run (real process, real signal): the index stays sound and resumes."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from launch import python_argv
from PIL import Image

N_IMAGES = 300


@pytest.fixture(scope="module")
def many_photos(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("many")
    rng = np.random.default_rng(7)
    for i in range(N_IMAGES):
        noise = rng.integers(0, 256, (384, 512, 3), dtype=np.uint8)
        Image.fromarray(noise).save(root / f"{i:04d}.jpg", quality=95)
    return root


def _wherein(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        # Started from a background job, pytest (and so the child) has SIGINT ignored.
        python_argv("-m", "wherein.search.cli", *args, sigint=True),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        **kw,
    )


def _committed(index: Path) -> int:
    db = index / "catalog.db"
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as conn:
            return conn.execute("SELECT count(*) FROM embeddings").fetchone()[0]
    except sqlite3.OperationalError:
        return 0


def _kill_after_first_commit(proc: subprocess.Popen, index: Path, sig: int) -> int:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if _committed(index) > 0:
            proc.send_signal(sig)
            break
        time.sleep(0.01)
    proc.wait(timeout=60)
    return _committed(index)


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "wherein.search.cli", *args],
        capture_output=True,
        text=True,
        env=os.environ,
    )


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["kill-9", "ctrl-c"])
def test_killed_run_leaves_sound_index_and_resumes(env, many_photos, sig):
    index = env["index"]
    proc = _wherein("index", str(many_photos), "-q")
    committed = _kill_after_first_commit(proc, index, sig)
    assert 0 < committed < N_IMAGES, "the run must be stopped mid-way"
    if sig == signal.SIGINT:
        assert proc.returncode == 130
        assert "interrupted" in proc.stderr.read()
    else:
        assert proc.returncode == -signal.SIGKILL

    check = _run("status", "--check", "--json")
    assert check.returncode == 0, check.stdout + check.stderr
    report = json.loads(check.stdout)
    assert report["check"]["ok"] and report["images"] == committed

    resumed = _run("index", str(many_photos), "--json", "-q")
    assert resumed.returncode == 0, resumed.stderr
    r = json.loads(resumed.stdout)
    assert r["embedded"] == N_IMAGES - committed  # nothing committed is embedded twice
    assert r["unchanged"] == committed and r["images"] == N_IMAGES

    final = _run("status", "--check", "--json")
    assert final.returncode == 0 and json.loads(final.stdout)["vectors_in_faiss"] == N_IMAGES
