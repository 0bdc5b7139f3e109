"""How a workflow talks to whoever runs it while it works: the callbacks it reports through.

The CLI passes its progress bar and stderr; the web app and Python callers pass nothing
(every callback defaults to doing nothing). What a workflow *found* comes back in its
typed result instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def _nothing(*_args: Any, **_kwargs: Any) -> None:
    return None


@dataclass(frozen=True)
class Feedback:
    # One line for the person running it (stderr in the CLI): notes, warnings.
    say: Callable[[str], None] = _nothing
    # Items done since the last call, and the total once it is known.
    progress: Callable[[int], None] = _nothing
    on_total: Callable[[int], None] = _nothing
    # Called once the models or the index are known, before the work: the CLI says there
    # that the answers come from the stand-in models. models: a ModelDir; space/index:
    # the embedding space and folder of an index read without a model.
    on_models: Callable[..., None] = _nothing

    def models(self, models: Any = None, *, space: str | None = None, index: Path | None = None):
        self.on_models(models, space=space, index=index)


QUIET = Feedback()


def standin_note(models: Any = None, *, space: str | None = None, index: Any = None) -> str | None:
    """The line that says answers come from the colour-only stand-in models, or None.

    models: the ModelDir a workflow loads; space (with index, its folder): the embedding
    space of an index read without loading a model (dupes, unique, status).
    """
    from wherein.indexer.models.modeldir import is_standin_space

    if models is not None and models.is_standin:
        return f"Using STAND-IN models from {models.root} (they only know colours)."
    if is_standin_space(space):
        where = f" {index}" if index is not None else ""
        return f"The index{where} was made with STAND-IN models (they only know colours)."
    return None
