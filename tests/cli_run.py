"""The CLI run in-process, as the tests call it: one place for the runner the test files share.

``run(*args)`` invokes ``wherein`` with the arguments as strings and, unless ``ok=False``,
asserts exit 0 (the output and the exception in the message); ``search_json(*args)`` is
``wherein search ARGS --json`` parsed.
"""

from __future__ import annotations

import json

from click.testing import CliRunner, Result

from wherein.search.cli import cli


def run(*args: object, ok: bool = True, env: dict[str, str] | None = None) -> Result:
    result = CliRunner().invoke(cli, [str(a) for a in args], env=env)
    if ok:
        assert result.exit_code == 0, result.output + repr(result.exception)
    return result


def search_json(*args: object) -> list[dict]:
    return json.loads(run("search", *args, "--json").stdout)
