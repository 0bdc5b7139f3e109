"""What a search loads: no torch, open_clip, transformers or pandas before the first hit."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "open_clip", "transformers", "pandas")


def _loaded_after(code: str) -> list[str]:
    probe = f"{code}\nimport sys\nprint(' '.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_the_search_path_imports_nothing_heavy():
    assert (
        _loaded_after(
            "import wherein.search.cli.search, wherein.search.searcher, wherein.search.output\n"
            "import wherein.indexer.models.text_tower_litert, wherein.indexer.store.catalog"
        )
        == []
    )


def test_the_catalog_still_works_when_pandas_came_first(tmp_path):
    # sqlite_utils is imported without pandas only when pandas is not loaded yet.
    code = (
        "import pandas, pathlib\n"
        "from wherein.indexer.store.catalog import Catalog\n"
        f"Catalog(pathlib.Path({str(tmp_path / 'c.db')!r})).close()\n"
        "import sqlite_utils.db\n"
        "assert sqlite_utils.db.pd is pandas\n"
    )
    assert "pandas" in _loaded_after(code)


def test_pandas_stays_importable_after_a_catalog(tmp_path):
    code = (
        "import pathlib\n"
        "from wherein.indexer.store.catalog import Catalog\n"
        f"Catalog(pathlib.Path({str(tmp_path / 'c.db')!r})).close()\n"
        "import pandas\n"
        "assert pandas.DataFrame({'a': [1]}).shape == (1, 1)\n"
    )
    assert "pandas" in _loaded_after(code)


def test_a_mask_prompt_imports_nothing_heavy():
    # CLIPSeg's tokenizer: open_clip's encoding without open_clip (whose import pulls in torch).
    code = (
        "from wherein.indexer.models.clipseg import Tokenizer\n"
        "ids = Tokenizer()('a red car')\n"
        "assert ids[0] == 49406 and 49407 in ids\n"
    )
    assert _loaded_after(code) == []
