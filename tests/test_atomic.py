"""A write of vectors.faiss that fails part-way leaves the previous file byte for byte, and no
temporary file: the FAISS copy is never half-written, whether the writer raises, the disk
fills up at the last buffered block, or the user presses Ctrl-C."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest
from launch import python_argv

from wherein.indexer.store import vectors as V
from wherein.indexer.store.atomic import atomic_path, write_atomic
from wherein.indexer.store.vectors import IndexChoice, VectorIndex

DIM = 16


def saved_index(directory: Path, n: int, seed: int = 0) -> VectorIndex:
    vi = VectorIndex(directory)
    vi.index = V.new_index(IndexChoice("flat", "IDMap2,Flat"), DIM)
    vi.choice = IndexChoice("flat", "IDMap2,Flat")
    vi.index.add_with_ids(
        np.random.default_rng(seed).random((n, DIM), dtype=np.float32), np.arange(1, n + 1)
    )
    vi.generation, vi.model_id, vi.dim = 1, "m", DIM
    vi.save()
    return vi


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_writer_failing_mid_file_keeps_old_vectors(tmp_path, monkeypatch):
    vi = saved_index(tmp_path, 50)
    before = snapshot(tmp_path)
    vi.index.add_with_ids(np.ones((30, DIM), np.float32), np.arange(100, 130))
    vi.generation = 2

    real = V.write_index_file

    def fails_half_way(index, path):
        real(index, path)  # the whole new file, then keep only half of it, as a full disk would
        data = Path(path).read_bytes()
        Path(path).write_bytes(data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(V, "write_index_file", fails_half_way)
    with pytest.raises(OSError) as err:
        vi.save()
    assert err.value.filename == str(tmp_path / "vectors.faiss")  # names the real file
    assert snapshot(tmp_path) == before  # same files, same bytes: no temporary left behind
    fresh = VectorIndex(tmp_path)
    assert fresh.load() and fresh.ntotal == 50 and fresh.generation == 1


def test_interrupt_during_write_keeps_old_file(tmp_path):
    target = tmp_path / "vectors.json"
    write_atomic(target, b"old contents")
    with pytest.raises(KeyboardInterrupt), atomic_path(target) as tmp:
        tmp.write_bytes(b"new con")
        raise KeyboardInterrupt
    assert target.read_bytes() == b"old contents"
    assert [p.name for p in tmp_path.iterdir()] == ["vectors.json"]


def test_sidecar_failure_after_faiss_keeps_a_loadable_pair(tmp_path, monkeypatch):
    # The FAISS file was replaced but the sidecar write fails: the old sidecar must not
    # describe the new file as current (load treats a count mismatch as stale).
    vi = saved_index(tmp_path, 20)
    vi.index.add_with_ids(np.ones((5, DIM), np.float32), np.arange(100, 105))
    vi.generation = 2

    def no_sidecar(path, data, durable=True):
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(V, "write_atomic", no_sidecar)
    with pytest.raises(OSError):
        vi.save()
    fresh = VectorIndex(tmp_path)
    assert not fresh.load() or fresh.generation == 1 and fresh.ntotal == 20
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


_FSIZE_SCRIPT = textwrap.dedent(
    """
    import resource, signal, sys
    from pathlib import Path
    import numpy as np
    from wherein.indexer.store.vectors import VectorIndex
    import faiss

    d = Path(sys.argv[1])
    vi = VectorIndex(d)
    assert vi.load()
    vi.index.add_with_ids(np.ones((200, vi.dim), np.float32), np.arange(1000, 1200))
    vi.generation += 1
    size = len(faiss.serialize_index(vi.index))
    # The limit falls inside the last buffered block: the error surfaces only when the
    # tail is flushed at close, where faiss.write_index(index, filename) cannot report it.
    resource.setrlimit(resource.RLIMIT_FSIZE, (size - 100, size - 100))
    try:
        vi.save()
    except OSError as exc:
        print("raised", exc.errno)
    else:
        print("saved")
    """
)


def test_file_size_limit_at_the_last_block_is_an_error(tmp_path):
    saved_index(tmp_path, 40)
    before = snapshot(tmp_path)

    out = subprocess.run(
        python_argv("-c", _FSIZE_SCRIPT, str(tmp_path), ignore_sigxfsz=True),
        capture_output=True,
        text=True,
        env=os.environ,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["raised", "27"]  # EFBIG, reported, not swallowed
    assert snapshot(tmp_path) == before
