"""The API's JSON Schemas (schemas/api.*.schema.json, hit.schema.json) for OpenAPI and for validation.

The schema files are the contract; the OpenAPI document (/docs, /openapi.json)
embeds them as components, with their cross-file and $defs references
rewritten to point at components.
"""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any

# component name -> file in schemas/
FILES = {
    "Hit": "hit.schema.json",
    "SearchResponse": "api.search.schema.json",
    "ImageRecord": "api.image.schema.json",
    "MaskResponse": "api.mask.schema.json",
    "StatusResponse": "api.status.schema.json",
    "IndexStatus": "status.schema.json",  # what StatusResponse extends (`wherein status --json`)
    "Error": "api.error.schema.json",
}


def _schema_dir() -> Path:
    # Installed: the schemas live in the wherein.schemas package.
    from wherein.schemas import records

    return Path(records.__file__).resolve().parent


@cache
def load(filename: str) -> dict[str, Any]:
    return json.loads((_schema_dir() / filename).read_text(encoding="utf-8"))


def openapi_components() -> dict[str, Any]:
    by_file = {f: n for n, f in FILES.items()}
    out: dict[str, Any] = {}
    for name, filename in FILES.items():
        schema = copy.deepcopy(load(filename))
        for key in ("$schema", "$id"):
            schema.pop(key, None)
        for def_name, sub in schema.pop("$defs", {}).items():
            out[f"{name}_{def_name}"] = _rewrite(sub, name, by_file)
        out[name] = _rewrite(schema, name, by_file)
    return out


def _rewrite(node: Any, name: str, by_file: dict[str, str]) -> Any:
    if isinstance(node, list):
        return [_rewrite(x, name, by_file) for x in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for k, v in node.items():
        if k == "$ref" and isinstance(v, str):
            target, _, frag = v.partition("#")
            owner = by_file.get(target, name) if target else name
            if frag.startswith("/$defs/"):
                v = f"#/components/schemas/{owner}_{frag[len('/$defs/') :]}"
            else:
                v = f"#/components/schemas/{owner}" + (frag if frag else "")
        out[k] = _rewrite(v, name, by_file)
    return out


def validator(filename: str):
    """A jsonschema validator for one schema file, with the other files resolvable by $ref."""
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource

    registry = Registry().with_resources(
        (load(f)["$id"], Resource.from_contents(load(f))) for f in FILES.values()
    )
    return Draft202012Validator(load(filename), registry=registry)
