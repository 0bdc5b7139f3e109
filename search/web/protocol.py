"""The HTTP/1.1 protocol `wherein serve` runs: uvicorn's h11 one, with its own errors in JSON.

A request uvicorn cannot parse (a malformed request line, a bad header) never reaches the
app: uvicorn answers 400 itself, in plain text. This subclass sends the same JSON body
``{"error", "status"}`` every error of the app has, so a client reads one error format.
"""

from __future__ import annotations

import json

import h11
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
