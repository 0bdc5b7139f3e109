"""A one-signature LiteRT graph whose XNNPACK-packed weights are cached on disk.

XNNPACK repacks every float weight into its own layout when a graph is prepared:
for the full-size SigLIP 2 text tower that is ~340 MB written on every process start
(0.4-0.7 s of a cold search). LiteRT's CompiledModel can keep the packed weights in
a file (``xnnpack_weight_cache_path``) and memory-map them on later starts; the
classic ``Interpreter`` cannot. The kernels are the same XNNPACK ones, so the outputs
equal the Interpreter's (checked in tests).

The public ``ai_edge_litert.compiled_model`` module imports ml_dtypes (~2 s here)
for dtypes these graphs do not use, so the native wrappers are called directly. They
are private: any failure to import, create or run them is the caller's cue to use
the Interpreter instead (``open_cached`` returns None).

XNNPACK keys packed weights by their place in the graph, not their bytes, so a
cache must never outlive its graph: the file name carries a digest of the graph's
size, mtime_ns, the manifest's sha256 and the LiteRT version, and caches of earlier
versions beside it are deleted when a new one is written. A new cache is written
under a temporary name and renamed when complete, so a concurrent start never maps
half a file.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import threading
import uuid
import weakref
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from wherein.indexer.models.litert_graph import (
    LiteRTGraph,
    default_threads,
    native_stderr_filtered,
    runs_concurrently,
)

if TYPE_CHECKING:
    from wherein.schemas.models import GraphSpec

CACHE_SUFFIX = ".xnnpack-cache"
_CPU = 1  # ai_edge_litert.hardware_accelerator.HardwareAccelerator.CPU
# LiteRT's runtime logs (accelerator registry, environment) go straight to fd 2.
_NOISE = (b"INFO: ", b"WARNING: [npu_registry.cc")


def native_logs_filtered() -> contextlib.AbstractContextManager[list[bytes]]:
    """Hold fd 2 while LiteRT's runtime starts up, then pass on all but its INFO chatter."""
    return native_stderr_filtered(lambda ln: ln.startswith(_NOISE))


def cache_name(graph: Path, fingerprint: str = "") -> str:
    """The graph's version and the runtime's: another LiteRT never opens (and rewrites in
    place) a cache that a running process of this one has mapped."""
    import ai_edge_litert

    st = graph.stat()
    runtime = getattr(ai_edge_litert, "__version__", "")
    key = f"{st.st_size}:{st.st_mtime_ns}:{fingerprint}:{runtime}".encode()
    return f"{graph.name}.{hashlib.sha256(key).hexdigest()[:16]}{CACHE_SUFFIX}"


def cache_locations(graph: Path, fingerprint: str = "") -> list[Path]:
    """Beside the graph, else (a read-only models folder) in the user's cache."""
    import platformdirs

    name = cache_name(graph, fingerprint)
    folder = hashlib.sha256(os.fsencode(graph.resolve().parent)).hexdigest()[:16]
    return [
        graph.with_name(name),
        Path(platformdirs.user_cache_dir("wherein")) / "xnnpack" / folder / name,
    ]


