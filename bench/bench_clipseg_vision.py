"""Where CLIPSeg's int8 vision pass spends its time: the graph cut into pieces, timed side by side.

    .venv/bin/python bench/bench_clipseg_vision.py --work /tmp/bench-clipseg-vision \\
        --graph /tmp/wherein-bench-mask/models-int8-clipseg/clipseg/clipseg_vision_int8.tflite \\
        --graph /tmp/cs-sig/siglip2-image/siglip2_image_int8_b1.tflite

Builds, from a random-weight full-size CLIPSeg (the config bench_mask.py's --full uses), one
encoder layer at 485 tokens (352 px) and at 197 tokens (224 px), its attention and its MLP
alone, and the embeddings with the position table interpolated 224 -> 352 at run time (as
`interpolate_pos_encoding=True` exports it) or added as a constant; each converted with
litert-torch and made int8 with `models optimize`'s recipe (`make_int8`). Every piece and
every --graph (whole graphs to compare, e.g. the bench's int8 vision graph and a SigLIP 2
int8 image tower from `models convert siglip2 --random-weights --precision int8 --batch 1`)
runs on one interpreter thread with the default XNNPACK delegate, interleaved round by
round so that the load of a shared machine falls on all alike; thread CPU ms, median and
range. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path


def build_pieces(work: Path) -> dict[str, Path]:
    import litert_torch
    import torch
    from bench_mask import as_module, random_full_clipseg

    from wherein.indexer.models.optimize.build import make_int8

    model = random_full_clipseg()
    vm = model.clip.vision_model
    layer = vm.encoder.layers[0]
    with torch.no_grad():
        pos = vm.embeddings.interpolate_pos_encoding(torch.zeros(1, 485, 768), 352, 352).clone()

    def one_layer(h):
        r = layer(h, None)
        return r[0] if isinstance(r, tuple) else r

    def embeddings_const(x):
        e = vm.embeddings.patch_embedding(x).flatten(2).transpose(1, 2)
        return torch.cat([vm.embeddings.class_embedding.expand(1, 1, -1), e], dim=1) + pos

    h485, h197, img = (
        torch.zeros(1, 485, 768),
        torch.zeros(1, 197, 768),
        torch.zeros(1, 3, 352, 352),
    )
    pieces = {
        "one encoder layer, 485 tokens": (one_layer, h485),
        "one encoder layer, 197 tokens": (one_layer, h197),
        "  its attention, 485 tokens (q/k/v/o int8, QK^T, softmax, AV fp32)": (
            lambda h: layer.self_attn(hidden_states=h)[0],
            h485,
        ),
        "  its MLP, 485 tokens (fc1/fc2 int8, quick_gelu)": (layer.mlp, h485),
        "embeddings, position table interpolated 224 -> 352 at run time": (
            lambda x: vm.embeddings(x, interpolate_pos_encoding=True),
            img,
        ),
        "embeddings, position table for 352 as a constant": (embeddings_const, img),
    }

    work.mkdir(parents=True, exist_ok=True)
    out = {}
    for i, (name, (fn, ex)) in enumerate(pieces.items()):
        fp32, int8 = work / f"piece{i}.tflite", work / f"piece{i}_int8.tflite"
        if not int8.is_file():
            litert_torch.convert(as_module(fn, model).eval(), (ex,)).export(str(fp32))
            make_int8(fp32, int8, lambda s: print(s, file=sys.stderr))
        out[name] = int8
    return out


def time_all(graphs: dict[str, Path], rounds: int) -> dict[str, list[float]]:
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    runs = {}
    for name, path in graphs.items():
        it = Interpreter(model_path=str(path), num_threads=1)
        it.allocate_tensors()
        d = it.get_input_details()[0]
        x = np.random.default_rng(0).standard_normal(d["shape"]).astype(np.float32)
        it.set_tensor(d["index"], x)
        it.invoke()  # first run: XNNPACK packs the weights
        runs[name] = (it, d["index"], x)
    ms: dict[str, list[float]] = {name: [] for name in graphs}
    for _ in range(rounds):
        for name, (it, index, x) in runs.items():
            c = time.thread_time()
            it.set_tensor(index, x)
            it.invoke()
            ms[name].append((time.thread_time() - c) * 1000)
    return ms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench-clipseg-vision"))
    ap.add_argument(
        "--graph",
        type=Path,
        action="append",
        default=[],
        help="a whole graph to time beside the pieces",
    )
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    graphs = {f"`{g.name}` (whole graph)": g for g in args.graph}
    graphs.update(build_pieces(args.work))
    ms = time_all(graphs, args.rounds)
    print("| graph (int8, 1 thread, XNNPACK) | CPU ms median | min-max |")
    print("|---|---:|---|")
    for name, v in ms.items():
        print(f"| {name} | {statistics.median(v):.1f} | {min(v):.1f}-{max(v):.1f} |")


if __name__ == "__main__":
    main()
