"""The HTTP/1.1 protocol `wherein serve` runs: uvicorn's h11 one, with its own errors in JSON.

A request uvicorn cannot parse (a malformed request line, a bad header) never reaches the
app: uvicorn answers 400 itself, in plain text. This subclass sends the same JSON body
``{"error", "status"}`` every error of the app has, so a client reads one error format.

``HTTPServer`` is the uvicorn server `wherein serve` runs over the socket it bound. The
socket object itself is handed over (not its file descriptor: uvicorn re-wraps a bare fd
as a Unix socket, and asyncio then leaves Nagle's algorithm on for the TCP connections it
accepts, so the body of every response after the first on a keep-alive connection waited
~40 ms for the client's delayed ACK of its headers).
"""

from __future__ import annotations

import contextlib
import json
import socket
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol


class JSONErrorsH11(H11Protocol):
    def send_400_response(self, msg: str) -> None:
        body = json.dumps(
            {"error": f"bad request: {msg.rstrip('.').lower()}", "status": 400},
            separators=(",", ":"),
        ).encode("ascii")
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode("ascii")),
            (b"connection", b"close"),
        ]
        http = getattr(self, "conn")  # noqa: B009 - h11's state machine (not a database's)
        for event in (h11.Response(status_code=400, headers=headers), h11.Data(data=body)):
            self.transport.write(http.send(event))
        self.transport.write(http.send(h11.EndOfMessage()))
        self.transport.close()


class HTTPServer(uvicorn.Server):
    """uvicorn's server on one socket bound beforehand (the address printed is the one
    served); ``serve_forever`` returns when it stops (Ctrl-C), False if it never started."""

    def __init__(self, app: Any, sock: socket.socket, log_level: str = "warning") -> None:
        host, port = sock.getsockname()[:2]
        super().__init__(
            uvicorn.Config(
                app,
                host=host,
                port=port,
                log_level=log_level,
                server_header=False,
                http=JSONErrorsH11,
            )
        )
        self.sock = sock

    def serve_forever(self) -> bool:
        # uvicorn stops on Ctrl-C, then raises the signal again for the caller: it stopped.
        with contextlib.suppress(KeyboardInterrupt):
            self.run(sockets=[self.sock])
        return self.started
