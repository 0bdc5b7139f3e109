"""One Ray session for a wherein command: join a cluster (checked, token found) or start a local one.

Shared by every command with ``--engine ray`` so that a cluster is joined the same way
everywhere: ``ray_connect.join`` checks the address and the auth token in bounded time
and raises one-line errors; Ray's console noise is trimmed (``ray_quiet``). A session
already initialised in this process (a test's small local cluster, a notebook) is used
as it is and left running.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def ray_session(address: str | None, say: Callable[[str], object] | None = None) -> Iterator[Any]:
    """Yield the ``ray`` module, initialised; shut down on exit only if started here.

    address: HOST:PORT or auto (join), None (Ray's local mode on this machine).
    say: where the one line "ray: joining ... with the auth token from ..." goes.
    """
    import ray

    from wherein.indexer.scale import ray_quiet
    from wherein.indexer.scale.ray_connect import RayConnectError, join

    started = not ray.is_initialized()
    if started and address:
        joined = join(address)  # bounded checks; raises a one-line RayConnectError
        if say:
            say(joined.note)
        address = joined.address
    import ray.data  # noqa: F401 - installs Ray Data's log handlers, which quiet_loggers tunes

    ray_quiet.quiet_loggers()
    if started:
        try:
            ray.init(
                address=address,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
            )
        except (ConnectionError, RuntimeError, ValueError) as exc:
            if not address:
                raise
            why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise RayConnectError(f"cannot join the Ray cluster at {address}: {why}") from None
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()