def _writable(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(folder, os.W_OK)


def _drop_older(cache: Path, graph: Path) -> None:
    for old in cache.parent.glob(f"{graph.name}.*{CACHE_SUFFIX}"):
        if old != cache:
            with contextlib.suppress(OSError):
                old.unlink()


_open: weakref.WeakSet[CachedGraph] = weakref.WeakSet()
_teardown_armed = False


def _filter_teardown_logs() -> None:
    """atexit: keep LiteRT's teardown chatter off stderr.

    Graphs are closed here, inside the filter. The tensor-buffer wrapper's own runtime
    environment is a native static, freed after Python has finished, where no Python
    filter runs: fd 2 is handed to a ``grep -v`` of those lines for the last moments
    (lines already written are untouched; without grep the chatter is simply shown).
    """
    for graph in list(_open):
        graph.close()
    grep = shutil.which("grep")
    if grep is None:
        return
    try:
        sys.stderr.flush()
        proc = subprocess.Popen(
            [grep, "-v", "-E", "^(INFO: |WARNING: \\[npu_registry)"],
            stdin=subprocess.PIPE,
            stdout=2,
        )
        assert proc.stdin is not None
        os.dup2(proc.stdin.fileno(), 2)
    except (OSError, ValueError):
        pass


def _arm_teardown_filter() -> None:
    global _teardown_armed
    if not _teardown_armed:
        _teardown_armed = True
        atexit.register(_filter_teardown_logs)


class CachedGraph:
    """A graph's signature on XNNPACK with cached weights: run(x) for a graph of one input
    and one output (the text tower), run_named({input: array}) -> {output: array} for any."""

    def __init__(self, graph: Path, cache: Path, num_threads: int) -> None:
        import ai_edge_litert
        from ai_edge_litert import _pywrap_litert_compiled_model_wrapper as cm
        from ai_edge_litert import _pywrap_litert_environment_wrapper as envw
        from ai_edge_litert import _pywrap_litert_tensor_buffer_wrapper as tb

        self._tb = tb
        fresh = not cache.is_file()
        target = cache.with_name(f".{cache.name}.{uuid.uuid4().hex[:8]}.tmp") if fresh else cache
        try:
            with native_logs_filtered():
                self._env = envw.CreateEnvironment(
                    runtime_path=os.path.dirname(ai_edge_litert.__file__),
                    compiler_plugin_path="",
                    dispatch_library_path="",
                )
                self._model = cm.CreateCompiledModelFromFile(
                    self._env,
                    str(graph),
                    hardware_accel=_CPU,
                    cpu_num_threads=num_threads,
                    xnnpack_weight_cache_path=str(target),
                )
            if fresh:
                if not target.is_file() or not target.stat().st_size:
                    raise RuntimeError("XNNPACK wrote no weight cache")
                os.replace(target, cache)  # complete: later starts may map it
                _drop_older(cache, graph)
        finally:
            if fresh:
                with contextlib.suppress(OSError):
                    target.unlink()
        sigs = self._model.GetSignatureList()
        key = "serving_default" if "serving_default" in sigs else next(iter(sigs))
        self._index = self._model.GetSignatureIndex(key)
        # name -> (shape, dtype), in the order of the model's buffers
        self.inputs = {
            str(n): (tuple(int(d) for d in t["shape"]), np.dtype(t["dtype"]))
            for n, t in self._model.GetInputTensorDetails(key).items()
        }
        self.outputs = {
            str(n): (tuple(int(d) for d in t["shape"]), np.dtype(t["dtype"]))
            for n, t in self._model.GetOutputTensorDetails(key).items()
        }
        self.in_name, (self.in_shape, self.in_dtype) = next(iter(self.inputs.items()))
        self.out_name, (self.out_shape, self._out_dtype) = next(iter(self.outputs.items()))
        self._ins = self._model.CreateInputBuffers(self._index)
        self._outs = self._model.CreateOutputBuffers(self._index)
        self._started = False
        _open.add(self)

    def close(self) -> None:
        """Free the native model and environment (their teardown logs too: filtered)."""
        with native_logs_filtered():
            self._ins = self._outs = []
            self._model = self._env = None
        _open.discard(self)

    def __del__(self) -> None:
        # A graph dropped mid-run (the self-test's towers) frees its native runtime here,
        # which logs DestroyAccelerator lines to fd 2: free it inside the filter instead.
        if getattr(self, "_model", None) is not None:
            with contextlib.suppress(Exception):
                self.close()

    def run(self, x: np.ndarray) -> np.ndarray:
        """The one output for the one input. Not thread-safe: one set of buffers per graph
        (callers hold a lock)."""
        if len(self.inputs) != 1 or len(self.outputs) != 1:
            raise ValueError("run() is for a graph of one input and one output: run_named")
        return self.run_named({self.in_name: x})[self.out_name]

    def run_named(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every output by name, for every input by name. Not thread-safe (as run)."""
        if set(feeds) != set(self.inputs):
            raise ValueError(f"inputs {sorted(feeds)}, expected {sorted(self.inputs)}")
        if self._started:
            return self._run(feeds)
        with native_logs_filtered():  # the first run still logs the accelerator registry
            out = self._run(feeds)
        self._started = True
        _arm_teardown_filter()
        return out

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        for buf, (name, (_, dtype)) in zip(self._ins, self.inputs.items(), strict=True):
            x = np.ascontiguousarray(feeds[name], dtype=dtype).reshape(-1)
            self._tb.WriteTensorBuffer(buf, x, dtype.name)
        self._model.RunByIndex(self._index, self._ins, self._outs)
        out = {}
        for buf, (name, (shape, dtype)) in zip(self._outs, self.outputs.items(), strict=True):
            y = np.empty(int(np.prod(shape)), dtype)
            self._tb.ReadTensorToBuffer(buf, y, dtype.name)
            out[name] = y.reshape(shape)
        return out


def open_cached(graph: Path, num_threads: int, fingerprint: str = "") -> CachedGraph | None:
    """The graph with its weight cache (written on first use), or None: use the Interpreter.
    None too where this process runs graphs concurrently (a server): CompiledModel's binding
    holds the GIL through a run, the Interpreter does not (litert_graph.run_concurrently)."""
    if runs_concurrently():
        return None
    for cache in cache_locations(graph, fingerprint):
        if not cache.is_file() and not _writable(cache.parent):
            continue  # a read-only models folder: the user cache
        try:
            return CachedGraph(graph, cache, num_threads)
        except Exception:  # noqa: BLE001 - private API, or no space: the Interpreter is exact
            return None
    return None


class SharedGraph:
    """A one-signature LiteRTGraph run on CompiledModel with its packed weights cached: one
    native model for every thread (its runs serialised by a lock), made on the first run.

    LiteRTGraph keeps an Interpreter per thread, and each packs every weight into anonymous
    memory while the .tflite it read them from stays mapped: a full-size CLIPSeg held 957 MB
    so, 543 MB this way (bench/bench_clipseg_cached.py), with equal outputs (the same
    XNNPACK kernels). Inputs and outputs keep the LiteRTGraph's slot order, bound by name.
    Where the cache cannot be had, or the names differ, the LiteRTGraph runs as before;
    in a process that runs graphs concurrently (a server), one Interpreter for every
    thread (its runs let other threads run Python; its float weights are unmapped once
    packed, so it holds about what the cache does).
    """

    def __init__(self, graph: LiteRTGraph) -> None:
        self.graph = graph
        self.path = graph.path
        self.signatures = graph.signatures
        self._lock = threading.Lock()
        self._cached: CachedGraph | None = None
        self._interpreter = False  # True once the cached way is known not to work
        self._one: LiteRTGraph | None = None  # the Interpreter every thread shares

    def check(self, spec: GraphSpec) -> None:
        self.graph.check(spec)

    def _threads(self) -> int:
        # One model runs one call at a time for every thread, so it gets every core: the
        # graph's own count was planned per thread (the CLI's mask pool: 2 workers x 1
        # thread), and kept, it would run the vision passes on one core.
        return max(self.graph.num_threads, default_threads())

    def _open(self) -> CachedGraph | None:
        if self._cached is None and not self._interpreter:
            sig = next(iter(self.signatures.values()))
            cached = open_cached(self.path, self._threads())
            if (
                cached is None
                or set(cached.inputs) != set(sig.inputs)
                or set(cached.outputs) != set(sig.outputs)
            ):
                self._interpreter = True
            else:
                self._cached = cached
        return self._cached

    def run(self, *inputs: np.ndarray, signature: str | None = None) -> list[np.ndarray]:
        sig = self.signatures[signature] if signature else next(iter(self.signatures.values()))
        if len(inputs) != len(sig.inputs):
            raise ValueError(f"{self.path.name}: {sig.key} takes {len(sig.inputs)} inputs")
        with self._lock:
            cached = self._open()
            if cached is not None:
                feeds = {n: np.asarray(x, dtype=np.float32) for n, x in zip(sig.inputs, inputs)}
                out = cached.run_named(feeds)
                return [out[n] for n in sig.outputs]
            if runs_concurrently():
                # A server: one Interpreter (it lets go of the GIL while it runs) for every
                # thread, so the packed weights are held once, as with the cache.
                if self._one is None:
                    self._one = LiteRTGraph(self.path, self._threads(), shared=True)
                return self._one.run(*inputs, signature=signature)
        return self.graph.run(*inputs, signature=signature)


def shared_weights(graph: LiteRTGraph) -> LiteRTGraph | SharedGraph:
    """graph as a SharedGraph where it has one signature (CLIPSeg's graphs), else as it is."""
    return SharedGraph(graph) if len(graph.signatures) == 1 else graph
