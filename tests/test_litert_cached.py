"""A graph run with its XNNPACK weights cached on disk: same outputs, one cache per graph version."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter

from wherein.indexer.models import litert_cached
from wherein.indexer.models.litert_cached import CACHE_SUFFIX, open_cached


@pytest.fixture()
def graph(standin_models, tmp_path) -> Path:
    """A private copy of a stand-in graph: its caches land beside it, not in the shared models."""
    src = next((standin_models / "siglip2-image").glob("*.tflite"))
    return Path(shutil.copy(src, tmp_path / src.name))


def _interpreter_output(graph: Path, x: np.ndarray) -> np.ndarray:
    runner = Interpreter(model_path=str(graph), num_threads=2).get_signature_runner()
    ((name, _),) = runner.get_input_details().items()
    return next(iter(runner(**{name: x}).values()))


def _caches(folder: Path) -> list[Path]:
    return sorted(folder.glob(f"*{CACHE_SUFFIX}"))


def test_outputs_equal_the_interpreter_and_the_cache_is_reused(graph):
    first = open_cached(graph, 2, "digest")
    assert first is not None
    (cache,) = _caches(graph.parent)
    written = cache.stat()
    x = np.random.default_rng(0).standard_normal(first.in_shape).astype(np.float32)
    want = _interpreter_output(graph, x)
    assert np.array_equal(first.run(x), want)
    assert np.array_equal(first.run(x), want)  # later runs skip the log filter
    again = open_cached(graph, 2, "digest")
    assert again is not None and np.array_equal(again.run(x), want)
    assert _caches(graph.parent) == [cache]
    assert (cache.stat().st_ino, cache.stat().st_mtime_ns) == (written.st_ino, written.st_mtime_ns)
    assert not list(graph.parent.glob(".*.tmp"))


def test_a_new_graph_version_gets_a_new_cache_and_the_old_one_goes(graph):
    assert open_cached(graph, 2, "v1") is not None
    (old,) = _caches(graph.parent)
    st = graph.stat()
    os.utime(graph, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert open_cached(graph, 2, "v1") is not None
    (new,) = _caches(graph.parent)
    assert new != old
    assert open_cached(graph, 2, "v2") is not None  # another manifest digest: another cache
    assert _caches(graph.parent) not in ([old], [new])


def test_a_read_only_models_folder_caches_elsewhere(graph, tmp_path, monkeypatch):
    elsewhere = tmp_path / "user-cache" / "g.xnnpack-cache"
    unwritable = graph / "beside"  # below a file: cannot be created
    monkeypatch.setattr(litert_cached, "cache_locations", lambda g, f="": [unwritable, elsewhere])
    g = open_cached(graph, 2)
    assert g is not None and elsewhere.is_file()
    x = np.ones(g.in_shape, np.float32)
    assert np.array_equal(g.run(x), _interpreter_output(graph, x))


def test_no_usable_runtime_means_none(graph, monkeypatch):
    def broken(*a, **k):
        raise AttributeError("private wrapper changed")

    monkeypatch.setattr(litert_cached.CachedGraph, "__init__", broken)
    elsewhere = graph.parent / "user-cache"
    beside = litert_cached.cache_locations(graph)[0]
    monkeypatch.setattr(litert_cached, "cache_locations", lambda g, f="": [beside, elsewhere / "c"])
    assert open_cached(graph, 2) is None
    assert not _caches(graph.parent)
    assert not elsewhere.exists()  # a runtime fault is not a folder's: nothing tried elsewhere


def test_the_runtime_chatter_stays_off_stderr(graph):
    code = (
        "import sys, numpy as np\n"
        "from pathlib import Path\n"
        "from wherein.indexer.models.litert_cached import open_cached\n"
        f"g = open_cached(Path({str(graph)!r}), 2)\n"
        "assert g is not None\n"
        "g.run(np.zeros(g.in_shape, np.float32))\n"
        "print('a real warning', file=sys.stderr)\n"
    )
    for _ in range(2):  # writing the cache, then mapping it
        r = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
        )
        assert r.returncode == 0, r.stderr
        assert r.stderr == "a real warning\n"


def test_a_graph_dropped_mid_run_frees_its_runtime_quietly(graph):
    """The self-test drops its towers long before exit (`models optimize`, `check --self-test`):
    their teardown lines must not reach stderr either."""
    code = (
        "import gc, sys, numpy as np\n"
        "from pathlib import Path\n"
        "from wherein.indexer.models.litert_cached import open_cached\n"
        f"g = open_cached(Path({str(graph)!r}), 2)\n"
        "g.run(np.zeros(g.in_shape, np.float32))\n"
        "del g\n"
        "gc.collect()\n"
        "print('after', file=sys.stderr, flush=True)\n"
        "import os; os._exit(0)\n"  # skip the atexit filter: only the drop is under test
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stderr == "after\n"
