"""Where models and indexes live: explicit option > environment variable > per-user dir."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

from wherein.schemas.errors import WhereinError

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


def make_folder(path: str | Path, what: str = "output folder") -> Path:
    """``mkdir -p`` that fails with one line: what is in the way (a file, a device) or why not.

    Nothing in the way is ever replaced: the user chose that path for something else.
    """
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise WhereinError(f"{path}: exists and is not a folder; choose another {what}") from None
    except NotADirectoryError:
        blocker = next((p for p in path.parents if p.exists() and not p.is_dir()), path.parent)
        raise WhereinError(f"{path}: cannot create the {what}, {blocker} is not a folder") from None
    except OSError as exc:
        raise WhereinError(f"{path}: cannot create the {what} ({exc.strerror or exc})") from None
    return path
