"""The media-kind seam: what a kind of file says about itself, in one class.

A kind (photo, video, ...) is one module in this package with one ``MediaKind`` subclass,
named in ``registry.KIND_MODULES``. The rest of wherein asks the kind and branches on
nothing else:

- ``sniff(head, path)``: whether a file is of this kind, by content (its first bytes; a
  kind may open the file when they are not enough). The name is only a hint
  (``extensions``): ingest reads the head and the registry asks each kind in order.
- which items it yields: ``timed`` kinds yield frames at times ``t`` (item kind ``item``,
  'frame'), read by ``probe`` (the file's timeline: duration, rate, size) and ``sample``
  (frames at least every ``--frame-every`` seconds, at most ``--max-frames``); the others
  yield what ``prepare`` makes of the file's bytes (a photo: one whole-image item; regions
  add boxes). A timed kind that is ``in_memory`` (an animation) also probes and samples a
  file's bytes (a ``Source`` opened in memory), so a member of a tar shard or a file at a
  URL can be of that kind; one that is not (a video) is read from a local file only.
- ``image_at(path, at)``: the pixels at a locator (a time, a box or the whole file), full
  size, as a viewer shows them: what masks, the web app and exports load.
- how its items fold into one hit: a timed kind's frames fold into the hit's best frame,
  its ``time`` and its ``moments`` (wherein.search.videos); an untimed kind's hit is its
  best item.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, ClassVar, Protocol, TypeAlias

if TYPE_CHECKING:
    from PIL import Image

    from wherein.indexer.imaging import Locator, Prepared
    from wherein.indexer.regions import Tiling
    from wherein.indexer.video.frames import Frame, VideoInfo
    from wherein.schemas.models import ImageInput

HEAD_BYTES = 64  # what the registry reads to sniff; enough for every signature here

# What a kind reads a file from: its path, or its bytes opened in memory (io.BytesIO: a tar
# member, a file at a URL), which only an ``in_memory`` kind is handed to probe and sample.
Source: TypeAlias = str | Path | BinaryIO


class FrameSource(Protocol):
    """A timed kind's sampled frames: iterate once; afterwards ``damage`` says why the rest
    was skipped (None: the whole file decoded). Iteration raises VideoError when not one
    frame decodes (the file is a skip)."""

    damage: str | None

    def __iter__(self) -> Iterator[Frame]: ...


class MediaKind:
    """One kind of media file (see the module docstring). Subclasses set the class
    attributes and implement ``sniff`` and ``image_at``, and either ``prepare`` (untimed)
    or ``probe`` and ``sample`` (timed)."""

    name: ClassVar[str]  # the catalog's images.kind, a hit's kind, --kind's choice
    item: ClassVar[str] = "image"  # what its items are in the catalog (items.kind)
    timed: ClassVar[bool] = False  # items at times: hits carry time and moments
    plays: ClassVar[bool] = False  # a browser plays the file itself (served by HTTP range)
    in_memory: ClassVar[bool] = False  # timed, and probe/sample read bytes in memory too
    extensions: ClassVar[frozenset[str]] = frozenset()  # names that hint at it

    def sniff(self, head: bytes, path: Source | None) -> bool:
        """Whether the content is of this kind (head: the first bytes, at least HEAD_BYTES
        unless the file is shorter; path: the file (or its bytes in memory), to read more
        where head is not enough; None: only head is there)."""
        raise NotImplementedError

    @property
    def a(self) -> str:
        """The name with its article, for messages ("a video", "an animation")."""
        return ("an " if self.name[:1] in "aeiou" else "a ") + self.name

    def has_name(self, path: str | Path) -> bool:
        return Path(path).suffix.lower() in self.extensions

    # -- untimed kinds --------------------------------------------------------------
    def prepare(
        self,
        data: bytes,
        spec: ImageInput,
        draft: bool,
        mtime_ns: int,
        tiling: Tiling | None = None,
    ) -> Prepared:
        """The file's bytes decoded and preprocessed into its items (read and hashed by
        ingest); an error in Prepared.error, never raised. tiling: also cut it into regions
        (indexer/regions.py), for a kind whose items can be boxes of it."""
        raise NotImplementedError(f"{self.name} is timed: probe and sample it")

    # -- timed kinds ----------------------------------------------------------------
    def probe(self, path: Source) -> VideoInfo:
        """The file's timeline (duration, rate, displayed size, codec, when and where);
        raises VideoError with the reason it is a skip."""
        raise NotImplementedError(f"{self.name} is not timed")

    def sample(self, path: Source, every: float, max_frames: int) -> FrameSource:
        """The frames to index: at least every `every` seconds (and at scene cuts), at most
        `max_frames`, spread over the whole file when it is longer; deterministic."""
        raise NotImplementedError(f"{self.name} is not timed")

    # -- every kind -----------------------------------------------------------------
    def image_at(self, path: Source, at: Locator) -> Image.Image:
        """The RGB pixels at a locator, full size, as a viewer shows them (a frame at
        at.t, the whole image, or a box of it). Raises DecodeError or VideoError. path: a
        file, or bytes in memory (a tar member) for a kind that reads them (in_memory)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<kind {self.name}>"
