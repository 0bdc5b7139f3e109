"""Masks: where in an image, or one moment of a video, a prompt matches (CLIPSeg).

One pipeline serves every front-end: a ``MaskSession`` loads CLIPSeg once, keeps recent
vision passes in memory and in the index's vision store (search/cache/vision_store.py),
and runs the decoder per prompt on them.

- `wherein mask` (``mask_image``) resolves what to mask (a file, or ``id:N`` for a catalog
  id), checks that a video comes with a time and a photo without one, and masks all
  prompts on one vision pass (``MaskSession.mask_file``). It returns a ``MaskRun`` whose
  ``to_dict()`` follows ``schemas/mask.schema.json``; the CLI only renders it.
- `search --mask` and `select --mask` mask their hits (``MaskSession.add_masks``).
- The web app keeps a session for its life: a mask asked for (``get``, ``mask_png``) or
  guessed after a search (``prefetch``) is made on one long-lived thread, asked-for ones
  first, since a LiteRT graph keeps an interpreter per thread and the server's request
  threads are many. The masks it makes are kept under INDEX/cache/masks
  (search/cache/masks.py); the overlay is a preview (long side <= masking.PREVIEW_MAX_SIDE),
  the photo-size mask PNG is made when first asked for. A video's frame (an IndexedFile
  with a time) is masked as a photo is, each moment under its own key. Nothing kept is
  used once the file is no longer the indexed content (check_current, one stat per
  request); ``forget`` drops a file's entries.
"""

from __future__ import annotations

import functools
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from wherein.indexer.imaging import DecodeError, decode
from wherein.indexer.indexed import IndexedFile, check_current, frame_image, read_verified
from wherein.schemas.errors import FileChanged, IndexError_, UsageError, WhereinError
from wherein.schemas.models import CLIPSEG_IMAGE_SIZE
from wherein.search.cache.masks import KINDS, KeptMasks, MaskEntry, prompt_key
from wherein.search.cache.vision import Seen, VisionCache
from wherein.search.cache.vision_store import VisionStore
from wherein.search.service.lanes import background
from wherein.search.service.runner import LATER, NOW, PriorityRunner

__all__ = [
    "KINDS",
    "MaskEntry",
    "MaskRun",
    "MaskSession",
    "PromptMask",
    "clean_prompt",
    "mask_image",
]

_CATALOG_ID = re.compile(r"^id:(\d+)$")
MAX_PROMPT_CHARS = 200
# Images whose vision pass a session keeps in memory: ~2.2 MB of float16 t3/t6/t9 and a
# preview each. With the index's vision store (on disk, every pass, keyed by content) a
# pass missed here costs a photo decode and a 2 MB read, not a vision pass: keep the few
# a person is looking at. Without it (a read-only index), more.
FEATURE_CACHE = 2
FEATURE_CACHE_UNSTORED = 8
RECENT_RESULTS = 4  # masks (352 maps, ~0.5 MB each) whose photo-size PNG can still be made cheaply
IMAGE_LOCK_STRIPES = 64


class BadPrompt(UsageError):
    """The mask prompt is empty or too long (the web app: HTTP 400)."""


@dataclass(frozen=True)
class PromptMask:
    """One prompt's mask: its size, area, score and boxes, and the files written (None with
    no files)."""

    prompt: str
    width: int
    height: int
    mask_area: float
    mask_score: float
    bbox: dict[str, list[int]] | None
    regions: int
    mask_path: str | None = None
    overlay_path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class MaskRun:
    """What `wherein mask` found: the file masked, the moment (None for a photo), whether the
    stand-in models answered, and one PromptMask per prompt in the order given."""

    image: str
    time: float | None
    standin: bool
    masks: list[PromptMask] = field(default_factory=list)

    @property
    def size(self) -> tuple[int, int]:
        """(W, H) of the image or frame as a viewer shows it."""
        return (self.masks[0].width, self.masks[0].height) if self.masks else (0, 0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "image": self.image,
            "time": self.time,
            "standin": self.standin,
            "masks": [m.to_dict() for m in self.masks],
        }


