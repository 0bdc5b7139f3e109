"""CLIPSeg masks for the web app: computed on demand, kept under INDEX/cache/masks.

INDEX/cache/masks/<id>-<sha256[:16]>/<prompt-slug>-<sha256(prompt)[:12]>.{json,overlay.jpg,mask.png}

Model work runs on one long-lived thread: a LiteRT graph keeps one interpreter
per thread, and the web server's worker threads are many, so running it in
each request's thread would load (and pack) the graphs again per worker.
The vision pass (the expensive part) of the last few images is kept in memory
(with the image decoded reduced, as a preview), and on disk under
INDEX/cache/vision (search/cache/vision_store.py), so trying several prompts on one image,
even after a restart, costs one vision pass and one decoder run per prompt. After a search,
the masks of its first hits are made in the background (``prefetch``), behind
any mask a user asks for, so that opening a hit usually finds its mask ready. The overlay is
a preview (long side <= masking.PREVIEW_MAX_SIDE); the mask PNG is at the
image's size and made when it is first asked for (the page shows the overlay). The prompt only reaches file names as a slug plus a hash.
A video's frame (an IndexedFile with a time) is masked as a photo is, each moment
under its own key. Nothing kept (mask, overlay, vision pass) is used once the photo is no longer the
indexed content (files.check_current, one stat per request); ``forget`` drops an
image's entries.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wherein.indexer.imaging import DecodeError, decode
from wherein.schemas.errors import WhereinError
from wherein.schemas.models import CLIPSEG_IMAGE_SIZE
from wherein.search.cache.thumbs import _write_atomic
from wherein.search.cache.vision import Seen, VisionCache
from wherein.search.cache.vision_store import VisionStore
from wherein.search.web.files import FileChanged, IndexedFile, check_current, read_verified
from wherein.search.web.runner import LATER, NOW, PriorityRunner
from wherein.search.web.videos import frame_image

MAX_PROMPT_CHARS = 200
FEATURE_CACHE = 8  # images whose vision pass is kept: ~4.5 MB of t3/t6/t9 + a preview each
MEMORY_CACHE = 32  # results kept in memory when the index folder is read-only
RECENT_RESULTS = 16  # masks (352 maps, ~0.5 MB each) whose photo-size PNG can still be made cheaply
IMAGE_LOCK_STRIPES = 64
KINDS = {"overlay": ("overlay.jpg", "image/jpeg"), "mask": ("mask.png", "image/png")}


class BadPrompt(WhereinError):
    """The mask prompt is empty or too long (HTTP 400)."""


@dataclass
class MaskEntry:
    summary: dict[str, Any]  # MaskResult.summary() plus id and cached
    # kind -> file on disk, or bytes kept in memory; "mask" only once it was asked for
    files: dict[str, Path | bytes]


def clean_prompt(prompt: str | None) -> str:
    p = " ".join((prompt or "").split())
    if not p:
        raise BadPrompt("prompt: give some text to segment")
    if len(p) > MAX_PROMPT_CHARS:
        raise BadPrompt(f"prompt: at most {MAX_PROMPT_CHARS} characters")
    return p


def prompt_key(prompt: str) -> str:
    from wherein.search.localize.masking import slug

    return f"{slug(prompt)}-{hashlib.sha256(prompt.encode()).hexdigest()[:12]}"


class MaskService:
    def __init__(
        self,
        models_root: Path,
        cache_dir: Path | None,
        threads: int | None = None,
        on_added: Callable[[list[Path]], object] | None = None,
        store: VisionStore | None = None,
    ) -> None:
        """on_added: told of each new file written (the cache limit);
        store: where vision passes outlive the process (a restarted server reuses them)."""
        self.on_added = on_added
        self.store = store
        self.models_root = Path(models_root)
        self.dir = cache_dir
        self.threads = threads
        self.decoder_runs = 0
        self._seen = VisionCache(FEATURE_CACHE)
        self._memory: OrderedDict[str, MaskEntry] = OrderedDict()
        self._results: OrderedDict[str, Any] = OrderedDict()  # key -> MaskResult, recent ones
        self._lock = threading.Lock()
        # Striped by hash: a lock per image ever masked would grow with the index.
        self._image_locks = [threading.Lock() for _ in range(IMAGE_LOCK_STRIPES)]
        self._runner = PriorityRunner("wherein-masks")
        self.prefetched = 0  # masks made ahead of being asked for

    @property
    def vision_passes(self) -> int:
        return self._seen.passes

    @property
    def model(self):
        from wherein.indexer.models.modeldir import ModelDir
        from wherein.indexer.models.registry import load_segmenter

        return load_segmenter(ModelDir(Path(self.models_root)), self.threads, cached=True)

    def get(self, f: IndexedFile, prompt: str) -> MaskEntry:
        prompt = clean_prompt(prompt)
        pkey = prompt_key(prompt)
        # Before any kept mask or vision pass is used: a deleted or replaced photo has none.
        check_current(f)
        entry = self._cached(f, pkey)
        if entry is not None:
            return entry
        with self._image_lock(
            f.key
        ):  # one vision pass per image, however many prompts arrive at once
            entry = self._cached(f, pkey)
            if entry is not None:
                return entry
            return self._runner.submit(lambda: self._ensure(f, prompt, pkey), NOW).result()

    def mask_png(self, f: IndexedFile, prompt: str) -> tuple[Path | bytes, bool]:
        """The photo-size mask PNG and whether it was cached. It is made on the first request
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
        self._runner.drop(LATER)
        try:
            prompt = clean_prompt(prompt)
        except BadPrompt:
            return 0
        pkey = prompt_key(prompt)

        def guess(resolve: Callable[[], IndexedFile]) -> None:
            try:
                f = resolve()
                check_current(f)
                if self._cached(f, pkey) is None:
                    self._compute(f, prompt, pkey)
                    self.prefetched += 1
            except (WhereinError, OSError):
                pass  # a guess only: the click that asks for it reports the problem

        for resolve in files:
            self._runner.submit(functools.partial(guess, resolve), LATER)
        return len(files)

    @property
    def prefetch_queued(self) -> int:
        return self._runner.pending(LATER)

    def forget(self, f: IndexedFile) -> None:
        """Drop what is kept of one image (its photo is gone): masks in memory and on disk,
        its vision pass in memory. The vision pass on disk stays: it is keyed by content
        and read only with the photo's bytes in hand, so it serves a moved copy at most."""
        prefix = f"{f.id}-"
        with self._lock:
            for kept in (self._memory, self._results):
                for key in [k for k in kept if k.startswith(prefix)]:
                    del kept[key]
        self._seen.drop(f.key)
        if self.dir is not None:
            try:
                folders = list(self.dir.glob(f"{prefix}*"))
            except OSError:
                folders = []
            for folder in folders:
                shutil.rmtree(folder, ignore_errors=True)

    def close(self) -> None:
        self._runner.close()

    # -- internals ---------------------------------------------------------------------
    def _folder(self, f: IndexedFile) -> Path | None:
        return self.dir / f.key if self.dir is not None else None

    def _cached(self, f: IndexedFile, pkey: str) -> MaskEntry | None:
        with self._lock:
            mem = self._memory.get(f"{f.key}/{pkey}")
        if mem is not None:
            return MaskEntry({**mem.summary, "cached": True}, mem.files)
        folder = self._folder(f)
        if folder is None:
            return None
        meta = folder / f"{pkey}.json"
        files = {kind: folder / f"{pkey}.{suffix}" for kind, (suffix, _) in KINDS.items()}
        if not meta.is_file() or not files["overlay"].is_file():
            return None
        try:
            summary = json.loads(meta.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        made: dict[str, Path | bytes] = {k: p for k, p in files.items() if p.is_file()}
        if "overlay" not in made:  # a concurrent prune took it after the check above: a miss
            return None
        return MaskEntry({**summary, "cached": True}, made)

    def _ensure(self, f: IndexedFile, prompt: str, pkey: str) -> MaskEntry:
        """On the mask thread: the cached result, else a new one (a guess may have made it
        while this request waited)."""
        return self._cached(f, pkey) or self._compute(f, prompt, pkey)

    def _result(self, f: IndexedFile, prompt: str, pkey: str) -> tuple[Any, Seen]:
        """On the mask thread: the prompt's mask on the image (a decoder run on its pass)."""
        from wherein.search.localize.masking import image_loader, mask_of

        model = self.model
        seen = self._vision(f, model)
        # Small regions are segmented again on crops of the file (refine.py), as `search --mask`.
        loader = image_loader(f.path, f.time)
        res = mask_of(model, prompt, seen.features, seen.size, image=loader)
        self.decoder_runs += 1
        with self._lock:
            self._results[f"{f.key}/{pkey}"] = res
            while len(self._results) > RECENT_RESULTS:
                self._results.popitem(last=False)
        return res, seen

    def _compute(self, f: IndexedFile, prompt: str, pkey: str) -> MaskEntry:
        res, seen = self._result(f, prompt, pkey)
        summary = {"id": f.id, **res.summary()}
        overlay = res.overlay_jpeg(seen.image)
        folder = self._folder(f)
        if folder is not None:
            path = folder / f"{pkey}.{KINDS['overlay'][0]}"
            meta = folder / f"{pkey}.json"  # last: marks the entry complete
            if self._keep([(path, overlay), (meta, json.dumps(summary).encode())]):
                return MaskEntry({**summary, "cached": False}, {"overlay": path})
        entry = MaskEntry(summary, {"overlay": overlay})
        with self._lock:
            self._memory[f"{f.key}/{pkey}"] = entry
            while len(self._memory) > MEMORY_CACHE:
                self._memory.popitem(last=False)
        return MaskEntry({**summary, "cached": False}, dict(entry.files))

    def _make_png(self, f: IndexedFile, prompt: str, pkey: str) -> Path | bytes:
        """On the mask thread: the mask PNG from the recent result, else from a decoder run."""
        key = f"{f.key}/{pkey}"
        folder = self._folder(f)
        path = folder / f"{pkey}.{KINDS['mask'][0]}" if folder is not None else None
        if path is not None and path.is_file():
            return path  # made while this request waited
        with self._lock:
            res = self._results.get(key)
        if res is None:
            res, _ = self._result(f, prompt, pkey)
        png = res.mask_png()
        if path is not None and self._keep([(path, png)]):
            return path
        with self._lock:
            mem = self._memory.get(key)
            if mem is not None:
                mem.files["mask"] = png
        return png

    def _keep(self, files: list[tuple[Path, bytes]]) -> bool:
        """Write the files in order and tell on_added; False (and memory only from now on)
        when the cache folder cannot be written."""
        try:
            for path, data in files:
                _write_atomic(path, data)
        except OSError:
            self.dir = None  # read-only index: keep results in memory from now on
            return False
        if self.on_added is not None:
            self.on_added([path for path, _ in files])
        return True

    def _vision(self, f: IndexedFile, model) -> Seen:
        from wherein.search.localize.masking import frame_store_key, seen_keyed, seen_stored

        def compute() -> Seen:
            if f.time is not None:  # a video's frame: the store keys it by content and time
                frame = frame_image(f)
                key = frame_store_key(f.time, content=f.sha256)  # as `search --mask` does
                return seen_keyed(model, frame, frame.size, key, self.store)
            data = read_verified(f)
            try:
                image, size = decode(data, draft_size=CLIPSEG_IMAGE_SIZE)
            except DecodeError as exc:
                raise FileChanged(
                    f"image {f.id}: the indexed file no longer decodes ({exc})"
                ) from None
            return seen_stored(model, image, size, data, self.store)

        return self._seen.get(f.key, compute)

    def _image_lock(self, key: str) -> threading.Lock:
        return self._image_locks[hash(key) % IMAGE_LOCK_STRIPES]
