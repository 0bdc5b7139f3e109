"""A server's graphs let its other requests run while they run, and hold their weights once."""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from slow_graph import write_slow_graph

from wherein.indexer.models import litert_graph
from wherein.indexer.models.clip_bpe import CLIP_BPE_FILE, open_clip_bpe_file
from wherein.indexer.models.litert_cached import SharedGraph
from wherein.indexer.models.litert_graph import LiteRTGraph
from wherein.indexer.models.text_tower_litert import LiteRTTextTower


def _longest_stall(work: Callable[[], object]) -> tuple[float, float]:
    """(the longest this thread went without running Python while work ran on another
    thread, how long work took). A run that holds the GIL stalls this thread throughout."""
    done = threading.Event()
    took: list[float] = []

    def run() -> None:
        t = time.perf_counter()
        work()
        took.append(time.perf_counter() - t)
        done.set()

    worker = threading.Thread(target=run)
    last = time.perf_counter()
    longest = 0.0
    worker.start()
    while not done.is_set():
        now = time.perf_counter()
        longest = max(longest, now - last)
        last = now
    worker.join()
    return longest, took[0]


@pytest.fixture()
def slow(tmp_path) -> Path:
    return write_slow_graph(tmp_path / "slow.tflite", 64, 768)


def test_a_servers_graph_lets_other_threads_run_python_while_it_runs(slow):
    litert_graph.run_concurrently()
    graph = SharedGraph(LiteRTGraph(slow, 1))
    x = np.ones((1, 64), np.float32)
    graph.run(x)  # the first run packs the weights
    stall, took = _longest_stall(lambda: graph.run(x))
    assert stall < took / 2, (stall, took)


def test_a_servers_text_tower_lets_other_threads_run_python_while_it_encodes(
    standin_models, tmp_path
):
    folder = Path(shutil.copytree(standin_models / "siglip2-text", tmp_path / "text"))
    write_slow_graph(folder / "text_tower.tflite", 64, 768, int_input=True)
    shutil.copy(open_clip_bpe_file(), folder / CLIP_BPE_FILE)
    tokenizer = {"kind": "clip-bpe", "file": CLIP_BPE_FILE, "clean": "lower"}
    tokenizer |= {"context_length": 64, "pad_id": 0, "prefix": [49406], "suffix": [49407]}
    manifest = {"file": "text_tower.tflite", "tokenizer": tokenizer}
    (folder / "manifest.json").write_text(
        json.dumps(manifest | {"logit_scale": 10.0, "logit_bias": -5.0})
    )
    litert_graph.run_concurrently()
    tower = LiteRTTextTower(folder, "test")
    tower.encode(["a red square"])
    stall, took = _longest_stall(lambda: tower.encode(["a blue disc"]))
    assert stall < took / 2, (stall, took)
    assert _resident_bytes_of(folder / "text_tower.tflite") < 2**20  # packed: float copy let go


def test_a_servers_graph_answers_as_a_one_shot_commands_does(slow):
    x = np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)
    (one_shot,) = SharedGraph(LiteRTGraph(slow, 1)).run(x)
    litert_graph.run_concurrently()
    (served,) = SharedGraph(LiteRTGraph(slow, 1)).run(x)
    np.testing.assert_array_equal(served, one_shot)


def _resident_bytes_of(path: Path) -> int:
    """Resident bytes of this process's mappings of path (/proc/self/smaps)."""
    target, total, inside = str(path.resolve()), 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()
            if head and "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
                inside = len(head) == 6 and head[5] == target
            elif inside and head and head[0] == "Rss:":
                total += int(head[1]) * 1024
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").is_file(), reason="Linux: reads smaps")
def test_a_graphs_float_weights_are_not_kept_resident_once_packed(slow):
    """The Interpreter keeps the .tflite mapped after XNNPACK copied its weights into its
    own layout; the float copy would be held twice over (the slow graph: 25 MB)."""
    graph = LiteRTGraph(slow, 1)
    graph.run(np.ones((1, 64), np.float32))
    assert slow.stat().st_size > 20 * 2**20
    assert _resident_bytes_of(slow) < 2**20
