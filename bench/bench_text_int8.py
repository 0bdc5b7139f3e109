"""Would an int8 text tower change what users see? fp32 against int8, on what they rely on.

    .venv/bin/python bench/bench_text_int8.py --fp32 DIR/models/siglip2-text \
        --int8 INT8_DIR --image DIR/models/siglip2-image/siglip2_image_int8_b1-8.tflite

--fp32 and --int8 are text folders (text_tower.tflite + manifest.json + tokenizer), as
`wherein models convert siglip2-text [--precision int8]` writes them (or the fp32 graph
made int8 with `models optimize`'s make_int8 and its manifest copied). --image is the
image tower that embeds the bundled sample photos (32).

Prints, for sample prompts (the optimize gate's common subjects and fixed prompts, the
converter's probe texts, the sample's captions):
- the cosine of each prompt's fp32 and int8 vectors (the query vectors' agreement);
- max |d cos| over prompt x image pairs, and whether each prompt's best image is the same;
- the calibrated probability p = sigmoid(scale*cos + bias) that `-p` cuts on: max |dp| and
  decisions flipped at -p 0.1/0.3/0.5, with the manifest's scale and bias, and with the
  bias moved so the sample's median pair sits at p = 0.5 (every cut-off then has pairs
  near it; with random weights the manifest's calibration puts every pair near p = 0,
  so its "no decision flipped" cannot fail). Scale 117 is a what-if for a trained tower.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from wherein.indexer.imaging import siglip_input
from wherein.indexer.models.convert.build import PROBE_TEXTS, litert_embed
from wherein.indexer.models.litert_graph import LiteRTGraph
from wherein.indexer.models.optimize.compare import FIXED_PROMPTS
from wherein.indexer.models.optimize.inputs import COMMON_PROMPTS, bundled_sample
from wherein.indexer.models.text_tower_litert import LiteRTTextTower

CUTS = (0.1, 0.3, 0.5)


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-z))


def decisions(ca: np.ndarray, cb: np.ndarray, scale: float, bias: float) -> dict:
    pa, pb = sigmoid(scale * ca + bias), sigmoid(scale * cb + bias)
    return {
        "scale": round(scale, 2),
        "bias": round(bias, 3),
        "p_fp32": [float(pa.min()), float(pa.max())],
        "max_abs_dp": float(np.abs(pa - pb).max()),
        "cuts": {
            str(c): {
                "fp32_hits": int((pa >= c).sum()),
                "flips": int(((pa >= c) != (pb >= c)).sum()),
            }
            for c in CUTS
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fp32", type=Path, required=True)
    ap.add_argument("--int8", type=Path, required=True)
    ap.add_argument("--image", type=Path, required=True)
    args = ap.parse_args()
    fp, q8 = LiteRTTextTower(args.fp32, "fp32"), LiteRTTextTower(args.int8, "int8")
    sample = bundled_sample(32)
    captions = [q for per_image in sample.prompts for q in per_image]
    prompts = list(dict.fromkeys([*COMMON_PROMPTS, *FIXED_PROMPTS, *PROBE_TEXTS, *captions]))
    t = time.perf_counter()
    a = fp.encode(prompts)
    fp_s = time.perf_counter() - t
    t = time.perf_counter()
    b = q8.encode(prompts)
    q8_s = time.perf_counter() - t
    graph = LiteRTGraph(args.image)
    size = graph.signatures["serving_default"].input_shapes[0][-1]
    x = np.stack([siglip_input(im, size) for im in sample.images]).astype(np.float32)
    v = litert_embed(graph, "serving_default", x)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    ca, cb = a @ v.T, b @ v.T
    same = (a * b).sum(1)
    scale, bias = fp.logit_scale, fp.logit_bias
    centre = float(np.median(ca))
    out = {
        "prompts": len(prompts),
        "images": len(v),
        "query_cos": {"min": float(same.min()), "mean": float(same.mean())},
        "pair_cos_fp32": [float(ca.min()), float(ca.max())],
        "max_abs_dcos": float(np.abs(ca - cb).max()),
        "best_image_same": float(np.mean(ca.argmax(1) == cb.argmax(1))),
        "encode_ms_per_prompt": {
            "fp32": fp_s / len(prompts) * 1e3,
            "int8": q8_s / len(prompts) * 1e3,
        },
        "manifest": decisions(ca, cb, scale, bias),
        "centred": decisions(ca, cb, scale, -scale * centre),
        "centred_scale_117": decisions(ca, cb, 117.0, -117.0 * centre),
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
