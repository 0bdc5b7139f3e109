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
import uuid
import weakref
from pathlib import Path

import numpy as np

from wherein.indexer.models.litert_graph import native_stderr_filtered

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
    """run(x) -> the graph's one output for its one input, on XNNPACK with cached weights."""

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
        ((self.in_name, i_detail),) = self._model.GetInputTensorDetails(key).items()
        ((self.out_name, o_detail),) = self._model.GetOutputTensorDetails(key).items()
        self.in_shape = tuple(int(d) for d in i_detail["shape"])
        self.in_dtype = np.dtype(i_detail["dtype"])
        self.out_shape = tuple(int(d) for d in o_detail["shape"])
        self._out_dtype = np.dtype(o_detail["dtype"])
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
        """Not thread-safe: one buffer pair per graph (callers hold a lock)."""
        if self._started:
            return self._run(x)
        with native_logs_filtered():  # the first run still logs the accelerator registry
            out = self._run(x)
        self._started = True
        _arm_teardown_filter()
        return out

    def _run(self, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=self.in_dtype).reshape(-1)
        self._tb.WriteTensorBuffer(self._ins[0], x, self.in_dtype.name)
        self._model.RunByIndex(self._index, self._ins, self._outs)
        out = np.empty(int(np.prod(self.out_shape)), self._out_dtype)
        self._tb.ReadTensorToBuffer(self._outs[0], out, self._out_dtype.name)
        return out.reshape(self.out_shape)


def open_cached(graph: Path, num_threads: int, fingerprint: str = "") -> CachedGraph | None:
    """The graph with its weight cache (written on first use), or None: use the Interpreter."""
    for cache in cache_locations(graph, fingerprint):
        if not cache.is_file() and not _writable(cache.parent):
            continue  # a read-only models folder: the user cache
        try:
            return CachedGraph(graph, cache, num_threads)
        except Exception:  # noqa: BLE001 - private API, or no space: the Interpreter is exact
            return None
    return None
