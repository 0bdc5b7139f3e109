"""The wheel ships every module and data file of the three source folders.

Package discovery is automatic (setup.py); this builds the wheel from a copy of the
tree, as pip does for a user, and compares its contents with the folders.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
ROOTS = ("indexer", "search", "schemas")
DATA = ("*.tflite", "*.json", "*.html", "*.js", "*.css")


def _source_files() -> set[str]:
    names = set()
    for root in ROOTS:
        for path in (REPO / root).rglob("*"):
            if "__pycache__" in path.parts or not path.is_file():
                continue
            if path.suffix == ".py" or any(path.match(p) for p in DATA):
                names.add(f"wherein/{path.relative_to(REPO).as_posix()}")
    return names


def test_wheel_holds_every_module_and_data_file(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(REPO / name, src / name)
    for root in ROOTS:
        shutil.copytree(REPO / root, src / root, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(tmp_path / "dist"),
            str(src),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    (wheel,) = (tmp_path / "dist").glob("wherein-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    expected = _source_files()
    assert {"wherein/search/cli/__init__.py", "wherein/schemas/hit.schema.json"} <= expected
    assert not expected - shipped, f"missing from the wheel: {sorted(expected - shipped)}"
