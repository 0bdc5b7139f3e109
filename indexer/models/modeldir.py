"""A models directory: layout, which files are real or stand-ins, and downloads.

MODELS/
  siglip2-image/siglip2_base_224_fp16.tflite   litert-community/SigLIP2-base-patch16-224
  siglip2-text/open_clip_config.json, open_clip_model.safetensors, tokenizer files
                                              timm/ViT-B-16-SigLIP2
  clipseg/clipseg_{text,vision}_fp16.tflite, clipseg_decoder.tflite,
          token_embedding_f16.bin, text_projection_f16.bin, vocab.json, merges.txt
                                              litert-community/CLIPSeg-rd64-LiteRT
  STANDIN.json                                only in stand-in directories
  MODEL.json                                  {"model": KEY, "space": ..., "folders": {"image":
                                              ..., "text": ...}}: another registered model
                                              family (indexer/models/registry.py), whose
                                              entry's layout names those folders
"""

from __future__ import annotations

import functools
import json
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from wherein.schemas.errors import ModelError
from wherein.schemas.models import (
    ALL_MODELS,
    CLIPSEG,
    MODEL_MARKER,
    SIGLIP_IMAGE,
    SIGLIP_TEXT,
    STANDIN_MARKER,
    ModelSpec,
)

REAL_SPACE = "siglip2-vit-b16-webli"
STANDIN_SPACE_PREFIX = "wherein-standin"  # e.g. "wherein-standin-colour-v1" (standins/)
IMAGE_MANIFEST = "manifest.json"  # written by `wherein models convert` / `models optimize`
CLIPSEG_MANIFEST = "manifest.json"  # written by `wherein models optimize`
# Set in the image tower's optimize record when it was verified on the bundled sample (the
# index was empty): the first `wherein index` verifies it again on the user's photos.
REVERIFY = "reverify_on_photos"


class ShortText(NamedTuple):
    """CLIPSeg's text graph cut to `length` token positions (exact for prompts that fit)."""

    path: Path
    length: int


def is_standin_space(space: str | None) -> bool:
    """Whether vectors in this embedding space come from the stand-in models (a catalog's
    ``space`` meta; "standin" is what a STANDIN.json without a space says)."""
    return bool(space) and (space == "standin" or str(space).startswith(STANDIN_SPACE_PREFIX))


def file_stamp(path: Path) -> list[int]:
    """[size, mtime_ns]: a file replaced since it was verified no longer matches."""
    st = path.stat()
    return [st.st_size, st.st_mtime_ns]


@functools.lru_cache(maxsize=64)
def _read_marker(path: str, *stamp: int) -> dict:
    """A marker's JSON, kept per state of the file (stamp: its inode, size, mtime, ctime)."""
    return json.loads(Path(path).read_text())


