"""`wherein serve`: a local web app over an index (search, browse, see the masks)."""

from __future__ import annotations

import ipaddress

import click

from wherein.search.cli.common import friendly_errors, index_option, models_option


def register(cli: click.Group) -> None:
    cli.add_command(serve)


def is_loopback(host: str) -> bool:
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


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
    default=8765,
    show_default=True,
    help="Port (0: any free one).",
)
@click.option(
    "--raw",
    is_flag=True,
    help="Encode text terms as typed, without the prompt 'This is a photo of {}.'.",
)
@friendly_errors
def serve(index_dir, models_dir, host, port, raw):
    """Start a local web app over an index: search, browse, see where each match is.

    \b
      wherein serve                      then open http://127.0.0.1:8765
      wherein serve --index ~/idx --port 9000
    The JSON API it uses is documented at /docs.
    """
    import uvicorn

    from wherein.schemas.models import SIGLIP_PROMPT_TEMPLATE
    from wherein.search.web.app import create_app

    loopback = is_loopback(host)
    if not loopback:
        click.secho(
            f"WARNING: listening on {host}: anyone who can reach this machine on port {port} can search "
            "your index and see its images, with no password. Use --host 127.0.0.1 unless you mean it.",
            fg="red",
            bold=True,
            err=True,
        )
    app = create_app(
        index_dir,
        models_dir,
        template=None if raw else SIGLIP_PROMPT_TEMPLATE,
        allowed_hosts=None if loopback else ["*"],
    )
    state = app.state.wherein
    if state.searcher.models.is_standin:
        click.secho(
            f"Using STAND-IN models from {state.searcher.models.root} (they only know colours).",
            fg="yellow",
            err=True,
        )
    shown = f"[{host}]" if ":" in host else host
    click.echo(
        f"wherein: {state.searcher.count} images in {state.index_dir}; "
        f"open http://{shown}:{port}  (Ctrl-C stops)",
        err=True,
    )
    uvicorn.run(app, host=host, port=port, log_level="warning", server_header=False)
