"""Keep Ray's console output to what a wherein user can act on; everything still reaches Ray's logs.

Silenced, each for a reason:
- the notice that token authentication is on, printed when ray.init starts the private
  local cluster (wherein's default): the cluster lives and dies with the command;
- Ray Data's "Progress bars disabled" warning and its INFO lines (execution finished,
  stats): wherein draws its own progress bar; they stay in the session's ray-data.log;
- one ERROR line from the driver's C++ core worker: Ray Data creates every actor pool
  with ``max_restarts=-1`` and its UDF in the object store, and Ray warns that a
  restarted actor could lose those arguments. The driver owns them for the whole run,
  so they cannot be lost while it lives. Ray has no switch for that one line
  (``RAY_BACKEND_LOG_LEVEL`` would silence every driver-side error), so stderr is
  passed through a filter that drops exactly it while the dataset runs.

Warnings and errors otherwise pass unchanged (Ray Data's "cannot schedule" warnings
matter: they are how a user learns the pool does not fit the cluster).
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress

# One line as Ray's C++ logger writes it: "[2026-12-01 11:18:55,261 E 13797 13797] core_worker.cc:2465: ..."
RESTART_NOTICE = re.compile(
    rb"\[[^\]\n]{0,80} E \d+ \d+\] core_worker\.cc:\d+: Actor with class name: [^\n]*"
    rb"has constructor arguments in the object store and max_restarts > 0[^\n]*\n"
)


def quiet_loggers() -> None:
    """Call after `import ray.data` (which installs Ray Data's handlers)."""
    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(
        logging.ERROR
    )
    logging.getLogger("ray.data._internal.progress").setLevel(logging.ERROR)
    if "RAY_DATA_LOGGING_CONFIG" in os.environ:
        return  # the user configured Ray Data's logging: theirs to decide
    for handler in logging.getLogger("ray.data").handlers:
        if handler.get_name() == "console":
            handler.setLevel(logging.WARNING)


@contextmanager
def stderr_without(pattern: re.Pattern[bytes] = RESTART_NOTICE) -> Iterator[None]:
    """File descriptor 2 through a pipe whose reader drops the matches of ``pattern``.

    A native log line is one write() shorter than PIPE_BUF, hence atomic: it arrives
    whole in one read, which is what lets a per-chunk substitution find it.
    Processes started inside the block would inherit the pipe, so start none.
    """
    with suppress(AttributeError, ValueError, OSError):
        sys.stderr.flush()
    saved = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)

    def pump() -> None:
        with os.fdopen(read_end, "rb", buffering=0) as src:
            while chunk := src.read(1 << 16):
                out = memoryview(pattern.sub(b"", chunk))
                while out:
                    try:
                        out = out[os.write(saved, out) :]
                    except OSError:
                        out = out[:0]  # the terminal went away: nothing to tell anyone

    thread = threading.Thread(target=pump, name="stderr-filter", daemon=True)
    thread.start()
    try:
        yield
    finally:
        with suppress(AttributeError, ValueError, OSError):
            sys.stderr.flush()
        os.dup2(saved, 2)  # the pipe's last writer closes: the reader drains it and ends
        thread.join(timeout=5)
        if not thread.is_alive():
            os.close(saved)