def mask_image(
    image: str,
    prompts: Sequence[str],
    out_dir: Path | None = None,
    *,
    time: float | None = None,
    full_size_overlays: bool = False,
    index_dir: Path | None = None,
    models_dir: Path | None = None,
    on_models: Callable[[Any], None] | None = None,
) -> MaskRun:
    """Mask each prompt on IMAGE (a path or id:N), on its frame at `time` seconds when it is a
    video; with out_dir, writes <stem>.<prompt>.mask.png and .overlay.jpg there
    (<name>@<time>s.<prompt>... for a frame).

    A video without a time, or a time for a photo, is a UsageError; a time outside the
    video a WhereinError that gives the video's range. on_models is told the ModelDir before
    the model loads (the CLI's stand-in banner).
    """
    from wherein.indexer import paths as P
    from wherein.indexer.models.modeldir import ModelDir

    path = resolve_image(image, index_dir)
    check_time(path, time)
    if out_dir is not None:
        from wherein.indexer.outputs import refuse_in_index

        refuse_in_index(out_dir, P.index_dir(index_dir))
    models = ModelDir(P.models_dir(models_dir))
    if on_models is not None:
        on_models(models)
    session = MaskSession(models.root, store=VisionStore.in_index(P.index_dir(index_dir)))
    results = session.mask_file(
        path, prompts, out_dir, time=time, full_size_overlays=full_size_overlays
    )
    masks = []
    for res, files in results:
        s = res.summary()
        masks.append(
            PromptMask(
                s["prompt"],
                s["width"],
                s["height"],
                s["mask_area"],
                s["mask_score"],
                s["bbox"],
                s["regions"],
                files.get("mask"),
                files.get("overlay"),
            )
        )
    return MaskRun(str(path), time, models.is_standin, masks)


def check_time(path: Path, time: float | None) -> None:
    """A file of a timed kind (a video, by content) needs the moment to mask; a photo has
    none."""
    from wherein.indexer.kinds.registry import kind_of

    kind = kind_of(path)
    if kind.timed and time is None:
        raise UsageError(
            f"{path} is {kind.a}: give --time SECONDS for the moment to mask (e.g. --time 12.5)"
        )
    if not kind.timed and time is not None:
        raise UsageError(f"--time applies to a video, and {path} is not one")
    if time is not None and not math.isfinite(time):
        raise UsageError(f"--time {time}: not a number of seconds")


def resolve_image(image: str, index_dir: Path | None) -> Path:
    """IMAGE as given: an existing file, else id:N looked up in the index's catalog."""
    path = Path(image).expanduser()
    if path.is_file():
        return path
    found = _CATALOG_ID.match(image)
    if found is None:
        if path.exists():
            raise UsageError(f"{image}: not a file")
        raise UsageError(f"{image}: no such file (or give id:N, a catalog id in --index)")
    from wherein.indexer import paths as P
    from wherein.indexer.store.index_store import IndexStore

    file_id = int(found.group(1))
    with IndexStore.open(P.index_dir(index_dir), load_vectors=False) as store:
        # Catalog ids are SQLite integers: a larger N is no image, not an overflow.
        row = store.catalog.rows_by_ids([file_id]).get(file_id) if file_id < 2**63 else None
        where = store.dir
    if row is None:
        raise IndexError_(f"{where}: no image with id {file_id}")
    if not Path(row["path"]).is_file():
        raise IndexError_(
            f"{row['path']} (id {file_id}) is gone; run `wherein index` on its folder"
        )
    return Path(row["path"])


def clean_prompt(prompt: str | None) -> str:
    """The prompt with its white space folded; BadPrompt when empty or too long."""
    p = " ".join((prompt or "").split())
    if not p:
        raise BadPrompt("prompt: give some text to segment")
    if len(p) > MAX_PROMPT_CHARS:
        raise BadPrompt(f"prompt: at most {MAX_PROMPT_CHARS} characters")
    return p


