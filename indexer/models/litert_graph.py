"""Run a LiteRT graph by signature slot (args_N -> output_N), checked against its spec.

Graphs converted by litert-torch name their signature inputs ``args_0..`` and
outputs ``output_0..``. Several inputs can share one shape (CLIPSeg's t3/t6/t9),
so tensors are bound by slot number, never by shape. A graph whose signature
uses other names falls back to tensor index order.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import sys
import tempfile
import threading
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from wherein.schemas.errors import ModelError
from wherein.schemas.models import GraphSpec, TensorSpec

_SLOT = re.compile(r"^(?:args|output)_(\d+)$")


# Written by LiteRT's native code straight to fd 2 when it first makes its default
# XNNPACK delegate (once per process); no environment variable or Python setting
# turns it off (TF_CPP_MIN_LOG_LEVEL does not reach it).
_NATIVE_NOTICES = (b"INFO: Created TensorFlow Lite XNNPACK delegate for CPU.",)
_notice_lock = threading.Lock()
_notice_pending = True

# Whether this process answers many requests at once (``wherein serve``): see
# run_concurrently().
_concurrent = False


def run_concurrently(on: bool = True) -> None:
    """Open graphs from now on where other threads run Python while a graph runs.

    The classic Interpreter lets go of the GIL for a run; the Python binding of LiteRT's
    CompiledModel (litert_cached: packed weights mapped from a cache, no repacking per
    start) holds it for the whole run. In a one-shot command that costs nothing; in a
    server every request waited for every run: a full-size text tower holds it 0.13-0.2 s
    per new query, a CLIPSeg vision pass ~1 s (AVX2 EPYC). A server pays the repacking
    once per start instead (0.7-0.9 s for the text tower there).
    """
    global _concurrent
    _concurrent = on


def runs_concurrently() -> bool:
    return _concurrent


_MADV_DONTNEED = 4  # <sys/mman.h> on Linux


def drop_mapped_pages(path: str | Path) -> int:
    """Unmap the resident pages of every read-only mapping of path in this process; the
    bytes of those mappings now in resident memory. They fault back in from the page cache
    if read again.

    Called once XNNPACK has packed a graph's weights into its own memory: the Interpreter
    keeps the .tflite mapped, and the float weights read while packing stay resident
    beside their packed copy (the full-size text tower: 694 MB resident, 367 MB after
    this). Linux only; elsewhere, or when madvise fails, nothing changes.
    """
    if not sys.platform.startswith("linux"):
        return 0
    target = os.path.realpath(path)
    spans: list[tuple[int, int]] = []
    with contextlib.suppress(OSError), open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].rstrip("\n") == target and "w" not in fields[1]:
                start, end = (int(v, 16) for v in fields[0].split("-"))
                spans.append((start, end - start))
    if not spans:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    dropped = 0
    for start, size in spans:
        if libc.madvise(start, size, _MADV_DONTNEED) == 0:
            dropped += size
    return dropped


@contextlib.contextmanager
def native_stderr_filtered(drop: Callable[[bytes], bool]) -> Iterator[list[bytes]]:
    """Hold fd 2 in a temp file while native code runs, then pass on the lines drop() spares.

    Yields the list that receives the dropped lines. Real warnings and errors written
    meanwhile still reach stderr, only later.
    """
    dropped: list[bytes] = []
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no usable fd 2: nothing to filter
        yield dropped
        return
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield dropped
        finally:
            try:
                sys.stderr.flush()
            finally:
                os.dup2(saved, 2)
                os.close(saved)
            held.seek(0)
            kept: list[bytes] = []
            for ln in held.read().splitlines(keepends=True):
                (dropped if drop(ln) else kept).append(ln)
            view = memoryview(b"".join(kept))
            while view:
                view = view[os.write(2, view) :]


@contextlib.contextmanager
def _native_notice_filtered() -> Iterator[None]:
    """Drop LiteRT's delegate notice. Once it has been seen it cannot come again, and
    later calls redirect nothing."""
    global _notice_pending
    if not _notice_pending:
        yield
        return
    with _notice_lock:
        with native_stderr_filtered(lambda ln: ln.rstrip(b"\r\n") in _NATIVE_NOTICES) as seen:
            yield
        if seen:
            _notice_pending = False


def default_threads() -> int:
    return max(1, os.cpu_count() or 1)


def _slot_order(names: list[str]) -> list[str]:
    """Names in slot order: args_0, args_1, ... (numeric, not lexical: args_10 > args_2)."""
    if names and all(_SLOT.match(n) for n in names):
        return sorted(names, key=lambda n: int(_SLOT.match(n).group(1)))  # type: ignore[union-attr]
    return list(names)


@dataclass(frozen=True)
class Signature:
    key: str
    inputs: list[str]  # slot order
    outputs: list[str]  # slot order
    input_shapes: list[tuple[int, ...]]
    output_shapes: list[tuple[int, ...]]

    @property
    def batch(self) -> int:
        return self.input_shapes[0][0] if self.input_shapes and self.input_shapes[0] else 1


class LiteRTGraph:
    """One .tflite file; one interpreter per thread (interpreters are not thread-safe).

    shared=True: one interpreter for every thread, its runs serialised by the caller
    (litert_cached.SharedGraph holds a lock): one copy of the packed weights, not one
    per thread."""

    def __init__(
        self, path: str | Path, num_threads: int | None = None, *, shared: bool = False
    ) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise ModelError(f"{self.path}: model file not found")
        self.num_threads = num_threads or default_threads()
        # shared: a namespace, one slot for every thread (the caller serialises the runs)
        self._local: Any = types.SimpleNamespace() if shared else threading.local()
        # Fail fast on a corrupt file; allocating (where XNNPACK packs every weight, ~0.3 s
        # for a ViT-B) waits for the first run: a graph loaded but not needed costs nothing.
        interp = self._interpreter(allocate=False)
        self.signatures = self._read_signatures(interp)
        if not self.signatures:
            raise ModelError(f"{self.path}: graph has no signature")

    def _interpreter(self, allocate: bool = True):
        """This thread's interpreter; allocated (delegate applied) unless allocate=False."""
        interp = getattr(self._local, "interp", None)
        if interp is None:
            from ai_edge_litert.interpreter import Interpreter

            try:
                with _native_notice_filtered():
                    interp = Interpreter(model_path=str(self.path), num_threads=self.num_threads)
            except (ValueError, RuntimeError) as exc:
                raise ModelError(f"{self.path}: not a loadable LiteRT model ({exc})") from exc
            self._local.interp = interp
            self._local.runners = {}
            self._local.allocated = False
        if allocate and not self._local.allocated:
            with _native_notice_filtered():
                _allocate(interp)
            self._local.allocated = True
            # Weights packed: their float copy is read again only by ops XNNPACK does not run.
            drop_mapped_pages(self.path)
        return interp

    def _read_signatures(self, interp) -> dict[str, Signature]:
        sigs: dict[str, Signature] = {}
        for key, io in interp.get_signature_list().items():
            runner = interp.get_signature_runner(key)
            in_details = runner.get_input_details()
            out_details = runner.get_output_details()
            inputs = _slot_order(list(io["inputs"]))
            outputs = _slot_order(list(io["outputs"]))
            if not all(_SLOT.match(n) for n in inputs + outputs):
                # Unknown naming: fall back to the interpreter's tensor index order.
                inputs = sorted(inputs, key=lambda n: in_details[n]["index"])
                outputs = sorted(outputs, key=lambda n: out_details[n]["index"])
            sigs[key] = Signature(
                key=key,
                inputs=inputs,
                outputs=outputs,
                input_shapes=[tuple(int(d) for d in in_details[n]["shape"]) for n in inputs],
                output_shapes=[tuple(int(d) for d in out_details[n]["shape"]) for n in outputs],
            )
        return sigs

    def check(self, spec: GraphSpec) -> None:
        """Raise ModelError unless some signature matches the spec's I/O exactly."""
        want_in = [t.shape for t in spec.inputs]
        want_out = [t.shape for t in spec.outputs]
        for sig in self.signatures.values():
            if sig.input_shapes == want_in and sig.output_shapes == want_out:
                return
        got = "; ".join(
            f"{s.key}: {_fmt(s.input_shapes)} -> {_fmt(s.output_shapes)}"
            for s in self.signatures.values()
        )
        raise ModelError(
            f"{self.path.name}: expected {_fmt_specs(spec.inputs)} -> {_fmt_specs(spec.outputs)}, got {got}"
        )

    def signature_for_batch(self, batch: int) -> Signature | None:
        for sig in self.signatures.values():
            if sig.batch == batch:
                return sig
        return None

    @property
    def batch_sizes(self) -> list[int]:
        return sorted({s.batch for s in self.signatures.values()})

    def run(self, *inputs: np.ndarray, signature: str | None = None) -> list[np.ndarray]:
        """Run one signature with inputs in slot order; return outputs in slot order."""
        sig = self.signatures[signature] if signature else next(iter(self.signatures.values()))
        if len(inputs) != len(sig.inputs):
            raise ValueError(f"{self.path.name}: {sig.key} takes {len(sig.inputs)} inputs")
        self._interpreter()
        runners = self._local.runners
        runner = runners.get(sig.key)
        if runner is None:
            runner = runners[sig.key] = self._local.interp.get_signature_runner(sig.key)
        feeds = {
            name: np.ascontiguousarray(x, dtype=np.float32) for name, x in zip(sig.inputs, inputs)
        }
        out = runner(**feeds)
        return [out[name] for name in sig.outputs]

    def run_batched(self, x: np.ndarray, signature: str, tail: str | None = None) -> np.ndarray:
        """One-input, one-output signature over x[n, ...] in chunks of its batch size.

        Rows are independent, so chunking never changes a row's result beyond float
        noise. The last chunk, when shorter than the batch, runs row by row through
        the ``tail`` signature (batch 1) if given, else zero-padded to a full batch
        (the padding rows are dropped).
        """
        sig = self.signatures[signature]
        if len(sig.inputs) != 1 or len(sig.outputs) != 1:
            raise ValueError(f"{self.path.name}: {sig.key} is not one input -> one output")
        b = sig.batch
        n = len(x)
        full = n - n % b
        out = [self.run(x[i : i + b], signature=sig.key)[0] for i in range(0, full, b)]
        rest = x[full:]
        if len(rest) and tail is not None:
            out += [self.run(rest[j : j + 1], signature=tail)[0] for j in range(len(rest))]
        elif len(rest):
            pad = np.zeros((b - len(rest), *rest.shape[1:]), rest.dtype)
            out.append(self.run(np.concatenate([rest, pad]), signature=sig.key)[0][: len(rest)])
        if not out:
            return np.zeros((0, *sig.output_shapes[0][1:]), np.float32)
        return np.concatenate(out)


def _allocate(interp) -> None:
    """Allocate now, so LiteRT applies its default delegate (and prints its notice) here.

    A graph that cannot allocate yet (dynamic shapes) is left to its signature runner.
    """
    with contextlib.suppress(ValueError, RuntimeError):
        interp.allocate_tensors()


def _fmt(shapes: list[tuple[int, ...]]) -> str:
    return ", ".join(str(list(s)) for s in shapes)


def _fmt_specs(specs: tuple[TensorSpec, ...]) -> str:
    return ", ".join(str(list(t.shape)) for t in specs)
