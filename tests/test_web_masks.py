"""The web app's mask service: model work stays on one thread, whichever request threads ask."""

from __future__ import annotations

import hashlib
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from wherein.indexer.models.clipseg import ClipSeg
from wherein.indexer.models.modeldir import ModelDir
from wherein.search.web.files import IndexedFile
from wherein.search.web.masks import MaskService

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
