"""Shared fixtures: stand-in models (built once per session) and drawn test images."""

from __future__ import annotations

import inspect
import os
from pathlib import Path

import pytest
from PIL import Image, ImageDraw

from wherein.indexer.models.standins import build_standin_models
from wherein.indexer.models.standins.palette import rgb255

BACKGROUND = (247, 247, 247)


@pytest.fixture(scope="session")
def standin_models(tmp_path_factory) -> Path:
    return build_standin_models(tmp_path_factory.mktemp("models"))


@pytest.fixture(autouse=True)
def one_shot_runtime():
    """A test that opens a ServeSession turns on the server's way of running graphs
    (litert_graph.run_concurrently) for its process: the next test starts without it."""
    from wherein.indexer.models import litert_graph

    yield
    litert_graph.run_concurrently(False)


@pytest.fixture()
def env(standin_models, tmp_path, monkeypatch) -> dict[str, Path]:
    """WHEREIN_MODELS / WHEREIN_INDEX pointed at stand-ins and a fresh index."""
    index = tmp_path / "index"
    monkeypatch.setenv("WHEREIN_MODELS", str(standin_models))
    monkeypatch.setenv("WHEREIN_INDEX", str(index))
    return {"models": standin_models, "index": index}


class Counting:
    """A graph wrapper that counts runs."""

    def __init__(self, graph) -> None:
        self.graph = graph
        self.calls = 0

    def run(self, *inputs):
        self.calls += 1
        return self.graph.run(*inputs)


def draw_shape(
    path: Path,
    colour: str,
    size: tuple[int, int] = (320, 240),
    box: tuple[float, float, float, float] = (0.15, 0.15, 0.85, 0.85),
    shape: str = "rect",
    background: tuple[int, int, int] = BACKGROUND,
    **save_kwargs,
) -> tuple[int, int, int, int]:
    """Draw one shape of a palette colour; box is fractional. Returns the pixel box drawn."""
    w, h = size
    px = (round(box[0] * w), round(box[1] * h), round(box[2] * w) - 1, round(box[3] * h) - 1)
    img = Image.new("RGB", size, background)
    d = ImageDraw.Draw(img)
    (d.ellipse if shape == "ellipse" else d.rectangle)(px, fill=rgb255(colour))
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path, **save_kwargs)
    return px


@pytest.fixture()
def shapes(tmp_path) -> Path:
    """A folder of coloured-shape photos: 2 red, 2 blue, 1 green, 1 yellow, in mixed formats."""
    root = tmp_path / "photos"
    draw_shape(root / "red_square.jpg", "red", quality=95)
    draw_shape(
        root / "red_disc.png", "red", size=(400, 300), shape="ellipse", box=(0.1, 0.1, 0.9, 0.9)
    )
    draw_shape(root / "blue_square.png", "blue")
    draw_shape(root / "nested" / "blue_wide.webp", "blue", size=(480, 200), lossless=True)
    draw_shape(root / "green.bmp", "green")
    draw_shape(root / "nested" / "yellow.gif", "yellow", size=(200, 300))
    return root


def pytest_collection_modifyitems(config, items):
    # Extras-only tests skip cleanly where their extra is not installed.
    probes = {"convert": "litert_torch", "parity": "transformers", "scale": "ray"}
    import importlib.util

    for item in items:
        # `pytest -m "not slow"` is the quick part: slow is what a test uses (models,
        # child processes, an extra's heavy runtime), wherever the test file lives.
        if _uses_something_slow(item, probes):
            item.add_marker(pytest.mark.slow)
        for mark, module in probes.items():
            if mark in item.keywords and importlib.util.find_spec(module) is None:
                item.add_marker(pytest.mark.skip(reason=f"needs the [{mark}] extra ({module})"))
    os.environ.setdefault("TQDM_DISABLE", "1")


# Modules whose import means the test file runs child processes or a heavy runtime.
_SLOW_MODULES = frozenset({"subprocess", "multiprocessing", "launch", "ray", "playwright"})


def _uses_something_slow(item, extras: dict[str, str]) -> bool:
    if "standin_models" in getattr(item, "fixturenames", ()):
        return True
    if any(mark in item.keywords for mark in extras):
        return True
    module = getattr(item, "module", None)
    imported = (
        {
            getattr(value, "__name__", "").split(".")[-1] if inspect.ismodule(value) else ""
            for value in vars(module).values()
        }
        if module is not None
        else set()
    )
    imported |= {
        getattr(value, "__module__", "").split(".")[-1]
        for value in (vars(module).values() if module is not None else ())
        if inspect.isfunction(value) or inspect.isclass(value)
    }
    return bool(imported & _SLOW_MODULES)


def cli_commands(group=None, prefix: str = "") -> dict:
    """Every CLI command by its full name ("models check"), walking groups recursively."""
    import click

    from wherein.search.cli import cli

    out: dict[str, click.Command] = {}
    for name, cmd in (group or cli).commands.items():
        full = f"{prefix}{name}"
        if isinstance(cmd, click.Group):
            out.update(cli_commands(cmd, f"{full} "))
        else:
            out[full] = cmd
    return out
