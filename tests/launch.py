"""Command lines for Python children that set up their own signals and limits.

subprocess's ``preexec_fn`` runs Python between fork and exec. Once the test
process holds other threads (Ray's and gRPC's, web servers'), such a child can
crash or hang before it starts: a SIGSEGV with nothing on stderr. So the child
does the same set-up itself, as the first thing it runs, and then runs the
module or script it was given.
"""

from __future__ import annotations

import json
import sys

_PRELUDE = """\
import json, runpy, signal, sys
cfg = json.loads(sys.argv[1])
rest = sys.argv[2:]
if cfg["sigint"]:
    signal.signal(signal.SIGINT, signal.default_int_handler)
if cfg["ignore_sigxfsz"]:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
if cfg["fsize"] is not None:
    import resource
    resource.setrlimit(resource.RLIMIT_FSIZE, (cfg["fsize"], cfg["fsize"]))
if rest[0] == "-m":
    sys.argv = [rest[1], *rest[2:]]
    runpy.run_module(rest[1], run_name="__main__", alter_sys=True)
else:
    assert rest[0] == "-c", rest
    sys.argv = ["-c", *rest[2:]]
    exec(compile(rest[1], "<string>", "exec"), {"__name__": "__main__"})
"""


def python_argv(
    *args: str,
    sigint: bool = False,
    ignore_sigxfsz: bool = False,
    fsize: int | None = None,
) -> list[str]:
    """argv for `python ARGS` (ARGS starting with -m or -c) with the child's own set-up.

    sigint: Ctrl-C raises KeyboardInterrupt in the child even when this process
    ignores SIGINT (a background job inherits it ignored; Python then keeps it so).
    ignore_sigxfsz: a write past the file-size limit fails with EFBIG instead of killing.
    fsize: RLIMIT_FSIZE in bytes.
    """
    if not args or args[0] not in ("-m", "-c"):
        raise ValueError("python_argv takes -m MODULE ... or -c SCRIPT ...")
    cfg = {"sigint": sigint, "ignore_sigxfsz": ignore_sigxfsz, "fsize": fsize}
    return [sys.executable, "-c", _PRELUDE, json.dumps(cfg), *args]
