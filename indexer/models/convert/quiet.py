"""Silence the converters' own chatter while keeping their errors.

litert-torch prints a progress tree (rich, to stdout), torch export logs warnings, and
the MLIR/flatbuffer code logs from C++ straight to file descriptor 2, so Python-level
settings alone cannot hide it. Inside `quiet()` both descriptors go to a temporary file;
if the block raises, that file is replayed to stderr so the converter's own diagnosis
is not lost.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

_ENV = {
    "LITERT_TORCH_SHOW_PROGRESS": "n",  # the [START]/[ DONE] tree
    "TF_CPP_MIN_LOG_LEVEL": "3",
}
_LOGGERS = ("torch", "litert_torch", "ai_edge_quantizer", "absl", "tensorflow", "jax")


@contextmanager
def _env(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextmanager
def _loggers_at_error(names: tuple[str, ...]) -> Iterator[None]:
    loggers = [logging.getLogger(n) for n in names]
    saved = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, saved, strict=True):
            lg.setLevel(level)


@contextmanager
def _captured_fds() -> Iterator[None]:
    """fd 1 and 2 into one temp file; replayed to stderr only when the block raises."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield
        except BaseException:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            sink.seek(0)
            os.write(saved[1], sink.read()[-20_000:])
            raise
        finally:
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


@contextmanager
def quiet() -> Iterator[None]:
    """Run a conversion step without its logging; errors still raise (and show the log)."""
    with (
        _env(_ENV),
        _loggers_at_error(_LOGGERS),
        warnings.catch_warnings(),
        _captured_fds(),
    ):
        warnings.simplefilter("ignore")
        yield
