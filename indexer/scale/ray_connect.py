"""Joining a running Ray cluster: the auth token found the way Ray finds it, checked in bounded time.

Ray (2.52+) authenticates every control-plane call with one shared token when the
cluster runs with ``RAY_AUTH_MODE=token`` (the default for new clusters in recent
releases). A driver given an explicit address does *not* turn token mode on by
itself, so it calls the cluster without a token: Ray then retries for ~15 s,
printing a warning a second, and ends in a ConnectionError traceback. A wrong
address is worse: ray.init waits for minutes.

So before ray.init this module (1) opens a TCP connection to the address (seconds),
(2) asks the cluster for its id without a token and, if it wants one, with the token
taken from Ray's own sources, in Ray's order (``RAY_AUTH_TOKEN``, then the file named
by ``RAY_AUTH_TOKEN_PATH``, then ``~/.ray/auth_token``), and (3) turns token mode on
for this process only when the cluster asked for it. A driver in token mode also
demands the token from every worker that calls back into it, which is why a cluster
without auth must not get one. Each probe runs in a child process under a timeout:
Ray's client prints C++ warnings on stderr and can block in native code, and the
child keeps both away from the user.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from wherein.schemas.errors import WhereinError

MODE_ENV = "RAY_AUTH_MODE"
TOKEN_ENV = "RAY_AUTH_TOKEN"
TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"
DEFAULT_TOKEN_FILE = "~/.ray/auth_token"
TCP_TIMEOUT_S = 5.0
PROBE_TIMEOUT_S = 12.0  # TCP check + probe stay under 15 s even when the port is not Ray's
TOKEN_HINT = "the head's token: `ray get-auth-token` on the head prints it"


class RayConnectError(WhereinError):
    """The Ray cluster cannot be reached or refused this driver."""


@dataclass(frozen=True)
class Token:
    value: str = field(repr=False)  # a secret: kept out of reprs and logs
    source: str  # where it came from, for the one line the CLI prints


@dataclass(frozen=True)
class Joined:
    address: str  # host:port, as ray.init should get it
    token: Token | None
    note: str  # one line for stderr: which cluster, which token source


def find_token(environ: dict[str, str] | None = None) -> Token | None:
    """The token Ray itself would use, or None. Ray reads RAY_AUTH_TOKEN if non-empty, else the
    file RAY_AUTH_TOKEN_PATH names (an unreadable or empty one is an error, never skipped),
    else ~/.ray/auth_token."""
    env = os.environ if environ is None else environ
    if env.get(TOKEN_ENV, "").strip():
        return Token(env[TOKEN_ENV].strip(), TOKEN_ENV)
    if env.get(TOKEN_PATH_ENV):
        path = Path(env[TOKEN_PATH_ENV]).expanduser()
        try:
            value = path.read_text().strip()
        except OSError as exc:
            raise RayConnectError(
                f"{TOKEN_PATH_ENV}={path}: cannot read the token file ({exc.strerror})"
            ) from None
        if not value:
            raise RayConnectError(f"{TOKEN_PATH_ENV}={path}: the token file is empty")
        return Token(value, f"{TOKEN_PATH_ENV} ({path})")
    path = Path(env.get("HOME") or Path.home()) / DEFAULT_TOKEN_FILE.removeprefix("~/")
    try:
        value = path.read_text().strip()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise RayConnectError(f"{path}: cannot read the Ray token file ({exc.strerror})") from None
    return Token(value, DEFAULT_TOKEN_FILE) if value else None


def split_address(address: str) -> tuple[str, int]:
    """'host:port' or '[v6]:port' -> (host, port)."""
    host, sep, port = address.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise RayConnectError(
            f"--ray-address {address!r}: expected HOST:PORT of the head "
            "(the GCS port `ray start --head` prints, 6379 by default) or auto"
        )
    return host, int(port)


def resolve(address: str) -> str:
    """'auto' -> the address of the cluster RAY_ADDRESS names or the latest one started on this
    machine (what ray.init does with it); anything else is checked for HOST:PORT."""
    if address.startswith("ray://"):
        raise RayConnectError(
            f"--ray-address {address}: Ray Client (ray://) addresses are not supported; run "
            "wherein on a node of the cluster (e.g. the head) with --ray-address HOST:PORT"
        )
    if address == "auto":
        from ray._private.services import get_ray_address_from_environment

        found = get_ray_address_from_environment("auto", None)
        if not found or found in ("auto", "local"):
            raise RayConnectError(
                "--ray-address auto: no running Ray cluster found on this machine "
                "(start one with `ray start --head`, or give HOST:PORT)"
            )
        address = found
    host, port = split_address(address)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def check_reachable(address: str, timeout: float = TCP_TIMEOUT_S) -> None:
    host, port = split_address(address)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return
    except socket.gaierror as exc:
        why = f"cannot resolve {host} ({exc.strerror})"
    except TimeoutError:
        why = f"no answer within {timeout:.0f} s"
    except ConnectionRefusedError:
        why = "connection refused (nothing listens on that port)"
    except OSError as exc:
        why = exc.strerror or str(exc)
    raise RayConnectError(
        f"cannot reach a Ray cluster at {address}: {why}; give the head's address and GCS port "
        "(`ray start --head --port PORT`, 6379 by default)"
    )


def probe(address: str, token: Token | None, timeout: float = PROBE_TIMEOUT_S) -> str:
    """Ask the cluster for its id without a token, then (if it refused and there is one) with it.

    "open" (no auth), "accepted", "rejected", "needs-token" (refused, no token here), or a
    one-line error. One child process for both: importing Ray's client costs seconds.
    """
    env = {k: v for k, v in os.environ.items() if k not in (MODE_ENV, TOKEN_ENV, TOKEN_PATH_ENV)}
    env[MODE_ENV] = "disabled"  # Ray attaches no token in this mode, even with one in the env
    if token is not None:
        env[TOKEN_ENV] = token.value
    try:
        res = subprocess.run(
            [sys.executable, "-m", __name__, address],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"no answer from a Ray GCS there within {timeout:.0f} s (is it the GCS port?)"
    for line in reversed(res.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)["result"]
    tail = (res.stderr.strip().splitlines() or ["no output"])[-1]
    return f"the probe failed: {tail}"


def join(address: str) -> Joined:
    """Check address and token, set this process's auth mode, and say what was used; or raise."""
    addr = resolve(address)
    check_reachable(addr)
    mode = os.environ.get(MODE_ENV, "").lower()
    token = None if mode == "disabled" else find_token()
    # Asked without a token first even with RAY_AUTH_MODE=token: Ray's own local runs set it in
    # this process, and a token-mode driver would refuse the callbacks of a cluster without auth.
    result = probe(addr, token)
    if result == "open":
        if mode == "token":
            set_auth_mode("disabled")
        return Joined(addr, None, f"ray: joining {addr} (the cluster asks for no auth token)")
    if result == "needs-token" and mode == "disabled":
        raise RayConnectError(
            f"the Ray cluster at {addr} requires an auth token, but {MODE_ENV}=disabled "
            f"here; unset it and provide {TOKEN_HINT}"
        )
    if result == "needs-token":
        raise RayConnectError(
            f"the Ray cluster at {addr} requires an auth token and none was found: set "
            f"{TOKEN_ENV}, or {TOKEN_PATH_ENV} to a file holding it, or copy it to "
            f"{DEFAULT_TOKEN_FILE} ({TOKEN_HINT})"
        )
    if result not in ("rejected", "accepted"):
        raise RayConnectError(f"cannot join the Ray cluster at {addr}: {result}")
    # probe() answers "rejected" or "accepted" only after asking with a token.
    assert token is not None, result
    if result == "rejected":
        raise RayConnectError(
            f"the Ray cluster at {addr} rejected the auth token from {token.source}; use {TOKEN_HINT}"
        )
    set_auth_mode("token")
    return Joined(addr, token, f"ray: joining {addr} with the auth token from {token.source}")