class MaskSession:
    """CLIPSeg loaded once, recent vision passes kept, masks made from them (module docstring)."""

    def __init__(
        self,
        models_root: Path,
        cache_dir: Path | None = None,
        threads: int | None = None,
        on_added: Callable[[list[Path]], object] | None = None,
        store: VisionStore | None = None,
    ) -> None:
        """cache_dir: where the web's masks are kept (None: in memory); threads: the model's
        interpreter threads (None: its default); on_added: told of each new file written
        there (the cache limit); store: where vision passes outlive the process."""
        self.models_root = Path(models_root)
        self.threads = threads
        self.store = store
        self.kept = KeptMasks(cache_dir, on_added)
        self.decoder_runs = 0
        self.prefetched = 0  # masks made ahead of being asked for
        self._seen = VisionCache(FEATURE_CACHE if store is not None else FEATURE_CACHE_UNSTORED)
        self._results: OrderedDict[str, Any] = OrderedDict()  # key -> MaskResult, recent ones
        self._lock = threading.Lock()
        # Striped by hash: a lock per image ever masked would grow with the index.
        self._image_locks = [threading.Lock() for _ in range(IMAGE_LOCK_STRIPES)]
        self._runner_lock = threading.Lock()
        self._runner_: PriorityRunner | None = None  # started by the first web mask
        self._closed = False

    @property
    def model(self):
        from wherein.indexer.models.modeldir import ModelDir
        from wherein.indexer.models.registry import load_segmenter

        return load_segmenter(ModelDir(self.models_root), self.threads, cached=True)

    @property
    def vision_passes(self) -> int:
        return self._seen.passes

    # -- `wherein mask`, `search --mask`, `select --mask` ------------------------------------
    def mask_file(
        self,
        path: Path,
        prompts: Sequence[str],
        out_dir: Path | None = None,
        *,
        time: float | None = None,
        full_size_overlays: bool = False,
    ) -> list:
        """Each prompt's (MaskResult, files written) on one file, or a video's frame at `time`
        seconds, from one vision pass (see masking.mask_file)."""
        from wherein.search.localize.masking import mask_file

        return mask_file(
            self.model, path, list(prompts), out_dir, full_size_overlays, self.store, time
        )

    def add_masks(
        self,
        hits: list,
        prompt: str,
        out_dir: Path,
        min_area: float | None = None,
        *,
        full_size_overlays: bool = False,
        skipped: list[str] | None = None,
    ) -> list:
        """Every hit with its mask fields, files in out_dir (see masking.add_masks_to_hits);
        masks run on the masking module's long-lived pool, sized to the hits. A hit whose
        file can no longer be read gets no mask, and its mask_skipped says why; skipped
        (when given) gets a warning line for each, in rank order."""
        from wherein.search.localize.masking import add_masks_to_hits

        def skip(hit, why: str) -> None:
            if skipped is not None:
                skipped.append(f"no mask for {hit.path}: {why}")

        return add_masks_to_hits(
            hits,
            prompt,
            out_dir,
            self.models_root,
            min_area,
            on_error=skip,
            full_size_overlays=full_size_overlays,
            store=self.store,
        )

    # -- the web app: masks of indexed files, kept ---------------------------------------------
    def get(self, f: IndexedFile, prompt: str) -> MaskEntry:
        """The mask of prompt on an indexed file (or a video's frame): kept, else made now."""
        prompt = clean_prompt(prompt)
        pkey = prompt_key(prompt)
        # Before any kept mask or vision pass is used: a deleted or replaced photo has none.
        check_current(f)
        entry = self.kept.get(f, pkey)
        if entry is not None:
            return entry
        with self._image_lock(f.key):  # one vision pass per image, however many prompts
            entry = self.kept.get(f, pkey)
            if entry is not None:
                return entry
            return self._runner.submit(lambda: self._ensure(f, prompt, pkey), NOW).result()

    def mask_png(self, f: IndexedFile, prompt: str) -> tuple[Path | bytes, bool]:
        """The photo-size mask PNG and whether it was kept. It is made on the first request
        for it, not with the mask: the page shows the overlay, and a 12-MP 1-bit PNG costs
        about as much as the decoder run (16-37 ms here)."""
        entry = self.get(f, prompt)
        made = entry.files.get("mask")
        if made is not None:
            return made, True
        p = clean_prompt(prompt)
        pkey = prompt_key(p)
        return self._runner.submit(lambda: self._make_png(f, p, pkey), NOW).result(), False

    def prefetch(self, files: list[Callable[[], IndexedFile]], prompt: str) -> int:
        """Make the masks of these hits in the background, after any asked-for mask.

        files: callables resolving each hit (a catalog read), run on the mask thread so
        that the search answering does not wait. Replaces the guesses of an earlier
        search still queued. Returns how many were queued.
        """
        runner = self._runner
        runner.drop(LATER)
        try:
            prompt = clean_prompt(prompt)
        except BadPrompt:
            return 0
        pkey = prompt_key(prompt)

        def guess(resolve: Callable[[], IndexedFile]) -> None:
            try:
                f = resolve()
                check_current(f)
                if self.kept.get(f, pkey) is None:
                    self._compute(f, prompt, pkey)
                    self.prefetched += 1
            except (WhereinError, OSError):
                pass  # a guess only: the click that asks for it reports the problem

        for resolve in files:
            runner.submit(functools.partial(guess, resolve), LATER)
        return len(files)

    @property
    def prefetch_queued(self) -> int:
        return self._runner_.pending(LATER) if self._runner_ is not None else 0

    def forget(self, f: IndexedFile) -> None:
        """Drop what is kept of one file (it is gone): masks in memory and on disk, its
        vision pass in memory. The vision pass on disk stays: it is keyed by content and
        read only with the file's bytes in hand, so it serves a moved copy at most."""
        prefix = f"{f.id}-"
        with self._lock:
            for key in [k for k in self._results if k.startswith(prefix)]:
                del self._results[key]
        self.kept.forget(f)
        self._seen.drop(f.key)

    def close(self) -> None:
        """Cancel the queued guesses and wait for the mask thread (when one was started)."""
        with self._runner_lock:
            self._closed = True
            runner = self._runner_
        if runner is not None:
            runner.close()

    # -- internals ---------------------------------------------------------------------------
    @property
    def _runner(self) -> PriorityRunner:
        with self._runner_lock:
            if self._runner_ is None:
                if self._closed:
                    raise RuntimeError("the mask session is closed")
                # Background priority: a search's thread gets the CPU first (lanes.py).
                self._runner_ = PriorityRunner("wherein-masks", on_start=background)
            return self._runner_

    def _ensure(self, f: IndexedFile, prompt: str, pkey: str) -> MaskEntry:
        """On the mask thread: the kept result, else a new one (a guess may have made it
        while this request waited)."""
        return self.kept.get(f, pkey) or self._compute(f, prompt, pkey)

    def _result(self, f: IndexedFile, prompt: str, pkey: str) -> tuple[Any, Seen]:
        """On the mask thread: the prompt's mask on the file (a decoder run on its pass)."""
        from wherein.search.localize.masking import crop_passes, mask_of

        model = self.model
        seen = self._vision(f, model)
        # Small regions are segmented again on crops of the file (refine.py), as `search
        # --mask` does; the crops too are read from the verified file.
        res = mask_of(
            model,
            prompt,
            seen.features,
            seen.size,
            image=self._loader(f),
            crops=crop_passes(model, seen, self.store),
        )
        self.decoder_runs += 1
        with self._lock:
            self._results[f"{f.key}/{pkey}"] = res
            while len(self._results) > RECENT_RESULTS:
                self._results.popitem(last=False)
        return res, seen

    def _compute(self, f: IndexedFile, prompt: str, pkey: str) -> MaskEntry:
        res, seen = self._result(f, prompt, pkey)
        return self.kept.put(f, pkey, {"id": f.id, **res.summary()}, res.overlay_jpeg(seen.image))

    def _make_png(self, f: IndexedFile, prompt: str, pkey: str) -> Path | bytes:
        """On the mask thread: the mask PNG from the recent result, else from a decoder run."""
        path = self.kept.png_path(f, pkey)
        if path is not None and path.is_file():
            return path  # made while this request waited
        with self._lock:
            res = self._results.get(f"{f.key}/{pkey}")
        if res is None:
            res, _ = self._result(f, prompt, pkey)
        return self.kept.put_png(f, pkey, res.mask_png())

    @staticmethod
    def _loader(f: IndexedFile) -> Callable[[int], Any]:
        """What a refinement decodes its crops from: the verified photo at a draft size, or
        the frame at f.time (full size)."""
        if f.time is not None:
            return lambda _draft: frame_image(f)
        return lambda draft: _decoded(f, draft)[0]

    def _vision(self, f: IndexedFile, model) -> Seen:
        """The file's vision pass, read from the verified file (never a swapped one)."""
        from wherein.search.localize.masking import frame_store_key, seen_keyed, seen_stored

        def compute() -> Seen:
            if f.time is not None:  # a video's frame: the store keys it by content and time
                frame = frame_image(f)
                key = frame_store_key(f.time, content=f.sha256)  # as `search --mask` does
                return seen_keyed(model, frame, frame.size, key, self.store)
            data = read_verified(f)
            image, size = _decoded(f, CLIPSEG_IMAGE_SIZE, data)
            return seen_stored(model, image, size, data, self.store)

        return self._seen.get(f.key, compute)

    def _image_lock(self, key: str) -> threading.Lock:
        return self._image_locks[hash(key) % IMAGE_LOCK_STRIPES]


def _decoded(f: IndexedFile, draft: int, data: bytes | None = None) -> tuple[Any, tuple[int, int]]:
    """The indexed photo decoded (JPEG draft to `draft`), from its verified bytes."""
    try:
        return decode(data if data is not None else read_verified(f), draft_size=draft)
    except DecodeError as exc:
        raise FileChanged(f"image {f.id}: the indexed file no longer decodes ({exc})") from None
