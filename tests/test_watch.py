"""`wherein index PATH --watch`: real file-system events reach the catalog and FAISS, and a
running reader (what `wherein serve` holds) sees them without reopening."""

from __future__ import annotations

import hashlib
import json
import os
import queue
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from launch import python_argv

from wherein.indexer.store.index_store import IndexStore
from wherein.indexer.store.vectors import index_ids
from wherein.search.service.search import open_index

from conftest import draw_shape

pytestmark = pytest.mark.slow
SETTLE = 0.8
WAIT_S = 60.0  # a bound, not a speed claim: the shared test machine can be slow


def wait_until(what: str, check: Callable[[], object], timeout: float = WAIT_S):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.05)


class Watcher:
    """`wherein index ROOT --watch --json` as a child process; stdout and stderr read as they come."""

    def __init__(self, root: Path, env: dict[str, Path]) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.err: list[str] = []
        self.out: list[str] = []
        self.proc = subprocess.Popen(
            # The test runner may ignore SIGINT; the child must get Python's default handler.
            python_argv(
                "-m",
                "wherein.search.cli",
                "index",
                str(root),
                "--watch",
                "--settle",
                str(SETTLE),
                "--json",
                "-q",
                sigint=True,
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={
                **os.environ,
                "WHEREIN_MODELS": str(env["models"]),
                "WHEREIN_INDEX": str(env["index"]),
            },
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._out_reader = threading.Thread(target=self._read_out, daemon=True)
        self._out_reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.err.append(line)
            self.lines.put(line)

    def _read_out(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.out.append(line)

    def batches(self) -> list[dict]:
        """The per-batch reports printed so far (after the first run's report)."""
        try:
            return json_values("".join(self.out))[1:]
        except ValueError:  # a report still being written
            return []

    def wait_reported(self, key: str, total: int) -> None:
        """Until the batches' `key` counts add up to total: the run that applied the last
        change has finished (its commit is visible to readers before the run ends)."""
        wait_until(f"{total} {key} reported", lambda: sum(b[key] for b in self.batches()) >= total)

    def wait_ready(self) -> None:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.5)
            except queue.Empty:
                assert self.proc.poll() is None, "".join(self.err)
                continue
            if line.startswith("watching "):
                return
        raise AssertionError("watcher never became ready: " + "".join(self.err))

    def stop(self) -> tuple[int, str, str]:
        self.proc.send_signal(signal.SIGINT)
        code = self.proc.wait(timeout=WAIT_S)
        self._reader.join(timeout=WAIT_S)
        self._out_reader.join(timeout=WAIT_S)
        return code, "".join(self.out), "".join(self.err)


def json_values(text: str) -> list:
    """The JSON values printed one after another (the first report is indented)."""
    dec, out, i = json.JSONDecoder(), [], 0
    while i < len(text):
        if text[i].isspace():
            i += 1
            continue
        value, i = dec.raw_decode(text, i)
        out.append(value)
    return out


def snapshot(reader: IndexStore) -> tuple[dict[str, tuple[int, str]], set[int]]:
    """(path -> (id, sha256)) of embedded rows, and the ids FAISS holds, as a reader sees them."""
    reader.ensure_vectors(persist=False)
    rows = {p: (r[0], r[3]) for p, r in reader.catalog.known_files().items() if r[4]}
    return rows, set(index_ids(reader.vectors.index).tolist())


def in_step(reader: IndexStore) -> dict[str, tuple[int, str]] | None:
    rows, faiss_ids = snapshot(reader)
    return rows if {i for i, _ in rows.values()} == faiss_ids else None


def test_watch_follows_creates_changes_moves_and_deletes(env, tmp_path):
    root = tmp_path / "live"
    draw_shape(root / "first.png", "red")
    w = Watcher(root, env)
    try:
        w.wait_ready()
        reader = IndexStore.open(env["index"])
        searcher = open_index(env["index"], env["models"])  # a long-running reader, as serve is
        assert set(in_step(reader) or {}) == {str(root / "first.png")}

        # create
        blue = root / "blue.png"
        draw_shape(blue, "blue")
        wait_until("blue.png is indexed", lambda: str(blue) in (in_step(reader) or {}))
        rows = in_step(reader)
        blue_id, blue_sha = rows[str(blue)]
        top = searcher.search("blue", k=1)
        assert [h.path for h in top] == [str(blue)]  # the reader found it without reopening

        # change the content in place
        draw_shape(blue, "green")
        wait_until(
            "the changed file is re-embedded",
            lambda: (in_step(reader) or {}).get(str(blue), (0, blue_sha))[1] != blue_sha,
        )
        assert [h.path for h in searcher.search("green", k=1)] == [str(blue)]

        # rename: the row moves, keeping its id (no re-embedding)
        moved = root / "renamed.png"
        changed_id = in_step(reader)[str(blue)][0]
        os.rename(blue, moved)
        rows = wait_until(
            "the rename is applied",
            lambda: (r := in_step(reader)) and str(moved) in r and str(blue) not in r and r,
        )
        assert rows[str(moved)][0] == changed_id

        # delete
        moved.unlink()
        rows = wait_until(
            "the deletion is applied", lambda: (r := in_step(reader)) and str(moved) not in r and r
        )
        assert set(rows) == {str(root / "first.png")}

        # a folder copied in, then moved out whole (one event, for the folder only)
        album = tmp_path / "staging" / "album"
        draw_shape(album / "a.png", "yellow")
        draw_shape(album / "b.png", "purple")
        shutil.copytree(album, root / "album")
        want = {str(root / "album" / "a.png"), str(root / "album" / "b.png")}
        wait_until("the album is indexed", lambda: want <= set(in_step(reader) or {}))
        os.rename(root / "album", tmp_path / "moved-out")
        wait_until("the album is gone", lambda: not (want & set(in_step(reader) or {"x": 0})))
        assert set(in_step(reader)) == {str(root / "first.png")}
        w.wait_reported("deleted", 3)  # renamed.png, then the album's two
        searcher.close()
        reader.close()
    finally:
        code, out, err = w.stop()
    assert code == 130, err  # Ctrl-C: the README's exit status for an interrupted command
    assert "stopped watching" in err and "Traceback" not in err
    batches = json_values(out)[1:]  # after the first run's report
    assert sum(b["moved"] for b in batches) == 1  # the rename kept its row


def test_a_rename_into_another_folder_keeps_its_row_and_vector(env, tmp_path):
    """A deletion in one folder and an addition in another: one batch, planned as a move."""
    root = tmp_path / "live"
    blue = root / "a" / "blue.png"
    draw_shape(blue, "blue")
    draw_shape(root / "b" / "red.png", "red")
    w = Watcher(root, env)
    try:
        w.wait_ready()
        reader = IndexStore.open(env["index"])
        blue_id = in_step(reader)[str(blue)][0]
        before = reader.catalog.vectors_for([blue_id])[1]
        moved = root / "b" / "renamed.png"
        os.rename(blue, moved)
        rows = wait_until(
            "the rename is applied",
            lambda: (r := in_step(reader)) and str(moved) in r and str(blue) not in r and r,
        )
        assert rows[str(moved)][0] == blue_id
        np.testing.assert_array_equal(reader.catalog.vectors_for([blue_id])[1], before)
        reader.close()
    finally:
        w.stop()
    batches = w.batches()
    assert sum(b["moved"] for b in batches) == 1
    assert sum(b["embedded"] for b in batches) == 0 and sum(b["deleted"] for b in batches) == 0


def test_ctrl_c_while_watching_exits_130_and_keeps_what_it_applied(env, tmp_path):
    root = tmp_path / "live"
    draw_shape(root / "first.png", "red")
    w = Watcher(root, env)
    try:
        w.wait_ready()
        draw_shape(root / "late.png", "blue")
        w.wait_reported("embedded", 1)  # in the catalog; FAISS on disk may lag (SAVE_EVERY_S)
    finally:
        code, _out, err = w.stop()
    assert code == 130, err
    lines = [ln for ln in err.splitlines() if "STAND-IN" not in ln and ln.strip()]
    assert lines[-1] == "stopped watching: everything committed so far is kept", err
    assert "Traceback" not in err
    # The FAISS file was saved on the way out: a fresh reader needs no catch-up.
    with IndexStore.open(env["index"]) as reader:
        assert reader.vectors.is_current(reader.catalog)
        assert reader.vectors.ntotal == 2


def test_a_file_still_being_written_is_not_indexed_half_written(env, tmp_path):
    root = tmp_path / "live"
    root.mkdir()
    src = tmp_path / "full.png"
    draw_shape(src, "orange", size=(640, 480))
    data = src.read_bytes()
    w = Watcher(root, env)
    try:
        w.wait_ready()
        reader = IndexStore.open(env["index"])
        target = root / "slow.png"
        with target.open("wb") as out:
            out.write(data[: len(data) // 2])
            out.flush()
            time.sleep(SETTLE * 0.6)  # a pause shorter than the settle time
            out.write(data[len(data) // 2 :])
        wait_until("the finished file is indexed", lambda: str(target) in (in_step(reader) or {}))
        rows = in_step(reader)
        assert rows[str(target)][1] == hashlib.sha256(data).hexdigest()
        w.wait_reported("embedded", 1)
        reader.close()
    finally:
        code, out, err = w.stop()
    assert code == 130, err  # Ctrl-C: the README's exit status for an interrupted command
    # Never read while half-written: no batch skipped it as a broken image.
    batches = json_values(out)[1:]
    assert batches and [b["skipped"] for b in batches] == [0] * len(batches)
    assert sum(b["embedded"] for b in batches) == 1
