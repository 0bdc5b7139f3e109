"""Package discovery for the repository's layout (the rest of the metadata is in pyproject.toml).

The user asked for indexer/, search/ and schemas/ at the top level; installed, they are the
wherein.indexer, wherein.search and wherein.schemas packages, so they cannot collide with other
distributions' top-level modules. pyproject.toml's `packages.find` cannot add that prefix, so the
subpackages are found here: a new folder with an __init__.py ships without editing a list
(tests/test_packaging.py builds the wheel and checks every module is in it).
"""

from setuptools import find_packages, setup

ROOTS = ("indexer", "search", "schemas")

setup(
    packages=[
        f"wherein.{name}"
        for root in ROOTS
        for name in (root, *(f"{root}.{sub}" for sub in find_packages(root)))
    ],
    package_dir={f"wherein.{root}": root for root in ROOTS},
)
