"""The layers point one way (search -> indexer -> schemas), and no modules import each other.

``wherein.schemas`` holds contracts (records, model specs, errors) and imports neither
layer; ``wherein.indexer`` (ingest, storage, model runtimes, conversion) never imports
``wherein.search``. An arrow that runs back up fails here, with the file and the line.

Every import counts, wherever it is written: at module level or inside a function
(a lazy import still runs), absolute or relative, and ``importlib.import_module`` with
a literal name. A computed name must be listed in DYNAMIC with the modules it can
reach, read from the code that computes it. Imports under ``if TYPE_CHECKING:`` never
run and are left out. Then no two modules may import each other, directly or round a
longer loop: a cycle fails with each of its arrows' file and line.
"""

from __future__ import annotations

import ast
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS = {"schemas": 0, "indexer": 1, "search": 2}


def _cli_commands(root: Path) -> list[str]:
    """search/cli/__init__.py registers f"wherein.search.cli.{m}" for m in COMMAND_MODULES."""
    tree = ast.parse((root / "search" / "cli" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "COMMAND_MODULES" for t in node.targets
        ):
            return [f"wherein.search.cli.{m}" for m in ast.literal_eval(node.value)]
    raise AssertionError("search/cli/__init__.py: COMMAND_MODULES not found")


def _export_codecs(root: Path) -> list[str]:
    """search/export/formats.py imports each format's "module.function" encoder/finisher."""
    tree = ast.parse((root / "search" / "export" / "formats.py").read_text())
    refs = [
        arg.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Format"
        for arg in node.args[4:]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str)
    ]
    assert refs, "search/export/formats.py: no Format(...) entries found"
    return sorted({f"wherein.search.export.{r.rsplit('.', 1)[0]}" for r in refs})


def _media_kinds(root: Path) -> list[str]:
    """indexer/kinds/registry.py imports each module of KIND_MODULES (name -> module)."""
    tree = ast.parse((root / "indexer" / "kinds" / "registry.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "KIND_MODULES" for t in node.targets
        ):
            return sorted(ast.literal_eval(node.value).values())
    raise AssertionError("indexer/kinds/registry.py: KIND_MODULES not found")


def _model_plugins(root: Path) -> list[str]:
    """WHEREIN_MODEL_PLUGINS names modules outside wherein (a family under development, a
    test's): none of wherein's own, so no arrow in this graph."""
    return []


# A file whose import_module takes a computed name -> the modules that name can be.
DYNAMIC: dict[str, Callable[[Path], list[str]]] = {
    "search/cli/__init__.py": _cli_commands,
    "search/export/formats.py": _export_codecs,
    "indexer/kinds/registry.py": _media_kinds,
    "indexer/models/registry.py": _model_plugins,
}


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["wherein", *parts])


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes under `if TYPE_CHECKING:` (they never run)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            skip |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return skip


def _imports(
    path: Path, root: Path = ROOT, known: frozenset[str] = frozenset()
) -> list[tuple[int, str]]:
    """(line, module) for every import the file can run; known: the modules that exist, so
    that `from pkg import mod` counts as importing pkg.mod."""
    tree = ast.parse(path.read_text(), filename=str(path))
    here = _module_name(path, root)
    package = here if path.name == "__init__.py" else here.rsplit(".", 1)[0]
    skip = _type_checking_only(tree)
    rel = str(path.relative_to(root))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            subs = [f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in known]
            found += [(node.lineno, m) for m in subs]
            if len(subs) < len(node.names):
                found.append((node.lineno, module))
        elif isinstance(node, ast.Call) and _is_import_module(node.func):
            arg = node.args[0] if node.args else None
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                found.append((node.lineno, arg.value))
            elif rel in DYNAMIC:
                found += [(node.lineno, m) for m in DYNAMIC[rel](root)]
            else:
                found.append((node.lineno, f"<computed name: add {rel} to DYNAMIC>"))
    return found


def _is_import_module(func: ast.expr) -> bool:
    if isinstance(func, ast.Attribute):
        return func.attr == "import_module" and getattr(func.value, "id", None) == "importlib"
    return isinstance(func, ast.Name) and func.id == "import_module"


def _graph(root: Path = ROOT) -> dict[str, dict[str, str]]:
    """module -> {module it imports: "file:line"}, wherein's own modules only."""
    files = {
        _module_name(p, root): p for layer in LAYERS for p in sorted((root / layer).rglob("*.py"))
    }
    known = frozenset(files)
    graph: dict[str, dict[str, str]] = {m: {} for m in files}
    for module, path in files.items():
        for line, target in _imports(path, root, known):
            if target.startswith("<computed"):
                graph[module][target] = f"{path.relative_to(root)}:{line}"
            elif target in known and target != module:
                graph[module].setdefault(target, f"{path.relative_to(root)}:{line}")
    return graph


def _backward_imports(root: Path = ROOT) -> list[str]:
    bad = []
    for layer, rank in LAYERS.items():
        for path in sorted((root / layer).rglob("*.py")):
            for line, module in _imports(path, root):
                parts = module.split(".")
                if parts[0] != "wherein" or len(parts) < 2 or parts[1] not in LAYERS:
                    continue
                if LAYERS[parts[1]] > rank:
                    bad.append(f"{path.relative_to(root)}:{line} imports {module}")
    return bad


