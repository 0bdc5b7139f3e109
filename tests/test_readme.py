"""The README tells the truth about the CLI: the shared-options table, the commands and the
options its examples use, the exit statuses and the mask file names."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from wherein.search.cli import cli

from conftest import cli_commands as commands

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()
PIPELINE_BREAKS = {"|", "||", "&&", ";"}


def option_names(cmd: click.Command) -> set[str]:
    names = {"--help", "-h"}
    for p in cmd.params:
        if isinstance(p, click.Option):
            names.update(p.opts + p.secondary_opts)
    return names


def table_after(heading: str, nth: int = 0) -> list[list[str]]:
    """The rows (cells stripped, header and rule dropped) of the nth table below a heading."""
    body = README.split(heading, 1)[1]
    tables, current = [], []
    for line in body.splitlines():
        if line.startswith("#"):
            break
        if line.startswith("|"):
            current.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif current:
            tables.append(current)
            current = []
    if current:
        tables.append(current)
    return tables[nth][2:]


def ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


# -- the shared options table --------------------------------------------------------------
OPTIONS_HEADING = "### Options: one name, one meaning"


def shared_rows() -> list[tuple[list[str], str, set[str]]]:
    """(option names, env var or "", commands) per row."""
    rows = []
    for opt_cell, env_cell, _meaning, cmd_cell in table_after(OPTIONS_HEADING):
        names = [t.split()[0] for t in ticked(opt_cell)]
        env = ticked(env_cell)
        rows.append((names, env[0] if env else "", set(ticked(cmd_cell))))
    return rows


def test_shared_options_table_lists_index_models_and_output_switches():
    listed = {n for names, _, _ in shared_rows() for n in names}
    assert {"--index", "--models", "--json", "--csv", "--nl", "--paths", "--paths0"} <= listed


@pytest.mark.parametrize("names, env, listed", shared_rows(), ids=lambda v: str(v)[:30])
def test_shared_option_row_matches_the_commands(names, env, listed):
    every = commands()
    assert listed <= set(every), f"no such command: {listed - set(every)}"
    for name in names:
        having = {full for full, cmd in every.items() if name in option_names(cmd)}
        assert having == listed, (
            f"{name}: README lists {sorted(listed)}, the CLI has it on {sorted(having)}"
        )
        for full in having:
            opt = next(p for p in every[full].params if name in getattr(p, "opts", []))
            assert (opt.envvar or "") == env, f"{full} {name}: env {opt.envvar!r}, README {env!r}"


# -- commands and options in the examples ------------------------------------------------------
def invocations() -> list[tuple[str, list[str]]]:
    """(where, tokens after `wherein`) for code-block lines and `wherein ...` code spans."""
    found = []
    in_code = False
    for line in README.splitlines():
        if line.startswith("```"):
            in_code = not in_code
            continue
        spans = [line] if in_code else re.findall(r"`(wherein [^`]*)`", line)
        for span in spans:
            try:
                tokens = shlex.split(span, comments=in_code)
            except ValueError:
                tokens = span.split()
            for i, tok in enumerate(tokens):
                if tok == "wherein" or tok.endswith("/wherein"):
                    rest = []
                    for t in tokens[i + 1 :]:
                        if t in PIPELINE_BREAKS:
                            break
                        rest.append(t)
                    found.append((span.strip(), rest))
    return found


def resolve(tokens: list[str]) -> tuple[str | None, list[str]]:
    """(full command name, its arguments), or (None, []) for `wherein --help` and the like."""
    if not tokens or tokens[0].startswith("-"):
        return None, []
    cmd = cli.commands.get(tokens[0])
    if isinstance(cmd, click.Group) and len(tokens) > 1 and not tokens[1].startswith("-"):
        return f"{tokens[0]} {tokens[1]}", tokens[2:]
    return tokens[0], tokens[1:]


def test_readme_examples_name_only_real_commands_and_options():
    every = commands()
    groups = {n for n, c in cli.commands.items() if isinstance(c, click.Group)}
    for where, tokens in invocations():
        name, args = resolve(tokens)
        if name is None or name in groups:
            continue
        assert name in every, f"README names `wherein {name}`, which does not exist: {where}"
        real = option_names(every[name])
        for arg in args:
            opt = arg.strip("[]").split("=")[0]
            if opt.startswith("-") and opt != "-" and not re.match(r"^-\d", opt):
                assert opt in real, f"`wherein {name}` has no {opt}: {where}"


def test_readme_mentions_every_command():
    named = {resolve(tokens)[0] for _, tokens in invocations()}
    missing = set(commands()) - named
    assert not missing, f"commands the README never shows: {sorted(missing)}"


# -- exit statuses ------------------------------------------------------------------------------
def documented_exit_statuses() -> dict[int, str]:
    rows = table_after(OPTIONS_HEADING, nth=1)
    return {int(code): meaning for code, meaning in rows}


def test_readme_exit_statuses_are_the_real_ones(tmp_path, monkeypatch):
    codes = documented_exit_statuses()
    assert set(codes) == {0, 1, 2, 75, 130}
    assert "usage" in codes[2] and "error" in codes[1] and "interrupted" in codes[130]
    monkeypatch.setenv("WHEREIN_INDEX", str(tmp_path / "no-index"))
    runner = CliRunner()
    assert runner.invoke(cli, ["--help"]).exit_code == 0
    assert runner.invoke(cli, ["status"]).exit_code == 1
    assert runner.invoke(cli, ["search", "--no-such-option"]).exit_code == 2
    assert runner.invoke(cli, ["search", "red", "--json", "--csv"]).exit_code == 2


# -- mask file names ----------------------------------------------------------------------------
def test_mask_file_names_are_the_ones_the_readme_gives(env, shapes, tmp_path):
    """The masks section's examples: `photo.the-dog.mask.png`, and the rank in front with
    `search --mask` (`3-photo.the-dog.mask.png`)."""
    assert "`photo.the-dog.mask.png`" in README and "`3-photo.the-dog.mask.png`" in README
    runner = CliRunner()
    assert runner.invoke(cli, ["index", str(shapes), "-q"]).exit_code == 0
    photo = shapes / "red_square.jpg"
    out = tmp_path / "one"
    r = runner.invoke(cli, ["mask", str(photo), "the red", "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in out.iterdir()) == [
        "red_square.the-red.mask.png",
        "red_square.the-red.overlay.jpg",
    ]
    out = tmp_path / "hits"
    r = runner.invoke(cli, ["search", "red", "-k", "1", "--mask", "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    (hit,) = json.loads(r.stdout)
    stem = Path(hit["path"]).stem
    assert Path(hit["mask_path"]).name == f"1-{stem}.red.mask.png"
