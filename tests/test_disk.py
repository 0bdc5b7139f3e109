"""When the disk says no: full, a file-size limit, a read-only index folder.

Real subprocesses against real limits: RLIMIT_FSIZE (any user), a small tmpfs and a
read-only bind mount (root; skipped where mounting is not allowed). Each failure is one
`Error:` line and a non-zero exit; the index still passes `status --check` and the next
run resumes where the failed one stopped.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from launch import python_argv
from PIL import Image

from wherein.search.web.app import create_app

N_PHOTOS = 160


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("photos")
    rng = np.random.default_rng(3)
    for i in range(N_PHOTOS):
        Image.fromarray(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)).save(
            root / f"{i:04d}.png"
        )
    return root


def wherein(*args: str, fsize: int | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        # Ignored SIGXFSZ: a write past the limit fails with EFBIG instead of killing.
        python_argv("-m", "wherein.search.cli", *args, ignore_sigxfsz=True, fsize=fsize),
        capture_output=True,
        text=True,
        env=os.environ,
        timeout=300,
    )


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def check_ok(index: Path) -> dict:
    proc = wherein("status", "--check", "--json", "--index", str(index))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    info = json.loads(proc.stdout)
    assert info["check"]["ok"], info["check"]
    return info


def index_json(photos: Path, index: Path) -> dict:
    proc = wherein("index", str(photos), "--index", str(index), "--json", "-q")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def leftovers(index: Path) -> list[str]:
    return [p.name for p in index.iterdir() if p.name.endswith(".tmp")]


# -- a file-size limit (any user) -----------------------------------------------------------
@pytest.mark.slow
def test_commit_past_file_size_limit_fails_cleanly_and_resumes(env, photos, tmp_path):
    index = env["index"]
    # A limit at 60% of the largest file a complete run writes: the first batches fit,
    # not all of them (whatever the batch size and the catalog's layout).
    index_json(photos, tmp_path / "whole")
    largest = max(p.stat().st_size for p in (tmp_path / "whole").iterdir())
    failed = wherein("index", str(photos), "--index", str(index), "-q", fsize=largest * 6 // 10)
    line = one_error_line(failed)
    assert failed.returncode == 1 and "cannot write" in line and "run again" in line, line

    info = check_ok(index)
    committed = info["images"]
    assert 0 < committed < N_PHOTOS, "the limit must stop the run mid-way"
    assert leftovers(index) == []

    resumed = index_json(photos, index)
    assert resumed["embedded"] == N_PHOTOS - committed and resumed["unchanged"] == committed
    assert check_ok(index)["vectors_in_faiss"] == N_PHOTOS


@pytest.mark.slow
def test_vectors_file_past_size_limit_keeps_old_file(env, photos):
    index = env["index"]
    index_json(photos, index)
    faiss_file = index / "vectors.faiss"
    before = faiss_file.read_bytes()
    (index / "vectors.json").unlink()  # vectors must be rebuilt and saved by the next check
    failed = wherein("status", "--repair", "--index", str(index), fsize=len(before) // 2)
    line = one_error_line(failed)
    assert "vectors.faiss" in line and "File too large" in line
    assert faiss_file.read_bytes() == before and leftovers(index) == []
    assert wherein("status", "--repair", "--index", str(index)).returncode == 0  # the limit gone
    assert check_ok(index)["vectors_in_faiss"] == N_PHOTOS


# -- a full disk (root: a small tmpfs) --------------------------------------------------------
def _mount(*args: str) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


@pytest.fixture()
def small_disk(tmp_path) -> Iterator[Path]:
    disk = tmp_path / "disk"
    disk.mkdir()
    if not _mount("-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)):
        pytest.skip("needs root and permission to mount a tmpfs")
    try:
        yield disk
    finally:
        _umount(disk)


def fill(disk: Path, leave_kb: int) -> Path:
    st = os.statvfs(disk)
    ballast = disk / "ballast"
    with open(ballast, "wb") as f:
        f.write(b"\0" * max(0, st.f_bavail * st.f_frsize - leave_kb * 1024))
    return ballast


@pytest.mark.slow
def test_full_disk_during_index_fails_cleanly_and_resumes(env, photos, small_disk):
    index = small_disk / "index"
    index_json(photos / "0000.png", index)  # a first image while there is room
    ballast = fill(small_disk, leave_kb=300)

    failed = wherein("index", str(photos), "--index", str(index), "-q")
    line = one_error_line(failed)
    assert failed.returncode == 1 and ("No space left on device" in line or "full" in line)
    assert leftovers(index) == []

    # Searching needs no space.
    found = wherein("search", "red", "--index", str(index), "--paths", "-k", "3")
    assert found.returncode == 0 and found.stdout.strip(), found.stderr

    ballast.unlink()  # space is back
    committed = check_ok(index)["images"]
    assert committed < N_PHOTOS
    resumed = index_json(photos, index)
    assert resumed["images"] == N_PHOTOS and resumed["unchanged"] == committed
    assert check_ok(index)["vectors_in_faiss"] == N_PHOTOS


# -- a read-only index folder ---------------------------------------------------------------------
@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[Path]:
    """The folder, read-only for this process: a read-only bind mount as root, else chmod."""
    if os.geteuid() != 0:
        modes = {p: p.stat().st_mode for p in [folder, *folder.iterdir()]}
        for p in modes:
            p.chmod(0o555 if p.is_dir() else 0o444)
        try:
            yield folder
        finally:
            for p, mode in modes.items():
                p.chmod(mode)
        return
    view = folder.with_name(folder.name + "-ro")
    view.mkdir()
    if not (
        _mount("--bind", str(folder), str(view)) and _mount("-o", "remount,bind,ro", str(view))
    ):
        _umount(view)
        pytest.skip("root without permission to make a read-only bind mount")
    try:
        with pytest.raises(OSError):
            (view / "probe").write_bytes(b"")  # really read-only
        yield view
    finally:
        _umount(view)


@pytest.mark.slow
def test_read_only_index_searches_and_refuses_to_index(env, shapes):
    index_json(shapes, env["index"])
    with read_only(env["index"]) as ro:
        found = wherein("search", "red", "--index", str(ro), "--json", "-k", "2")
        assert found.returncode == 0, found.stderr
        assert {Path(h["path"]).name for h in json.loads(found.stdout)} == {
            "red_disc.png",
            "red_square.jpg",
        }
        assert wherein("status", "--index", str(ro)).returncode == 0

        refused = wherein("index", str(shapes), "--index", str(ro), "-q")
        line = one_error_line(refused)
        assert refused.returncode == 1
        assert "cannot write to this index folder" in line and "search" in line

        with TestClient(create_app(ro, env["models"]), base_url="http://127.0.0.1") as client:
            hits = client.get("/api/search", params={"q": "red"}).json()["hits"]
            assert hits
            thumb = client.get(hits[0]["thumb_url"])
            assert thumb.status_code == 200 and thumb.headers["content-type"] == "image/jpeg"
        assert not (ro / "cache").exists()