def _cycles(root: Path = ROOT) -> list[str]:
    """Each import cycle (a strongly connected group of modules), arrow by arrow."""
    graph = _graph(root)
    unknown = [
        f"{where} imports a {t[1:-1]}"
        for edges in graph.values()
        for t, where in edges.items()
        if t.startswith("<")
    ]
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    found = []
    for group in sorted(groups):
        arrows = [
            f"{graph[a][b]} {a} -> {b}" for a in group for b in sorted(graph[a]) if b in group
        ]
        found.append("cycle: " + "; ".join(arrows))
    return unknown + found


def test_no_layer_imports_a_layer_above_it():
    assert _backward_imports() == []


def test_no_modules_import_each_other():
    assert _cycles() == []


def _engine_importers(root: Path = ROOT) -> list[str]:
    """Imports of the search engine (search/searcher.py) from outside the search service."""
    return [
        f"{where} imports {target}"
        for module, edges in sorted(_graph(root).items())
        for target, where in edges.items()
        if target == "wherein.search.searcher" and not module.startswith("wherein.search.service")
    ]


def test_only_the_service_reaches_the_search_engine():
    # One public Python entry point: the CLI, the web app and everything else search through
    # wherein.search.service, so a change of the engine has one caller to keep whole.
    assert _engine_importers() == []


def test_the_check_sees_a_backward_import(tmp_path):
    fake = tmp_path / "indexer"
    fake.mkdir()
    (fake / "bad.py").write_text("from wherein.search.service.search import open_index\n")
    for layer in ("schemas", "search"):
        (tmp_path / layer).mkdir()
    assert _backward_imports(tmp_path) == ["indexer/bad.py:1 imports wherein.search.service.search"]


def _fake_tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for layer in LAYERS:
        (tmp_path / layer).mkdir(exist_ok=True)
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def test_the_check_sees_lazy_relative_and_importlib_cycles(tmp_path):
    root = _fake_tree(
        tmp_path,
        {
            "search/__init__.py": "",
            "search/a.py": "def f():\n    from wherein.search import b\n",  # lazy
            "search/b.py": "from . import c\n",  # relative
            "search/c.py": "import importlib\nimportlib.import_module('wherein.search.a')\n",
            "search/d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from wherein.search import e\n",
            "search/e.py": "from wherein.search import d\n",  # d -> e only for types: no cycle
        },
    )
    assert _cycles(root) == [
        "cycle: search/a.py:2 wherein.search.a -> wherein.search.b; "
        "search/b.py:1 wherein.search.b -> wherein.search.c; "
        "search/c.py:2 wherein.search.c -> wherein.search.a"
    ]


def test_a_computed_import_must_be_declared(tmp_path):
    root = _fake_tree(
        tmp_path, {"search/x.py": "import importlib\nname = 'y'\nimportlib.import_module(name)\n"}
    )
    assert _cycles(root) == ["search/x.py:3 imports a computed name: add search/x.py to DYNAMIC"]


def test_the_declared_dynamic_imports_are_seen():
    graph = _graph()
    assert "wherein.search.cli.search" in graph["wherein.search.cli"]
    assert "wherein.search.export.coco" in graph["wherein.search.export.formats"]


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


# -- the CLI stays thin ---------------------------------------------------------------------
# search/cli/ parses options and prints; the workflows live in search/service/, which calls
# the indexer. So a CLI module imports nothing from wherein.indexer but what is named here,
# each with the reason. An entry no import uses any more fails too: the list only shrinks.
CLI_MAY_IMPORT_FROM_INDEXER: dict[str, dict[str, str]] = {
    "search/cli/options.py": {
        # --index and --models read the same environment variables the library resolves.
        "wherein.indexer.paths": "INDEX_ENV and MODELS_ENV, for the options' envvar",
        # Names only (the kinds' modules are not imported): click needs them at decoration.
        "wherein.indexer.kinds.registry": "the media kinds' names, for --kind's choices",
    },
}


def _known(root: Path) -> frozenset[str]:
    """Every module of the three layers: `from wherein.indexer import paths` is .paths."""
    return frozenset(
        _module_name(p, root) for layer in LAYERS for p in (root / layer).rglob("*.py")
    )


def _cli_indexer_imports(root: Path = ROOT) -> dict[str, set[str]]:
    """CLI file -> the wherein.indexer modules it imports (lazy imports included)."""
    found: dict[str, set[str]] = {}
    for path in sorted((root / "search" / "cli").rglob("*.py")):
        rel = str(path.relative_to(root))
        for _line, module in _imports(path, root, _known(root)):
            if module == "wherein.indexer" or module.startswith("wherein.indexer."):
                found.setdefault(rel, set()).add(module)
    return found


