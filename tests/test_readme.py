"""The README and the docs site tell the truth about the CLI: the shared-options table, the
exit statuses, the commands and options the examples use, the mask file names; the README's
set-up commands are the ones CI runs and work as written; the site builds."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from wherein.search.cli import cli

from conftest import cli_commands as commands

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = (ROOT / "README.md").read_text()
OPTIONS_PAGE = (DOCS / "options.md").read_text()
MASKS_PAGE = (DOCS / "masks.md").read_text()
# Hand-written pages; docs/results/ only includes bench/results/ (checked below).
PAGES = {
    str(p.relative_to(ROOT)): p.read_text()
    for p in sorted(DOCS.rglob("*.md"))
    if DOCS / "results" not in p.parents
}
TEXTS = {"README.md": README, **PAGES}
PIPELINE_BREAKS = {"|", "||", "&&", ";"}


def option_names(cmd: click.Command) -> set[str]:
    names = {"--help", "-h"}
    for p in cmd.params:
        if isinstance(p, click.Option):
            names.update(p.opts + p.secondary_opts)
    return names


def table_after(text: str, heading: str) -> list[list[str]]:
    """The rows (cells stripped, header and rule dropped) of the first table below a heading."""
    assert heading in text, f"no heading {heading!r}"
    rows = []
    for line in text.split(heading, 1)[1].splitlines():
        if line.startswith("#"):
            break
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif rows:
            break
    return rows[2:]


def ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


# -- the shared options table --------------------------------------------------------------
OPTIONS_HEADING = "## Options: one name, one meaning"


def shared_rows() -> list[tuple[list[str], str, set[str]]]:
    """(option names, env var or "", commands) per row."""
    rows = []
    for opt_cell, env_cell, _meaning, cmd_cell in table_after(OPTIONS_PAGE, OPTIONS_HEADING):
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
            f"{name}: docs/options.md lists {sorted(listed)}, the CLI has it on {sorted(having)}"
        )
        for full in having:
            opt = next(p for p in every[full].params if name in getattr(p, "opts", []))
            assert (opt.envvar or "") == env, f"{full} {name}: env {opt.envvar!r}, docs {env!r}"


# -- commands and options in the examples ------------------------------------------------------
def invocations(text: str) -> list[tuple[str, list[str]]]:
    """(where, tokens after `wherein`) for code-block lines and `wherein ...` code spans."""
    found = []
    in_code = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
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


@pytest.mark.parametrize("name", sorted(TEXTS))
def test_examples_name_only_real_commands_and_options(name):
    every = commands()
    groups = {n for n, c in cli.commands.items() if isinstance(c, click.Group)}
    for where, tokens in invocations(TEXTS[name]):
        cmd, args = resolve(tokens)
        if cmd is None or cmd in groups:
            continue
        assert cmd in every, f"{name} names `wherein {cmd}`, which does not exist: {where}"
        real = option_names(every[cmd])
        for arg in args:
            opt = arg.strip("[]").split("=")[0]
            if opt.startswith("-") and opt != "-" and not re.match(r"^-\d", opt):
                assert opt in real, f"{name}: `wherein {cmd}` has no {opt}: {where}"


def test_the_docs_show_every_command():
    named = {resolve(tokens)[0] for text in TEXTS.values() for _, tokens in invocations(text)}
    missing = set(commands()) - named
    assert not missing, f"commands no example in README.md or docs/ shows: {sorted(missing)}"


# -- the README as a front page -----------------------------------------------------------------
def code_blocks(text: str) -> list[str]:
    return re.findall(r"^```[a-z]*\n(.*?)^```", text, re.S | re.M)


def test_readme_set_up_commands_are_the_ones_ci_runs():
    """CI proves the set-up works by running the README's commands verbatim."""
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    setup = [
        line
        for block in code_blocks(README)
        for line in block.splitlines()
        if line.startswith((".venv/bin/pip", "python3.11 -m venv"))
    ]
    assert len(setup) == 2, setup
    for line in setup:
        assert line in ci, f".ci/run does not run the README's set-up command: {line}"


