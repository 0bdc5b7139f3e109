"""The SigLIP 2 text tower through open_clip (torch is imported here, and only here).

The real model is open_clip's ViT-B-16-SigLIP2 from the hub directory that
`wherein models pull` writes (open_clip_config.json + weights + tokenizer.json);
stand-ins use the same `local-dir:` loading with open_clip's bundled CLIP BPE.
"""

from __future__ import annotations

import math
import threading
from functools import lru_cache
from pathlib import Path

import numpy as np

from wherein.indexer.models.modeldir import ModelDir
from wherein.schemas.errors import ModelError
from wherein.schemas.models import SIGLIP_TEXT


class CalibratedScores:
    """SigLIP's calibration, shared by the torch and the LiteRT text towers.

    logit_scale here is exp() of the model's parameter, i.e. the multiplier itself.
    """

    logit_scale: float
    logit_bias: float

    def probability(self, cosine: np.ndarray | float) -> np.ndarray:
        """SigLIP's calibrated sigmoid: p = sigmoid(exp(logit_scale) * cos + logit_bias)."""
        z = self.logit_scale * np.asarray(cosine, dtype=np.float64) + self.logit_bias
        return 1.0 / (1.0 + np.exp(-z))

    def cosine_for_probability(self, p: float) -> float:
        """The cosine at which the calibrated probability equals p (for thresholds)."""
        p = min(max(p, 1e-9), 1 - 1e-9)
        return (math.log(p / (1 - p)) - self.logit_bias) / self.logit_scale


class TextTower(CalibratedScores):
    def __init__(self, directory: Path, space: str) -> None:
        import open_clip
        import torch

        cfg = directory / "open_clip_config.json"
        if not cfg.is_file():
            raise ModelError(f"{cfg}: text tower config not found (run `wherein models pull`)")
        torch.set_num_threads(max(1, torch.get_num_threads()))
        try:
            model = open_clip.create_model(f"local-dir:{directory}", device="cpu")
            self.tokenizer = open_clip.get_tokenizer(f"local-dir:{directory}")
        except Exception as exc:  # open_clip raises many kinds; all mean "this dir is not a model"
            raise ModelError(f"{directory}: cannot load the text tower ({exc})") from exc
        # Images go through LiteRT; the torch vision tower would only cost memory.
        if hasattr(model, "visual"):
            model.visual = None
        model.eval()
        self.model = model
        self.space = space
        if getattr(model, "logit_bias", None) is None:
            raise ModelError(
                f"{directory}: not a SigLIP model (no logit_bias for calibrated scores)"
            )
        self.logit_scale = float(model.logit_scale.detach().exp())
        self.logit_bias = float(model.logit_bias.detach())
        self._lock = threading.Lock()
        self.dim = int(self.encode(["a"]).shape[1])

    @classmethod
    def from_models(cls, models: ModelDir) -> TextTower:
        models.require(SIGLIP_TEXT, models.text_dir)
        return cls(models.text_dir, models.space)

    def encode(self, texts: list[str]) -> np.ndarray:
        """[n, dim] L2-normalised, in the image tower's space."""
        import torch

        with self._lock, torch.inference_mode():
            tokens = self.tokenizer(list(texts))
            out = self.model.encode_text(tokens, normalize=True)
        return out.float().numpy()


@lru_cache(maxsize=4)
def load_text_tower(root: str) -> TextTower:
    """One text tower per process and models dir, loaded on first use."""
    return TextTower.from_models(ModelDir(Path(root)))