def _thin_cli_violations(
    root: Path = ROOT, allowed: dict[str, dict[str, str]] = CLI_MAY_IMPORT_FROM_INDEXER
) -> list[str]:
    found = _cli_indexer_imports(root)
    bad = []
    for path in sorted((root / "search" / "cli").rglob("*.py")):
        rel = str(path.relative_to(root))
        for line, module in _imports(path, root, _known(root)):
            if module in found.get(rel, set()) and module not in allowed.get(rel, {}):
                bad.append(f"{rel}:{line} imports {module}: call a search/service function")
    for rel, modules in sorted(allowed.items()):
        bad += [
            f"{rel}: no longer imports {m}; drop it from CLI_MAY_IMPORT_FROM_INDEXER"
            for m in sorted(modules)
            if m not in found.get(rel, set())
        ]
    return bad


def test_the_cli_imports_from_the_indexer_only_what_is_allowed():
    assert _thin_cli_violations() == []


def test_the_thin_cli_check_sees_a_lazy_import_and_a_stale_entry(tmp_path):
    root = _fake_tree(
        tmp_path,
        {
            "indexer/store/catalog.py": "",
            "search/cli/a.py": "def f():\n    from wherein.indexer.store import catalog\n",
            "search/cli/b.py": "from wherein.search.service import index\n",
        },
    )
    allowed = {"search/cli/b.py": {"wherein.indexer.paths": "no longer used"}}
    assert _thin_cli_violations(root, allowed) == [
        "search/cli/a.py:2 imports wherein.indexer.store.catalog: call a search/service function",
        "search/cli/b.py: no longer imports wherein.indexer.paths; "
        "drop it from CLI_MAY_IMPORT_FROM_INDEXER",
    ]


# -- the segmenter seam ------------------------------------------------------------------------
SEGMENTER_MODULE = "wherein.indexer.models.clipseg"


def _segmenter_bypasses(root: Path = ROOT) -> list[str]:
    """Imports of CLIPSeg's module from outside the model package: every mask path must load
    its segmenter through registry.load_segmenter, so another segmenter is one entry."""
    return sorted(
        f"{where} imports {SEGMENTER_MODULE}"
        for module, targets in _graph(root).items()
        if not module.startswith("wherein.indexer.models.")
        for target, where in targets.items()
        if target == SEGMENTER_MODULE
    )


def test_every_mask_path_loads_its_segmenter_through_the_seam():
    assert _segmenter_bypasses() == []


def test_the_seam_check_sees_a_lazy_clipseg_import(tmp_path):
    root = _fake_tree(
        tmp_path,
        {
            "indexer/models/clipseg.py": "",
            "indexer/models/registry.py": "from wherein.indexer.models import clipseg\n",
            "search/masks.py": "def f():\n    from wherein.indexer.models.clipseg import ClipSeg\n",
        },
    )
    assert _segmenter_bypasses(root) == [f"search/masks.py:2 imports {SEGMENTER_MODULE}"]


# -- the web app is a front-end -------------------------------------------------------------
# search/web parses requests and renders answers; the work is the service's. So it imports
# only the service, the schemas and itself, and nothing imports it but the command that
# starts it (an arrow into the web from below would make the front-end a library).
WEB = "wherein.search.web"
WEB_MAY_IMPORT = ("wherein.search.service", "wherein.schemas", WEB)
MAY_IMPORT_THE_WEB: dict[str, str] = {"search/cli/serve.py": "`wherein serve` starts the app"}


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _web_violations(root: Path = ROOT, allowed: dict[str, str] = MAY_IMPORT_THE_WEB) -> list[str]:
    known = _known(root)
    bad = []
    for layer in LAYERS:
        for path in sorted((root / layer).rglob("*.py")):
            rel = str(path.relative_to(root))
            in_web = _within(_module_name(path, root), WEB)
            for line, module in _imports(path, root, known):
                if not _within(module, "wherein"):
                    continue  # the standard library and third parties (FastAPI) are fine
                if in_web and not any(_within(module, m) for m in WEB_MAY_IMPORT):
                    bad.append(f"{rel}:{line} imports {module}: call a search/service function")
                elif not in_web and _within(module, WEB) and rel not in allowed:
                    bad.append(f"{rel}:{line} imports {module}: an arrow into the web app")
    return bad


def test_the_web_imports_only_the_service_and_the_schemas_and_nothing_imports_it():
    assert _web_violations() == []


def test_the_web_check_sees_an_import_out_and_an_arrow_in(tmp_path):
    root = _fake_tree(
        tmp_path,
        {
            "search/web/a.py": "from wherein.search.service import serve\n"
            "from wherein.schemas.errors import NotFound\nimport fastapi\n"
            "def f():\n    from wherein.indexer import paths\n",  # lazy: counts too
            "search/web/b.py": "from . import a\nfrom wherein.search.api import Query\n",
            "search/cache/c.py": "from wherein.search.web.a import f\n",
            "search/cli/serve.py": "from wherein.search.web import a\n",
        },
    )
    assert _web_violations(root, {"search/cli/serve.py": "starts it"}) == [
        "search/cache/c.py:1 imports wherein.search.web.a: an arrow into the web app",
        "search/web/a.py:5 imports wherein.indexer: call a search/service function",
        "search/web/b.py:2 imports wherein.search.api: call a search/service function",
    ]
