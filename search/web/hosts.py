"""The Host check: the app answers only requests addressed to a host it serves."""

from __future__ import annotations

import ipaddress
import re

from starlette.datastructures import Headers

from wherein.search.web.responses import error_response

LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "::1", "[::1]"]

_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_HOSTNAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")  # also matches an IPv4 literal
_PORT = re.compile(r"[0-9]{1,5}")
_IPV6 = re.compile(r"[0-9a-f:.]+")  # no zone id ("%eth0"): never a loopback name


def host_name(header: str) -> str | None:
    """The host of a Host header, lower-cased: 'localhost:8765' -> 'localhost',
    '[::1]:8765' -> '[::1]'; None unless the header is exactly a host name or IP literal
    and an optional port of digits (no spaces, quotes, user info, paths or second ports).
    """
    header = header.lower()
    if header.startswith("["):
        end = header.find("]")
        host, rest = header[: end + 1], header[end + 1 :]
        if end < 0 or not _IPV6.fullmatch(host[1:-1]):
            return None
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return None
    else:
        host, colon, port = header.partition(":")
        rest = colon + port
        if len(host) > 253 or not _HOSTNAME.fullmatch(host):
            return None
    if rest and not (rest[0] == ":" and _PORT.fullmatch(rest[1:]) and int(rest[1:]) <= 65535):
        return None
    return host


class TrustedHosts:
    """Answer only requests whose Host header names an allowed host (else a JSON 400).

    A DNS-rebinding page reaches 127.0.0.1 under its own host name; refusing that name
    keeps it from reading the API. Starlette's TrustedHostMiddleware does the same with
    a plain-text body, unlike every other error here (and cannot match "[::1]:port").
    """

    def __init__(self, app, allowed: list[str]) -> None:
        self.app = app
        self.any = "*" in allowed
        self.allowed = {h.lower() for h in allowed}

    async def __call__(self, scope, receive, send) -> None:
        if self.any or scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        header = Headers(scope=scope).get("host", "")
        host = host_name(header)
        if host is not None and host in self.allowed:
            await self.app(scope, receive, send)
            return
        response = error_response(
            400,
            f"host {header[:80]!r} is not served here: open the address `wherein serve` printed "
            "(it answers loopback names only unless started with --host)",
        )
        await response(scope, receive, send)
