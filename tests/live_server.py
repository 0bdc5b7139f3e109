"""`wherein serve`'s HTTP server on a loopback port, in a thread of the test process.

The server is the one the command runs (wherein.search.web.protocol.HTTPServer: uvicorn's
h11 protocol with JSON errors, on a socket bound beforehand), so a test that needs real
connections (range requests cut short, raw request lines, socket options) sees what a
browser would.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from wherein.search.cli.serve import bind
from wherein.search.web.protocol import HTTPServer


@contextmanager
def live_server(app: Any, log_level: str = "warning") -> Iterator[tuple[HTTPServer, int]]:
    """The app served on 127.0.0.1 until the block ends: (the server, its port)."""
    srv = HTTPServer(app, bind("127.0.0.1", 0), log_level)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not srv.started:
            assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
            time.sleep(0.05)
        yield srv, srv.sock.getsockname()[1]
    finally:
        srv.should_exit = True
        thread.join(10)
