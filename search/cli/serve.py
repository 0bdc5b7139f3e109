"""`wherein serve`: a local web app over an index (search, browse, see the masks)."""

from __future__ import annotations

import errno
import ipaddress
import socket

import click
from click.core import ParameterSource

from wherein.search.cli.options import (
    friendly_errors,
    index_option,
    models_option,
    raw_option,
    standin_banner,
)
from wherein.search.service import DEFAULT_PREFETCH_MASKS
from wherein.search.web import bound_malloc

DEFAULT_PORT = 8765


def register(cli: click.Group) -> None:
    cli.add_command(serve)


def is_loopback(host: str) -> bool:
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (0: any free port); OSError when it cannot be had.

    Bound here, then handed to uvicorn, so the address printed is the one served and a
    taken port is known before anything is printed or loaded.
    """
    family, kind, proto, _, addr = socket.getaddrinfo(
        host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        # As uvicorn does: a port left in TIME_WAIT by a previous run is free; one that
        # another program listens on still is not.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


def listen(host: str, port: int, explicit: bool) -> socket.socket:
    """The socket to serve on: the port asked for, else (default port taken) any free one."""
    try:
        return bind(host, port)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise click.ClickException(
                f"cannot listen on {host}:{port}: {exc.strerror or exc}"
            ) from None
        if explicit:
            raise click.ClickException(
                f"port {port} on {host} is taken by another program; pass another --port "
                "(--port 0 picks a free one)"
            ) from None
    sock = bind(host, 0)
    click.echo(f"port {port} is taken; using free port {sock.getsockname()[1]}", err=True)
    return sock


@click.command()
@index_option
@models_option
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on. Anything but loopback lets other machines see your photos.",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_PORT,
    show_default=True,
    help="Port (0: any free one). Unset and taken: any free one, said on stderr.",
)
@raw_option
@click.option(
    "--cache-mb",
    type=click.FloatRange(min=0),
    default=None,
    help="Size limit of INDEX/cache (thumbnails, previews, masks); least recently used go "
    "first [env WHEREIN_CACHE_MB; default: 512].",
)
@click.option(
    "--prefetch-masks",
    type=click.IntRange(min=0),
    default=DEFAULT_PREFETCH_MASKS,
    show_default=True,
    help="After a text search, make the masks of this many first hits in the background, "
    "so that opening one finds its mask ready (0: only when asked).",
)
@friendly_errors
def serve(index_dir, models_dir, host, port, raw, cache_mb, prefetch_masks):
    """Start a local web app over an index: search, browse, see where each match is.

    \b
      wherein serve                      then open http://127.0.0.1:8765
      wherein serve --index ~/idx --port 9000
    The JSON API it uses is documented at /docs.
    """
    from wherein.search.service.serve import MODEL_TEMPLATE
    from wherein.search.web.app import create_app
    from wherein.search.web.protocol import HTTPServer

    bound_malloc()  # before any server thread exists
    ctx = click.get_current_context()
    sock = listen(host, port, ctx.get_parameter_source("port") is not ParameterSource.DEFAULT)
    port = sock.getsockname()[1]
    loopback = is_loopback(host)
    if not loopback:
        click.secho(
            f"WARNING: listening on {host}: anyone who can reach this machine on port {port} can search "
            "your index and see its images, with no password. Use --host 127.0.0.1 unless you mean it.",
            fg="red",
            bold=True,
            err=True,
        )
    try:
        app = create_app(
            index_dir,
            models_dir,
            template=None if raw else MODEL_TEMPLATE,
            allowed_hosts=None if loopback else ["*"],
            cache_mb=cache_mb,
            prefetch_masks=prefetch_masks,
        )
    except BaseException:
        sock.close()
        raise
    state = app.state.wherein
    standin_banner(state.searcher.models)
    shown = f"[{host}]" if ":" in host else host
    click.echo(
        f"wherein: {state.searcher.count} items in {state.index_dir}; "
        f"open http://{shown}:{port}  (Ctrl-C stops)",
        err=True,
    )
    # The socket bound above, handed to uvicorn's h11 protocol with the 400s it sends
    # itself in the app's JSON (wherein.search.web.protocol).
    if not HTTPServer(app, sock).serve_forever():
        raise click.ClickException(f"the web server could not start on {host}:{port}")