@dataclass(frozen=True)
class ModelDir:
    root: Path

    def _folder(self, side: str, default: str) -> Path:
        """A side's folder: the family's own (MODEL.json), else SigLIP 2 B/16's layout."""
        folders = (self.model_info or {}).get("folders") or {}
        name = folders.get(side) if isinstance(folders, dict) else None
        if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
            name = default
        return self.root / name

    @property
    def image_dir(self) -> Path:
        return self._folder("image", SIGLIP_IMAGE.key)

    @property
    def text_dir(self) -> Path:
        return self._folder("text", SIGLIP_TEXT.key)

    @property
    def clipseg_dir(self) -> Path:
        return self.root / CLIPSEG.key

    def _marker(self, name: str) -> dict | None:
        """The marker file's JSON (None: no such file). Read again only when the file
        changed: a long-running search (the web app) asks for the space and the stand-in
        marker on every search. Callers only read it."""
        marker = self.root / name
        try:
            st = marker.stat()
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        return _read_marker(str(marker), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    @property
    def standin_info(self) -> dict | None:
        return self._marker(STANDIN_MARKER)

    @property
    def is_standin(self) -> bool:
        return self.standin_info is not None

    @property
    def model_info(self) -> dict | None:
        return self._marker(MODEL_MARKER)

    @property
    def model_key(self) -> str:
        """The registry key of the embedding model held here (indexer/models/registry.py)."""
        info = self.model_info
        if info and info.get("model"):
            return str(info["model"])
        return "standin" if self.is_standin else "siglip2"

    @property
    def space(self) -> str:
        """The embedding space: image vectors and text queries must share it."""
        info = self.model_info or self.standin_info
        if info is None:
            return REAL_SPACE
        return str(info.get("space", "standin" if self.is_standin else self.model_key))

    def image_tower_file(self) -> Path:
        """The image tower graph: a converted tower's manifest wins over the published file."""
        manifest = self.image_dir / IMAGE_MANIFEST
        if manifest.is_file():
            name = json.loads(manifest.read_text()).get("file")
            if name:
                return self.image_dir / name
        published = self.image_dir / SIGLIP_IMAGE.graphs[0].filename
        if published.is_file():
            return published
        candidates = sorted(self.image_dir.glob("*.tflite"))
        if len(candidates) == 1:
            return candidates[0]
        raise ModelError(
            f"{published}: image tower not found (run `wherein models pull`, or point --models at a models directory)"
        )

    def image_reverify_pending(self) -> bool:
        """The int8 image tower in use was verified on the bundled sample only."""
        manifest = self.image_dir / IMAGE_MANIFEST
        try:
            data = json.loads(manifest.read_text()) if manifest.is_file() else {}
        except (OSError, ValueError):
            return False  # loading the tower names the broken manifest
        record = data.get("optimize", {})
        return bool(
            record.get(REVERIFY)
            and record.get("passed")
            and data.get("file") == record.get("candidate")
        )

    def clipseg_vision_file(self) -> Path:
        """CLIPSeg's vision graph: an optimized one when clipseg/manifest.json says it passed."""
        published = self.clipseg_dir / CLIPSEG.graphs[0].filename
        manifest = self.clipseg_dir / CLIPSEG_MANIFEST
        if manifest.is_file():
            try:
                vision = json.loads(manifest.read_text()).get("vision", {})
            except ValueError as exc:
                raise ModelError(f"{manifest}: unreadable manifest ({exc})") from exc
            if vision.get("passed") and vision.get("file"):
                chosen = self.clipseg_dir / vision["file"]
                if not chosen.is_file():
                    raise ModelError(
                        f"{chosen}: named by {manifest.name} but missing "
                        "(re-run `wherein models optimize`, or delete the manifest)"
                    )
                return chosen
        return published

    def clipseg_text_short(self) -> ShortText | None:
        """The short text graph `models optimize` verified, if it still fits the text graph.

        Used only while both files are the ones verified: the manifest's stamps (size and
        mtime) of the 77-position graph and of the short graph match the files on disk.
        Stamps, not digests: hashing both graphs (~150 MB) would cost more than the short
        graph saves on a one-prompt search; `models optimize` and `models check` compare
        digests. Anything else (no manifest, failed, stale, missing): None, the 77 graph.
        """
        manifest = self.clipseg_dir / CLIPSEG_MANIFEST
        if not manifest.is_file():
            return None
        try:
            rec = json.loads(manifest.read_text()).get("text_short", {})
        except ValueError as exc:
            raise ModelError(f"{manifest}: unreadable manifest ({exc})") from exc
        if not (rec.get("passed") and rec.get("file") and rec.get("length")):
            return None
        if rec.get("from") != CLIPSEG.graphs[1].filename:  # cut from another text graph
            return None
        path, source = self.clipseg_dir / rec["file"], self.clipseg_dir / rec["from"]
        stamps = rec.get("stamps", {})
        try:
            fresh = stamps.get("file") == file_stamp(path) and stamps.get("from") == file_stamp(
                source
            )
        except OSError:
            return None
        return ShortText(path, int(rec["length"])) if fresh else None

    def require(self, spec: ModelSpec, d: Path | None = None) -> Path:
        """spec's folder (d: where this directory's layout puts it), or a one-line error."""
        d = self.root / spec.key if d is None else d
        if not d.is_dir():
            raise ModelError(
                f"{d}: {spec.title} not found (run `wherein models pull`, or point --models / WHEREIN_MODELS at a models directory)"
            )
        return d


def pull(
    root: Path,
    keys: list[str] | None = None,
    revision: str | None = None,
    specs: Sequence[ModelSpec] = ALL_MODELS,
) -> list[Path]:
    """Download specs (those named by keys) from the Hugging Face Hub into root/<spec.key>
    (resumable, with progress); a spec without a hub repository is built, not downloaded.

    Offline (HF_HUB_OFFLINE=1, or no network), a model already in the Hugging Face cache
    (HF_HOME / HF_HUB_CACHE, e.g. from an earlier open_clip run) is copied from there:
    snapshot_download with local_dir never looks in that cache.
    """
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    chosen = [m for m in specs if (keys is None or m.key in keys) and m.hub_repo]
    written = []
    for spec in chosen:
        target = root / spec.key
        patterns = list(spec.hub_files) or None
        try:
            try:
                snapshot_download(
                    repo_id=spec.hub_repo,
                    allow_patterns=patterns,
                    local_dir=target,
                    revision=revision,
                )
            except LocalEntryNotFoundError:
                cached = snapshot_download(
                    repo_id=spec.hub_repo,
                    allow_patterns=patterns,
                    revision=revision,
                    local_files_only=True,
                )
                _copy_snapshot(Path(cached), target, patterns)
        except (LocalEntryNotFoundError, HfHubHTTPError, OSError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ModelError(
                f"could not download {spec.hub_repo} into {target}: {first} "
                "(offline? set HF_ENDPOINT or copy the files into that directory)"
            ) from exc
        written.append(target)
    marker = root / STANDIN_MARKER
    if marker.exists() and {m.key for m in chosen} >= {m.key for m in ALL_MODELS}:
        marker.unlink()  # the directory now holds real models
    return written


def _copy_snapshot(snapshot: Path, target: Path, patterns: list[str] | None) -> None:
    """The snapshot's files (cache symlinks resolved) into target, each written whole."""
    import fnmatch
    import shutil

    for src in sorted(p for p in snapshot.rglob("*") if p.is_file()):
        rel = src.relative_to(snapshot).as_posix()
        if patterns and not any(fnmatch.fnmatch(rel, pat) for pat in patterns):
            continue
        dst = target / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_name(f".{dst.name}.tmp")
        shutil.copyfile(src, tmp)  # follows the cache's symlink to its blob
        tmp.replace(dst)
