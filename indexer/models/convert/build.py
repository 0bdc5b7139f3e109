"""Convert SigLIP 2 towers to LiteRT: batched, fp16 or int8 image towers and the text tower.

Each output graph is checked against its PyTorch reference before its manifest
is written, and the figures go into the manifest; `wherein models verify`
repeats the check later. Layout written under a models directory OUT:

    OUT/siglip2-image/siglip2_image_<precision>_b<batches>.tflite + manifest.json
    OUT/siglip2-text/text_tower.tflite + manifest.json (+ tokenizer file)

Signatures: `serving_default` is batch 1 (args_0 [1,3,224,224] -> output_0 [1,768],
like the published file); every other batch b is `batch_<b>`. Precision:
fp32; fp16 = fp16 weights (ai-edge-quantizer float casting, as the published
file); int8 = dynamic-range int8 weights with int8 compute (ai-edge-quantizer
dynamic_wi8_afp32), activations quantized on the fly.

Needs litert-torch and ai-edge-quantizer (base dependencies); imported lazily.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np

from wherein.indexer.models.convert.quiet import quiet
from wherein.indexer.models.convert.towers import (
    B16,
    Source,
    Target,
    image_module,
    state_digest,
    text_module,
)
from wherein.indexer.models.image_tower import file_digest
from wherein.schemas.errors import ModelError
from wherein.schemas.models import SIGLIP_IMAGE, SIGLIP_IMAGE_SIZE, SIGLIP_TEXT

PRECISIONS = ("fp32", "fp16", "int8")
MANIFEST = "manifest.json"
FORMAT = "wherein-converted-tower/1"
TEXT_GRAPH = "text_tower.tflite"
# Pass marks for a converted graph against its PyTorch reference.
MIN_CORR = {"fp32": 0.9999, "fp16": 0.9999, "int8": 0.99}
MIN_TOP10 = {"fp32": 0.0, "fp16": 0.0, "int8": 0.9}
PARITY_COUNT = 16  # inputs compared at conversion time (top-10 needs > 10)


def signature_name(batch: int) -> str:
    return "serving_default" if batch == 1 else f"batch_{batch}"


# The converters were the [convert] extra; they are base dependencies now (pyproject.toml).
INSTALL_CONVERTERS = "pip install 'litert-torch>=0.10' ai-edge-quantizer"


def need_convert_extra() -> None:
    import importlib.util

    missing = [
        m for m in ("litert_torch", "ai_edge_quantizer") if importlib.util.find_spec(m) is None
    ]
    if missing:
        raise ModelError(
            f"conversion needs {', '.join(missing)} (base dependencies of wherein, missing from "
            f"this install): {INSTALL_CONVERTERS}"
        )


def tool_versions() -> dict[str, str]:
    out = {}
    for dist in (
        "litert-torch",
        "ai-edge-quantizer",
        "ai-edge-litert",
        "torch",
        "timm",
        "open-clip-torch",
    ):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[dist] = metadata.version(dist)
    return out


# -- inputs and figures ----------------------------------------------------------
def random_images(n: int, seed: int = 0, size: int = SIGLIP_IMAGE_SIZE) -> np.ndarray:
    """Model-space inputs with varied content: random colour grids plus noise.

    Plain noise makes every image look alike to a model, so neighbour rankings
    would be arbitrary; blocks of colour at varied grain spread the embeddings.
    """
    rng = np.random.default_rng(seed)
    out = np.empty((n, 3, size, size), np.float32)
    for i in range(n):
        g = int(rng.choice([1, 2, 4, 7, 8, 14]))
        grid = rng.uniform(-1, 1, (3, g, g)).astype(np.float32)
        cell = -(-size // g)  # a grid that does not divide the size is cut at its edge
        img = np.repeat(np.repeat(grid, cell, axis=1), cell, axis=2)[:, :size, :size]
        out[i] = np.clip(img + rng.normal(0, 0.1, img.shape), -1, 1)
    return out


@dataclass
class Parity:
    pearson: float
    max_abs_diff: float
    top10: float  # mean overlap of each item's 10 nearest neighbours, reference vs graph
    n: int

    def to_json(self) -> dict:
        return {
            "pearson": round(self.pearson, 8),
            "max_abs_diff": float(f"{self.max_abs_diff:.3g}"),
            "top10_agreement": round(self.top10, 4),
            "n": self.n,
        }

    def failures(self, precision: str) -> list[str]:
        bad = []
        if not self.pearson >= MIN_CORR[precision]:
            bad.append(f"correlation {self.pearson:.6f} < {MIN_CORR[precision]}")
        if not self.top10 >= MIN_TOP10[precision]:
            bad.append(f"top-10 agreement {self.top10:.3f} < {MIN_TOP10[precision]}")
        return bad


def top_k_agreement(ref: np.ndarray, got: np.ndarray, k: int = 10) -> float:
    n = len(ref)
    k = min(k, n - 1)
    if k < 1:
        return 1.0

    def neighbours(e: np.ndarray) -> np.ndarray:
        s = e @ e.T
        np.fill_diagonal(s, -np.inf)
        return np.argsort(-s, axis=1)[:, :k]

    a, b = neighbours(ref), neighbours(got)
    return float(np.mean([len(set(a[i]) & set(b[i])) / k for i in range(n)]))


def parity(ref: np.ndarray, got: np.ndarray) -> Parity:
    ref = np.asarray(ref, np.float64)
    got = np.asarray(got, np.float64)
    if ref.shape != got.shape:
        raise ModelError(f"output shape {got.shape} differs from the reference {ref.shape}")
    corr = float(np.corrcoef(ref.ravel(), got.ravel())[0, 1])
    return Parity(corr, float(np.abs(ref - got).max()), top_k_agreement(ref, got), len(ref))


def torch_embed(module, x: np.ndarray, batch: int = 8) -> np.ndarray:
    import torch

    outs = []
    with torch.inference_mode():
        for i in range(0, len(x), batch):
            outs.append(module(torch.from_numpy(x[i : i + batch])).float().numpy())
    return np.concatenate(outs)


def litert_embed(graph, signature: str, x: np.ndarray) -> np.ndarray:
    """Run one image signature over all of x (the tail zero-padded): each signature is checked on its own."""
    return graph.run_batched(x, signature)


# -- conversion ------------------------------------------------------------------
def _export(signatures: list[tuple[str, object, tuple]], path: Path) -> None:
    with quiet():  # litert-torch's progress tree and the C++ converter logs
        import litert_torch

        conv = litert_torch.Converter()
        for name, module, args in signatures:
            conv.signature(name, module, args)
        conv.convert().export(str(path))


def reduce_precision(src: Path, dst: Path, precision: str) -> None:
    from ai_edge_quantizer import qtyping, quantizer
    from ai_edge_quantizer.algorithm_manager import AlgorithmName

    q = quantizer.Quantizer(str(src))
    if precision == "int8":
        # Linear and conv layers only: they hold ~all weights and FLOPs; int8 BATCH_MATMUL
        # (attention with a constant operand, e.g. the MAP probe) fails to prepare in LiteRT 2.3.
        for op in (qtyping.TFLOperationName.FULLY_CONNECTED, qtyping.TFLOperationName.CONV_2D):
            q.add_dynamic_config(regex=".*", operation_name=op, num_bits=8)
    elif precision == "fp16":
        q.add_weight_only_config(
            regex=".*",
            operation_name=qtyping.TFLOperationName.ALL_SUPPORTED,
            num_bits=16,
            algorithm_key=AlgorithmName.FLOAT_CASTING,
        )
    else:
        raise ValueError(precision)
    with quiet():
        q.quantize(enable_progress_bar=False, enable_progress_report=False).export_model(
            str(dst), overwrite=True
        )


def _write_graph(signatures, final: Path, precision: str) -> None:
    """Export fp32, reduce precision if asked, then move into place (never a half-written file)."""
    tmp = final.with_name(final.name + ".fp32.tmp")
    try:
        _export(signatures, tmp)
        if precision == "fp32":
            tmp.replace(final)
        else:
            out = final.with_name(final.name + ".tmp")
            reduce_precision(tmp, out, precision)
            out.replace(final)
    finally:
        tmp.unlink(missing_ok=True)
        final.with_name(final.name + ".tmp").unlink(missing_ok=True)


def image_file_name(precision: str, batches: list[int], prefix: str = B16.file_prefix) -> str:
    return f"{prefix}_{precision}_b{'-'.join(str(b) for b in batches)}.tflite"


def normalise_batches(batches: list[int]) -> list[int]:
    if any(b < 1 or b > 256 for b in batches):
        raise ModelError("batch sizes must be between 1 and 256")
    # Batch 1 is the published contract (and the indexer's tail): always present.
    return sorted({1, *batches})


def convert_image_tower(
    source: Source,
    out_root: Path,
    batches: list[int],
    precision: str = "fp32",
    parity_count: int = PARITY_COUNT,
    log: Callable[[str], None] = print,
    target: Target = B16,
) -> dict:
    """Convert, check against torch, write graph + manifest into OUT/<the family's image
    folder> (siglip2-image); return the manifest."""
    import torch

    from wherein.indexer.models.litert_graph import LiteRTGraph

    need_convert_extra()
    if precision not in PRECISIONS:
        raise ModelError(f"precision must be one of {', '.join(PRECISIONS)}")
    batches = normalise_batches(batches)
    out_dir = Path(out_root) / target.image_folder
    if source.kind == "random" and _holds_trained_tower(out_dir):
        # The manifest would win over the real tower and the index would fill with noise.
        raise ModelError(
            f"{out_dir} holds a trained image tower; write random-weight towers elsewhere"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    log(f"building the torch tower: {source.describe()}")
    module = image_module(source, target)
    digest = state_digest(module)
    size = target.size
    sigs = [(signature_name(b), module, (torch.zeros(b, 3, size, size),)) for b in batches]
    final = out_dir / image_file_name(precision, batches, target.file_prefix)
    t0 = time.perf_counter()
    log(f"converting {', '.join(s[0] for s in sigs)} ({precision}) -> {final}")
    _write_graph(sigs, final, precision)
    seconds = time.perf_counter() - t0
    x = random_images(parity_count, seed=1234, size=size)
    ref = torch_embed(module, x)
    graph = LiteRTGraph(final, None)
    figures, problems = {}, []
    for name, _, _ in sigs:
        p = parity(ref, litert_embed(graph, name, x))
        figures[name] = p.to_json()
        problems += [f"{name}: {f}" for f in p.failures(precision)]
        log(
            f"  {name}: corr {p.pearson:.6f}, max |diff| {p.max_abs_diff:.2e}, top-10 {p.top10:.3f}"
        )
    if problems:
        final.unlink(missing_ok=True)
        raise ModelError(
            f"converted graph does not match PyTorch ({'; '.join(problems)}); not written"
        )
    manifest = {
        "format": FORMAT,
        "model": target.image_folder,
        "file": final.name,
        "sha256": file_digest(final),
        "source": {**source.to_json(), "state_digest": digest},
        "standin": source.kind == "standin",
        "precision": precision,
        "signatures": {
            signature_name(b): {
                "batch": b,
                "inputs": {"args_0": [b, 3, size, size]},
                "outputs": {"output_0": [b, target.dim]},
            }
            for b in batches
        },
        "output": "L2-normalised",
        "parity": {
            "inputs": f"{parity_count} random colour-grid images (seed 1234)",
            "figures": figures,
        },
        "convert_seconds": round(seconds, 1),
        "tools": tool_versions(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    _write_manifest(out_dir / MANIFEST, manifest)
    log(f"wrote {final.name} ({final.stat().st_size / 1e6:.1f} MB) and {MANIFEST}")
    return manifest


def _holds_trained_tower(image_dir: Path) -> bool:
    if (image_dir / SIGLIP_IMAGE.graphs[0].filename).is_file():
        return True
    manifest = image_dir / MANIFEST
    if manifest.is_file():
        try:
            return json.loads(manifest.read_text()).get("source", {}).get("kind") != "random"
        except ValueError:
            return True
    return False


def _write_manifest(path: Path, manifest: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    tmp.replace(path)


# -- text tower ------------------------------------------------------------------
PROBE_TEXTS = [
    "a",
    "",
    "a red square",
    "This is a photo of a dog.",
    "a T-shirt.",
    "Café &amp; crème brûlée",
    "  MIXED   case\tand  spaces ",
    "snake_case words and 3 numbers 42",
    "don't stop-believing!",
    "a very long query " + " ".join(f"word{i}" for i in range(80)),
]


def tokenizer_recipe(source: Source, out_dir: Path) -> dict:
    """The torch-free tokenizer recipe for this model, its file copied into out_dir."""
    cfg_dir = Path(source.ref) if source.kind == "local-dir" else None
    if cfg_dir is None:  # hub: the config and tokenizer.json come from the hub cache
        from huggingface_hub import hf_hub_download

        repo = source.ref[len("hf-hub:") :]
        cfg_path = Path(hf_hub_download(repo, "open_clip_config.json"))
        tok_path = Path(hf_hub_download(repo, "tokenizer.json"))
    else:
        cfg_path = cfg_dir / "open_clip_config.json"
        tok_path = cfg_dir / "tokenizer.json"
    text_cfg = json.loads(cfg_path.read_text())["model_cfg"]["text_cfg"]
    clean = text_cfg.get("tokenizer_kwargs", {}).get("clean")
    ctx = int(text_cfg.get("context_length", 77))
    if text_cfg.get("hf_tokenizer_name"):
        if not tok_path.is_file():
            raise ModelError(
                f"{tok_path}: tokenizer.json not found (needed for a torch-free query path)"
            )
        kind, src_file, clean = "hf", tok_path, clean or "whitespace"
    else:
        from wherein.indexer.models.clip_bpe import open_clip_bpe_file

        kind, src_file, clean = "clip-bpe", open_clip_bpe_file(), clean or "lower"
    dst = out_dir / src_file.name
    if src_file.resolve() != dst.resolve():
        shutil.copyfile(src_file, dst)
    return {"kind": kind, "file": dst.name, "clean": clean, "context_length": ctx, "pad_id": 0}


def _special_ids(reference, recipe: dict, out_dir: Path) -> tuple[list[int], list[int]]:
    """Read the prefix/suffix special ids off open_clip's own tokenizer ('a photo')."""
    from wherein.indexer.models.text_tower_litert import QueryTokenizer

    probe = "a photo"
    ref = [int(t) for t in reference([probe])[0].tolist()]
    while ref and ref[-1] == recipe["pad_id"]:
        ref.pop()
    content = QueryTokenizer(out_dir, {**recipe, "prefix": [], "suffix": []}).content.encode(probe)
    for start in range(len(ref) - len(content) + 1):
        if ref[start : start + len(content)] == content:
            return ref[:start], ref[start + len(content) :]
    raise ModelError(
        f"torch-free tokenizer disagrees with open_clip on {probe!r}: {content} vs {ref}"
    )


