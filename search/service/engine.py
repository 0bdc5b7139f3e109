"""Where the work runs: this process ("local") or Ray ("ray": local mode, or the cluster
at an address). The one dispatch `embed` and `select --mask` share.

``Engine.choose`` checks the pair as the user gave it (an address only means something
for Ray); ``check`` reaches the cluster before any work, so a wrong address is one line
in seconds and leaves nothing behind; ``run`` calls the local or the Ray side with a
missing Ray or pyarrow reported as the one MissingExtra error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from wherein.schemas.errors import UsageError
from wherein.search.service.errors import needs_extra, only_with

ENGINES = ("local", "ray")
T = TypeVar("T")


@dataclass(frozen=True)
class Engine:
    name: str = "local"
    address: str | None = None  # a Ray cluster to join (HOST:PORT or auto); None: local mode

    @classmethod
    def choose(cls, name: str = "local", address: str | None = None) -> Engine:
        if name not in ENGINES:
            raise UsageError(f"--engine {name}: expected one of {', '.join(ENGINES)}")
        only_with("--engine ray", name == "ray", {"--ray-address": address})
        return cls(name, address or None)

    @property
    def on_ray(self) -> bool:
        return self.name == "ray"

    def check(self) -> None:
        """Reach the cluster now (TCP, seconds); the token is checked when it is joined."""
        if not (self.on_ray and self.address):
            return
        from wherein.indexer.scale.ray_connect import check_reachable, resolve

        with needs_extra():  # resolving "auto" asks Ray
            check_reachable(resolve(self.address))

    def run(self, local: Callable[[], T], ray: Callable[[], T]) -> T:
        with needs_extra():
            return ray() if self.on_ray else local()
