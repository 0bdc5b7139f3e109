"""An index built on disk (vectors.faiss + a memory-mapped .ivfdata) is a self-contained folder:
moved or copied elsewhere it searches its own .ivfdata, and a missing one is a one-line error.

The vectors are synthetic (clustered 768-d, written by `wherein embed`'s own shard writer), so
the build is quick; a small --max-memory sends it down the on-disk path.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

pytestmark = pytest.mark.scale

DIM = 768
N = 2500  # FAISS wants >= 39 training vectors for each of the 64 lists
BUDGET = 2_000_000  # 2500 x (768 + 16) bytes of codes > half of it: on disk


@pytest.fixture(scope="module")
def embedded(tmp_path_factory, standin_models) -> Path:
    """An embed directory of N clustered synthetic vectors, in the stand-in models' space
    (so that `wherein search` embeds its text queries with them)."""
    from wherein.indexer.scale import shards as S

    space = json.loads((standin_models / "STANDIN.json").read_text())["space"]
    out = tmp_path_factory.mktemp("ondisk") / "emb"
    rng = np.random.default_rng(3)
    centres = rng.normal(size=(30, DIM)).astype(np.float32)
    vecs = centres[rng.integers(0, 30, N)] + 0.3 * rng.normal(size=(N, DIM)).astype(np.float32)
    plan = S.Plan(out, 500, N, "standin:synthetic", space, DIM, ["syn"])
    S.write_vectors(plan, vecs, [f"/synthetic/{j}.jpg" for j in range(1, N + 1)])
    return out


@pytest.fixture
def built(embedded, standin_models, monkeypatch, tmp_path) -> tuple[Path, dict]:
    """(an on-disk index built in this test's folder, what it finds there).

    Built per test: a copy of a shared one would name the shared folder's .ivfdata, which
    still exists, and hide exactly the bug under test."""
    from wherein.indexer.scale.build_index import build_index

    monkeypatch.setenv("WHEREIN_MODELS", str(standin_models))
    index = tmp_path / "place" / "idx"
    stats = build_index([embedded], index, memory_budget=BUDGET)
    assert stats.kind == "ivf-sq8-ondisk"
    assert [p.name for p in index.glob("*.ivfdata")] == ["vectors.ivfdata"]
    return index, _search(index)


def _invoke(*args: str):
    from wherein.search.cli import cli

    return CliRunner().invoke(cli, [*args, "--json"])


def _search(index: Path) -> dict:
    """Top 10 of a few queries: paths and scores, as `wherein search` prints them."""
    found = {}
    for query in ("red", "a dog", "blue sky"):
        res = _invoke("search", query, "--index", str(index), "-k", "10")
        assert res.exit_code == 0, res.output
        out = json.loads(res.stdout)  # warnings go to stderr
        hits = out["hits"] if isinstance(out, dict) else out
        found[query] = [(h["path"], round(h["score"], 5)) for h in hits]
    assert all(len(v) == 10 for v in found.values())
    return found


def _check(index: Path) -> None:
    res = _invoke("status", "--check", "--index", str(index))
    assert res.exit_code == 0, res.output
    info = json.loads(res.stdout)
    assert info["check"]["ok"], info["check"]
    assert info["vector_index"]["kind"] == "ivf-sq8-ondisk" and info["images"] == N
    ivfdata = [n for n in info["disk_bytes"] if n.endswith(".ivfdata")]  # counted in the total
    assert ivfdata and info["disk_bytes"][ivfdata[0]] == (index / ivfdata[0]).stat().st_size


def test_vectors_faiss_names_its_ivfdata_without_a_folder(built):
    index, _ = built
    # The folder of the build is nowhere in the file: nothing to go stale when it moves.
    assert str(index).encode() not in (index / "vectors.faiss").read_bytes()


def test_moved_index_searches_the_same(built, tmp_path):
    index, before = built
    elsewhere = tmp_path / "other-disk" / "idx"
    elsewhere.parent.mkdir()
    shutil.move(index, elsewhere)
    index.parent.rename(tmp_path / "gone")  # nothing left to read at the old path
    assert _search(elsewhere) == before
    _check(elsewhere)


def test_copy_reads_its_own_ivfdata(built, tmp_path):
    index, before = built
    copy = tmp_path / "copy"
    shutil.copytree(index, copy)
    data = index / "vectors.ivfdata"
    # Same size, other contents: ids and codes the copy would find if it read this file.
    data.write_bytes(np.random.default_rng(0).bytes(data.stat().st_size))
    assert _search(copy) == before
    _check(copy)
    data.unlink()
    assert _search(copy) == before


def test_missing_ivfdata_is_a_one_line_error(built, tmp_path):
    index, _ = built
    copy = tmp_path / "idx"
    shutil.copytree(index, copy)
    (copy / "vectors.ivfdata").unlink()
    for args in (("search", "red"), ("status", "--check")):
        res = _invoke(*args, "--index", str(copy))
        assert res.exit_code == 1, res.output
        line = res.output.strip()
        assert "\n" not in line and "Traceback" not in line
        assert f"{copy / 'vectors.ivfdata'}: missing" in line, line
    # Nothing was rebuilt or removed meanwhile: copying the file back is enough.
    shutil.copy(index / "vectors.ivfdata", copy / "vectors.ivfdata")
    _check(copy)


def test_truncated_ivfdata_is_an_error_not_a_crash(built, tmp_path):
    index, _ = built
    copy = tmp_path / "idx"
    shutil.copytree(index, copy)
    data = copy / "vectors.ivfdata"
    data.write_bytes(data.read_bytes()[:1000])  # an interrupted copy
    res = _invoke("search", "red", "--index", str(copy))
    assert res.exit_code == 1, res.output
    assert f"{data}: 1000 bytes" in res.output and "incomplete copy" in res.output


def _overwrite(path: Path, start: int, end: int) -> None:
    data = bytearray(path.read_bytes())
    data[start:end] = np.random.default_rng(1).bytes(end - start)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "damage",
    ["ivfdata", "centroids", "list-table"],
)
def test_damaged_vectors_are_searched_from_the_catalog_and_repaired(built, damage):
    """Overwritten bytes FAISS reads without complaint: random ids and codes in the .ivfdata,
    random centroids, or a list table pointing outside the .ivfdata (a crash if mapped).
    Search answers as before (and says why); `status --check` names the damage and
    `status --repair` rebuilds the file."""
    index, before = built
    faiss_file = index / "vectors.faiss"
    size = faiss_file.stat().st_size
    if damage == "ivfdata":
        data = index / "vectors.ivfdata"
        _overwrite(data, 0, data.stat().st_size)
    elif damage == "centroids":  # the quantizer is most of vectors.faiss (64 x 768 floats)
        _overwrite(faiss_file, size // 8, size // 2)
    else:  # the lists' sizes and offsets sit at the end, before the .ivfdata's name
        _overwrite(faiss_file, size - 1200, size - 100)
    damaged = faiss_file.read_bytes()
    res = _invoke("search", "red", "--index", str(index), "-k", "10")
    assert res.exit_code == 0, res.output
    assert "is damaged" in res.stderr and "wherein status --repair" in res.stderr
    assert _search(index) == before
    assert faiss_file.read_bytes() == damaged  # searching never writes
    res = _invoke("status", "--check", "--index", str(index))
    assert res.exit_code == 1, res.output
    problems = json.loads(res.stdout)["check"]["problems"]
    assert len(problems) == 1 and "is damaged" in problems[0], problems
    assert faiss_file.read_bytes() == damaged  # checking never writes
    res = _invoke("status", "--repair", "--index", str(index))
    assert res.exit_code == 0, res.output
    check = json.loads(res.stdout)["check"]
    assert check["ok"] and "is damaged" in check["repaired"][0], check
    res = _invoke("status", "--check", "--index", str(index))
    clean = {"ok": True, "problems": [], "repaired": [], "to_repair": []}
    assert json.loads(res.stdout)["check"] == clean
    assert not list(index.glob("*.ivfdata"))  # rebuilt in memory: nothing points at it now
    res = _invoke("search", "red", "--index", str(index), "-k", "10")
    assert "damaged" not in res.stderr
    assert _search(index) == before


def test_read_only_check_names_the_repair(built, monkeypatch):
    """A check that cannot write (another process holds the lock) reports the damage and the
    one command that repairs it."""
    from wherein.indexer.store.index_store import IndexStore

    index, _ = built
    data = index / "vectors.ivfdata"
    _overwrite(data, 0, data.stat().st_size)
    with IndexStore.open(index, write=True, load_vectors=False):
        res = _invoke("status", "--check", "--index", str(index))
    assert res.exit_code == 1, res.output
    problems = json.loads(res.stdout)["check"]["problems"]
    assert len(problems) == 1 and "is damaged" in problems[0], problems
    assert f"`wherein status --repair --index {index}`" in problems[0]


def test_overwritten_vectors_of_a_flat_index_fail_the_checksum_and_are_rebuilt(
    embedded, standin_models, monkeypatch, tmp_path
):
    """4,000 bytes overwritten in the middle of a flat vectors.faiss (the vectors of a couple
    of files: a sample of ids and vectors misses them). vectors.json's checksum catches it:
    search warns and answers from vectors rebuilt from vectors.f16, `status --check` fails,
    `status --repair` writes the file again."""
    from wherein.indexer.scale.build_index import build_index
    from wherein.indexer.store.vectors import VectorIndex

    monkeypatch.setenv("WHEREIN_MODELS", str(standin_models))
    index = tmp_path / "idx"
    assert build_index([embedded], index).kind == "flat"
    assert (index / "vectors.f16").is_file()
    before = _search(index)
    faiss_file = index / "vectors.faiss"
    _overwrite(faiss_file, 800_000, 804_000)
    damaged = faiss_file.read_bytes()

    res = _invoke("search", "red", "--index", str(index), "-k", "10")
    assert res.exit_code == 0, res.output
    assert "vectors.faiss is damaged: its checksum" in res.stderr, res.stderr
    assert _search(index) == before
    res = _invoke("status", "--check", "--index", str(index))
    assert res.exit_code == 1, res.output
    problems = json.loads(res.stdout)["check"]["problems"]
    assert len(problems) == 1 and "checksum" in problems[0], problems
    assert faiss_file.read_bytes() == damaged  # searching and checking never write

    res = _invoke("status", "--repair", "--index", str(index))
    assert res.exit_code == 0 and json.loads(res.stdout)["check"]["ok"], res.output
    res = _invoke("status", "--check", "--index", str(index))
    assert json.loads(res.stdout)["check"]["ok"], res.output
    repaired = VectorIndex(index)
    assert repaired.load() and repaired.ntotal == N
    assert "damaged" not in _invoke("search", "red", "--index", str(index)).stderr
    assert _search(index) == before
