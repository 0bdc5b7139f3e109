"""A model family under indexer/models/families/ is named in two places only: its own module
and the registry's lines that register it. Everything else reads the registry."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FAMILIES = ROOT / "indexer" / "models" / "families"
REGISTRY = ROOT / "indexer" / "models" / "registry.py"


def _naming(names: set[str], root: Path = ROOT) -> dict[Path, list[str]]:
    """Python files of the package that mention one of names, with the lines that do."""
    out: dict[Path, list[str]] = {}
    for layer in ("schemas", "indexer", "search"):
        for path in sorted((root / layer).rglob("*.py")):
            lines = [ln for ln in path.read_text().splitlines() if any(n in ln for n in names)]
            if lines:
                out[path] = lines
    return out


def test_a_family_is_named_in_its_module_and_where_it_is_registered():
    modules = [p for p in sorted(FAMILIES.glob("*.py")) if p.name != "__init__.py"]
    assert modules  # siglip2_b32 at least
    for module in modules:
        names = {module.stem, module.stem.replace("_", "-")}
        found = _naming(names)
        assert set(found) <= {module, REGISTRY}, sorted(map(str, found))
        assert len(found.get(REGISTRY, [])) <= 2, found.get(REGISTRY)  # its import, its register


def test_the_check_sees_a_family_named_elsewhere(tmp_path):
    for layer in ("schemas", "indexer", "search"):
        (tmp_path / layer).mkdir()
    (tmp_path / "search" / "cli.py").write_text('CHOICES = ["siglip2", "tiny-fam"]\n')
    assert set(_naming({"tiny-fam"}, tmp_path)) == {tmp_path / "search" / "cli.py"}