def set_auth_mode(mode: str) -> None:
    """RAY_AUTH_MODE for this process (and the local Ray processes it starts). Ray reads it when
    it loads its config, so a process that already ran Ray reloads it, as ray.init does."""
    os.environ[MODE_ENV] = mode
    if "ray._raylet" in sys.modules:
        # ray/_raylet.pyi declares only part of the compiled module.
        from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined, unused-ignore]

        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()


def _probe_main(address: str) -> None:
    """Child side of probe(): one JSON line on stdout."""
    from ray._raylet import GcsClient  # type: ignore[attr-defined, unused-ignore]  # not in _raylet.pyi
    from ray.exceptions import AuthenticationError

    def ask() -> str:
        try:
            GcsClient(address=address)
            return "ok"
        except AuthenticationError:
            return "refused"
        except Exception as exc:  # Ray's client raises its own RpcError types
            return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"

    result = ask()
    if result == "ok":
        result = "open"
    elif result == "refused" and not os.environ.get(TOKEN_ENV):
        result = "needs-token"
    elif result == "refused":
        set_auth_mode("token")
        again = ask()
        result = {"ok": "accepted", "refused": "rejected"}.get(again, again)
    print(json.dumps({"result": result}), flush=True)


if __name__ == "__main__":
    _probe_main(sys.argv[1])
