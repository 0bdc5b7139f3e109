"""Where models and indexes live: explicit option > environment variable > per-user dir."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

MODELS_ENV = "WHEREIN_MODELS"
INDEX_ENV = "WHEREIN_INDEX"


def models_dir(explicit: str | Path | None = None) -> Path:
    if explicit:
        return Path(explicit).expanduser()
    if os.environ.get(MODELS_ENV):
        return Path(os.environ[MODELS_ENV]).expanduser()
    return Path(platformdirs.user_cache_dir("wherein")) / "models"


def index_dir(explicit: str | Path | None = None) -> Path:
    if explicit:
        return Path(explicit).expanduser()
    if os.environ.get(INDEX_ENV):
        return Path(os.environ[INDEX_ENV]).expanduser()
    return Path(platformdirs.user_data_dir("wherein")) / "index"