def convert_text_tower(
    source: Source,
    out_root: Path,
    precision: str = "fp32",
    log: Callable[[str], None] = print,
    folder: str = SIGLIP_TEXT.key,
) -> dict:
    """Convert the text tower to OUT/<folder>/text_tower.tflite + manifest.json (folder: the
    family's text folder, siglip2-text)."""
    import open_clip
    import torch

    from wherein.indexer.models.text_tower_litert import LiteRTTextTower, QueryTokenizer

    need_convert_extra()
    if precision not in PRECISIONS:
        raise ModelError(f"precision must be one of {', '.join(PRECISIONS)}")
    out_dir = Path(out_root) / folder
    out_dir.mkdir(parents=True, exist_ok=True)
    log(f"building the torch text tower: {source.describe()}")
    module, scale, bias, ctx = text_module(source)
    name = source.ref if source.kind == "hub" else f"local-dir:{source.ref}"
    reference_tok = open_clip.get_tokenizer(name)
    recipe = tokenizer_recipe(source, out_dir)
    recipe["context_length"] = ctx
    recipe["prefix"], recipe["suffix"] = _special_ids(reference_tok, recipe, out_dir)
    ours = QueryTokenizer(out_dir, recipe)(PROBE_TEXTS)
    theirs = reference_tok(PROBE_TEXTS).numpy()
    bad = [t for t, a, b in zip(PROBE_TEXTS, ours, theirs, strict=True) if not np.array_equal(a, b)]
    if bad:
        raise ModelError(f"torch-free tokenizer disagrees with open_clip on {bad[0]!r}")
    final = out_dir / TEXT_GRAPH
    t0 = time.perf_counter()
    log(f"converting serving_default [1,{ctx}] tokens ({precision}) -> {final}")
    _write_graph(
        [("serving_default", module, (torch.zeros(1, ctx, dtype=torch.long),))], final, precision
    )
    seconds = time.perf_counter() - t0
    with torch.inference_mode():
        ref = module(torch.from_numpy(theirs)).float().numpy()
    manifest = {
        "format": FORMAT,
        "model": folder,
        "file": final.name,
        "sha256": file_digest(final),
        "source": {**source.to_json(), "state_digest": state_digest(module)},
        "precision": precision,
        "signatures": {
            "serving_default": {
                "batch": 1,
                "inputs": {"args_0": [1, ctx]},
                "outputs": {"output_0": [1, int(ref.shape[1])]},
            }
        },
        "output": "L2-normalised",
        "tokenizer": recipe,
        "logit_scale": scale,  # already exp'd: p = sigmoid(logit_scale * cos + logit_bias)
        "logit_bias": bias,
        "convert_seconds": round(seconds, 1),
        "tools": tool_versions(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    _write_manifest(out_dir / MANIFEST, manifest)
    got = LiteRTTextTower(out_dir, "check").encode_tokens(theirs)
    p = parity(ref, got)
    problems = p.failures(precision)
    manifest["parity"] = {
        "inputs": f"{len(PROBE_TEXTS)} probe texts",
        "figures": {"serving_default": p.to_json()},
    }
    log(f"  serving_default: corr {p.pearson:.6f}, max |diff| {p.max_abs_diff:.2e}")
    if problems:
        final.unlink(missing_ok=True)
        (out_dir / MANIFEST).unlink(missing_ok=True)
        raise ModelError(
            f"converted text graph does not match PyTorch ({'; '.join(problems)}); not written"
        )
    _write_manifest(out_dir / MANIFEST, manifest)
    log(f"wrote {final.name} ({final.stat().st_size / 1e6:.1f} MB) and {MANIFEST}")
    return manifest
