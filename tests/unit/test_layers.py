"""The layers point one way: search -> indexer -> schemas.

``wherein.schemas`` holds contracts (records, model specs, errors) and imports neither
layer; ``wherein.indexer`` (ingest, storage, model runtimes, conversion) never imports
``wherein.search``. An arrow that runs back up fails here, with the file and the line.
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS = {"schemas": 0, "indexer": 1, "search": 2}


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def _backward_imports(root: Path = ROOT) -> list[str]:
    bad = []
    for layer, rank in LAYERS.items():
        for path in sorted((root / layer).rglob("*.py")):
            for line, module in _imports(path):
                parts = module.split(".")
                if parts[0] != "wherein" or len(parts) < 2 or parts[1] not in LAYERS:
                    continue
                if LAYERS[parts[1]] > rank:
                    bad.append(f"{path.relative_to(root)}:{line} imports {module}")
    return bad


def test_no_layer_imports_a_layer_above_it():
    assert _backward_imports() == []


def test_the_check_sees_a_backward_import(tmp_path):
    fake = tmp_path / "indexer"
    fake.mkdir()
    (fake / "bad.py").write_text("from wherein.search.api import open_index\n")
    for layer in ("schemas", "search"):
        (tmp_path / layer).mkdir()
    assert _backward_imports(tmp_path) == ["indexer/bad.py:1 imports wherein.search.api"]


def _tracked_text_files() -> list[Path]:
    try:
        out = subprocess.run(
            ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"not a git checkout: {exc}")
    files = []
    for name in out.splitlines():
        path = ROOT / name
        if path.suffix in {".py", ".md", ".toml", ".json", ".txt", ".html", ".js", ""}:
            files.append(path)
    return files


def test_no_file_points_outside_the_repository():
    # Spelled in pieces so that this file does not match itself.
    outside = ["../" + "shared", "MODELS" + ".md", "SCALE" + ".md", "STYLE" + ".md"]
    hits = []
    for path in _tracked_text_files():
        if not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        hits += [f"{path.relative_to(ROOT)}: {word}" for word in outside if word in text]
    assert hits == []