def test_the_docs_show_the_cpu_only_torch_install():
    """Without an NVIDIA GPU, torch's CUDA libraries are about 4 GB never loaded: the docs show
    the CPU-only build, installed before wherein (installed after, pip has already fetched
    the CUDA build), and the README points there."""
    cpu = "pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu"
    page = PAGES["docs/getting-started.md"]
    lines = [ln for block in code_blocks(page) if cpu in block for ln in block.splitlines()]
    assert lines, "docs/getting-started.md shows no CPU-only torch install"
    first = next(i for i, ln in enumerate(lines) if cpu in ln)
    then = next((i for i, ln in enumerate(lines) if "pip install -e ." in ln), None)
    assert then is not None and first < then, lines
    assert "docs/getting-started.md#without-an-nvidia-gpu" in README
    assert "download.pytorch.org/whl/cpu" in " ".join(README.split())


def test_readme_puts_wherein_on_path_before_using_a_bare_wherein():
    """A new user pastes the commands in order: a bare `wherein` only works once the venv's
    bin/ is on PATH (otherwise: "wherein: command not found")."""
    lines = [line for block in code_blocks(README) for line in block.splitlines()]
    activate = next(
        (i for i, line in enumerate(lines) if line.startswith("source .venv/bin/activate")), None
    )
    bare = [i for i, line in enumerate(lines) if re.match(r"wherein\b", line)]
    assert bare, "the README shows no commands"
    assert activate is not None and activate < bare[0], (
        f"`{lines[bare[0]]}` comes before `source .venv/bin/activate`"
    )


def test_readme_fits_on_a_screen_and_its_links_resolve():
    assert len(README.splitlines()) <= 200, "the reference belongs in docs/"
    targets = re.findall(r"\]\(([^)#\s]+)[^)]*\)", README)
    local = [t for t in targets if "://" not in t]
    assert any(t.startswith("docs/") for t in local)
    for target in local:
        assert (ROOT / target).exists(), f"README links to {target}, which does not exist"


# -- exit statuses ------------------------------------------------------------------------------
def documented_exit_statuses() -> dict[int, str]:
    rows = table_after(OPTIONS_PAGE, "## Exit statuses")
    return {int(code): meaning for code, meaning in rows}


def test_documented_exit_statuses_are_the_real_ones(tmp_path, monkeypatch):
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
def test_mask_file_names_are_the_ones_the_docs_give(env, shapes, tmp_path):
    """The masks page's examples: `photo.the-dog.mask.png`, and the rank in front with
    `search --mask` (`3-photo.the-dog.mask.png`)."""
    assert "`photo.the-dog.mask.png`" in MASKS_PAGE
    assert "`3-photo.the-dog.mask.png`" in MASKS_PAGE
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


# -- the site -----------------------------------------------------------------------------------
def test_every_benchmark_result_has_its_page_on_the_site():
    results = sorted(p.name for p in (ROOT / "bench" / "results").glob("*.md"))
    assert results
    for name in results:
        page = DOCS / "results" / name
        assert page.exists(), f"bench/results/{name} has no page docs/results/{name}"
        assert f'--8<-- "bench/results/{name}"' in page.read_text()


def test_the_site_builds_strict_with_the_cli_reference(tmp_path):
    """mkdocs --strict fails on a broken link or anchor, a page missing from the nav, a missing
    results file, or a CLI reference mkdocs-click cannot render."""
    pytest.importorskip("mkdocs_click", reason="needs the [docs] extra (mkdocs-click)")
    site = tmp_path / "site"
    r = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert r.returncode == 0, r.stdout + r.stderr
    reference = (site / "cli" / "index.html").read_text()
    for name in commands():
        assert f"wherein {name}" in reference, f"the CLI reference lacks `wherein {name}`"
