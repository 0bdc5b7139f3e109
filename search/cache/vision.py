"""Recent images' CLIPSeg vision passes, kept so that another prompt on them costs one decoder run.

An entry is the decoded image (reduced for CLIPSeg: enough for 352 and a
preview overlay), its full viewing size, and the vision graph's t3/t6/t9
(~4.5 MB). Each key is computed at most once at a time: concurrent requests
for one image wait for the first instead of running the vision graph twice.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from PIL import Image


@dataclass(frozen=True)
class Seen:
    image: Image.Image  # RGB, viewing orientation, possibly reduced (JPEG draft)
    size: tuple[int, int]  # the full (W, H) a viewer shows
    features: Any  # clipseg.Features
    from_store: bool = False  # read from the disk store (vision_store.py), not computed
    key: str = ""  # the store's key of the image (its content's hash; a frame's), when known


class VisionCache:
    """A thread-safe LRU of Seen entries; `passes` counts the vision passes it ran
    (entries read from the disk store are not passes)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.passes = 0
        self._entries: OrderedDict[Hashable, Seen] = OrderedDict()
        self._lock = threading.Lock()
        self._computing: dict[Hashable, threading.Lock] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def peek(self, key: Hashable) -> Seen | None:
        with self._lock:
            seen = self._entries.get(key)
            if seen is not None:
                self._entries.move_to_end(key)
            return seen

    def drop(self, key: Hashable) -> None:
        """Forget one entry (its photo is gone: its pass must not make another mask)."""
        with self._lock:
            self._entries.pop(key, None)

    def get(self, key: Hashable, compute: Callable[[], Seen]) -> Seen:
        """The entry for key, computing it (once, however many threads ask) when absent."""
        seen = self.peek(key)
        if seen is not None:
            return seen
        with self._lock:
            gate = self._computing.setdefault(key, threading.Lock())
        with gate:
            seen = self.peek(key)
            if seen is not None:
                return seen
            seen = compute()
            with self._lock:
                self.passes += not seen.from_store
                if self.capacity > 0:
                    self._entries[key] = seen
                    while len(self._entries) > self.capacity:
                        self._entries.popitem(last=False)
                # Stored before the gate goes: a later caller finds the entry, not a new gate.
                self._computing.pop(key, None)
            return seen
