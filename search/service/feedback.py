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
