"""The web app's mask service: model work stays on one thread, whichever request threads ask."""

from __future__ import annotations

import hashlib
import io
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from wherein.indexer.indexed import IndexedFile
from wherein.indexer.models.clipseg import ClipSeg
from wherein.indexer.models.modeldir import ModelDir
from wherein.search.service import mask as M
from wherein.search.service.mask import MaskSession as MaskService

from conftest import draw_shape


class Recording:
    """A model that notes the thread of every call (a LiteRT graph loads once per thread)."""

    def __init__(self, model: ClipSeg) -> None:
        self.model = model
        self.threads: set[int] = set()

    def _note(self) -> None:
        self.threads.add(threading.get_ident())

    def image_features(self, img):
        self._note()
        return self.model.image_features(img)

    def encode_prompt(self, prompt):
        self._note()
        return self.model.encode_prompt(prompt)

    def decode(self, feats, cond):
        self._note()
        return self.model.decode(feats, cond)


def indexed(path, image_id: int) -> IndexedFile:
    st = path.stat()
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    return IndexedFile(
        image_id, str(path), st.st_size, st.st_mtime_ns, sha, None, None, "png", None
    )


@pytest.fixture()
def service(standin_models, tmp_path):
    rec = Recording(ClipSeg.load(ModelDir(standin_models), num_threads=1))

    class Service(MaskService):
        model = property(lambda self: rec)

    return Service(standin_models, tmp_path / "cache"), rec


def test_masks_for_many_request_threads_run_on_one_thread(service, tmp_path):
    svc, rec = service
    files = []
    for i, colour in enumerate(["red", "blue", "green"], start=1):
        draw_shape(tmp_path / f"{colour}.png", colour)
        files.append(indexed(tmp_path / f"{colour}.png", i))
    jobs = [(f, p) for f in files for p in ("red", "blue")]
    callers: set[int] = set()

    def ask(job):
        callers.add(threading.get_ident())
        return svc.get(*job)

    with ThreadPoolExecutor(4) as pool:
        entries = list(pool.map(ask, jobs))
    assert len(callers) > 1  # the requests did come from several threads
    assert len(rec.threads) == 1 and not rec.threads & callers
    assert svc.vision_passes == 3 and svc.decoder_runs == 6
    areas = {(e.summary["id"], e.summary["prompt"]): e.summary["mask_area"] for e in entries}
    assert areas[(1, "red")] > 0.3 and areas[(1, "blue")] < 0.01 and areas[(2, "blue")] > 0.3


def white_fraction(png) -> float:
    data = png.read_bytes() if isinstance(png, Path) else png
    return float((np.asarray(Image.open(io.BytesIO(data)).convert("L")) > 127).mean())


@pytest.mark.parametrize("writable", [True, False])
def test_the_mask_png_is_made_when_first_asked_for(standin_models, tmp_path, writable):
    draw_shape(tmp_path / "red.png", "red")
    f = indexed(tmp_path / "red.png", 1)
    svc = MaskService(standin_models, tmp_path / "cache" if writable else None)
    try:
        entry = svc.get(f, "red")
        assert "mask" not in entry.files  # the overlay and the figures only
        if writable:
            assert not list((tmp_path / "cache").glob("*/*.mask.png"))
        png, cached = svc.mask_png(f, "red")
        assert not cached and svc.decoder_runs == 1  # made from the kept result
        assert abs(white_fraction(png) - entry.summary["mask_area"]) < 1e-6
        again, cached = svc.mask_png(f, "red")
        assert cached and white_fraction(again) == white_fraction(png)
        # Made long after the mask, once its result is no longer kept: a decoder run again.
        svc.get(f, "blue")
        for i in range(M.RECENT_RESULTS):
            svc.get(f, f"green {i}")
        blue, _ = svc.mask_png(f, "blue")
        assert white_fraction(blue) < 0.01 and svc.vision_passes == 1
        assert svc.decoder_runs == 2 + M.RECENT_RESULTS + 1
    finally:
        svc.close()
