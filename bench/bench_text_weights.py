"""How the text tower's weight storage sets a process's memory: fp32, fp16 or int8 weights.

    .venv/bin/python bench/bench_text_weights.py --fp32 DIR/models/siglip2-text \
        --work /tmp/text-weights [--variants fp16,wo8,dq8]

--fp32 is the fp32 text folder (`wherein models convert siglip2-text`, as bench_serve's
--default-path builds it). Each variant is the same graph with its FULLY_CONNECTED weights
stored another way (ai-edge-quantizer), written once into WORK/<variant>/ beside a copy of
the manifest (file and sha256 updated) and the tokenizer:

- fp16: weights cast to fp16 behind DEQUANTIZE ops (float casting, weight-only);
- wo8:  int8 per-channel weights behind DEQUANTIZE ops (weight-only: fp32 activations);
- dq8:  int8 per-channel weights, activations quantized on the fly (dynamic range: what
        `models convert --precision int8` builds; XNNPACK's qd8 kernels).

The token table (GATHER) stays fp32 in every variant: only the query's rows of it are read.

For each variant (and fp32), two fresh processes open the tower the way `wherein serve`
does (LiteRTTextTower: CompiledModel, XNNPACK weights packed into a cache file beside the
graph): the first writes the cache (its seconds), the second maps it and encodes the
prompts. Printed per variant: graph and cache bytes; the second process's VmRSS, RssAnon
and RssFile after the encodes, the cache mapping's resident MB (smaps); encode ms per
prompt; and the cosine of each prompt's vector with fp32's (min, mean). What the query
vectors change downstream (`-p` decisions, best images) is bench_text_int8.py's check:
run it with --int8 WORK/<variant>.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

VARIANTS = ("fp16", "wo8", "dq8")
GRAPH = "text_tower.tflite"


def quantize(src: Path, dst: Path, variant: str) -> None:
    from ai_edge_quantizer import qtyping, quantizer
    from ai_edge_quantizer.algorithm_manager import AlgorithmName

    from wherein.indexer.models.convert.quiet import quiet

    q = quantizer.Quantizer(str(src))
    fc = qtyping.TFLOperationName.FULLY_CONNECTED
    if variant == "fp16":
        q.add_weight_only_config(
            regex=".*", operation_name=fc, num_bits=16, algorithm_key=AlgorithmName.FLOAT_CASTING
        )
    elif variant == "wo8":
        q.add_weight_only_config(regex=".*", operation_name=fc, num_bits=8)
    elif variant == "dq8":
        q.add_dynamic_config(regex=".*", operation_name=fc, num_bits=8)
    else:
        raise SystemExit(f"unknown variant {variant}")
    with quiet():
        q.quantize(enable_progress_bar=False, enable_progress_report=False).export_model(
            str(dst), overwrite=True
        )


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def build(fp32: Path, work: Path, variant: str) -> tuple[Path, float]:
    """WORK/variant: the graph, its manifest and the tokenizer files (linked)."""
    out = work / variant
    if (out / "manifest.json").is_file():
        return out, 0.0
    out.mkdir(parents=True, exist_ok=True)
    manifest = json.loads((fp32 / "manifest.json").read_text())
    t = time.perf_counter()
    tmp = out / (GRAPH + ".tmp")
    quantize(fp32 / GRAPH, tmp, variant)
    tmp.replace(out / GRAPH)
    seconds = time.perf_counter() - t
    tok = manifest["tokenizer"]["file"]
    for name in (tok, tok + ".bpe-index"):
        if (fp32 / name).is_file() and not (out / name).exists():
            os.link(fp32 / name, out / name)
    manifest.update(precision=variant, sha256=sha256(out / GRAPH))
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return out, seconds


PROBE = r"""
import json, re, sys, time
from pathlib import Path
import numpy as np
from wherein.indexer.models.text_tower_litert import LiteRTTextTower

folder, prompts_file, out = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
prompts = json.loads(prompts_file.read_text())
t = time.perf_counter()
tower = LiteRTTextTower(folder, "siglip2")
open_s = time.perf_counter() - t
t = time.perf_counter()
v = tower.encode(prompts)
encode_s = time.perf_counter() - t
if out != "-":
    np.save(out, v)

def status():
    f = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        k, _, rest = line.partition(":")
        if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            f[k] = int(rest.split()[0]) / 1024
    return f

def cache_rss():
    mb, name = 0.0, None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        parts = line.split()
        if re.fullmatch(r"[0-9a-f]+-[0-9a-f]+", parts[0]):
            name = parts[5] if len(parts) > 5 else None
        elif line.startswith("Rss:") and name and name.endswith(".xnnpack-cache"):
            mb += int(parts[1]) / 1024
    return mb

print(json.dumps({"open_s": open_s, "encode_ms": encode_s / len(prompts) * 1e3,
                  "cache_rss_mb": cache_rss(), **status()}))
"""


def probe(folder: Path, prompts: Path, out: str) -> dict:
    res = subprocess.run(
        [sys.executable, "-c", PROBE, str(folder), str(prompts), out],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(res.stdout.strip().splitlines()[-1])


def prompts_list() -> list[str]:
    from wherein.indexer.models.convert.build import PROBE_TEXTS
    from wherein.indexer.models.optimize.compare import FIXED_PROMPTS
    from wherein.indexer.models.optimize.inputs import COMMON_PROMPTS, bundled_sample

    captions = [q for per_image in bundled_sample(32).prompts for q in per_image]
    return list(dict.fromkeys([*COMMON_PROMPTS, *FIXED_PROMPTS, *PROBE_TEXTS, *captions]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fp32", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    prompts = args.work / "prompts.json"
    texts = prompts_list()
    prompts.write_text(json.dumps(texts))
    folders = {"fp32": (args.fp32, 0.0)}
    for v in args.variants.split(","):
        folders[v] = build(args.fp32, args.work, v)
    report = {}
    ref = None
    for name, (folder, build_s) in folders.items():
        for old in folder.glob(GRAPH + ".*.xnnpack-cache"):
            old.unlink()  # the first process below writes it afresh: its time is measured
        first = probe(folder, prompts, "-")
        vec = args.work / f"{name}.npy"
        second = probe(folder, prompts, str(vec))
        v = np.load(vec)
        if ref is None:
            ref = v
        cos = (v * ref).sum(1)
        caches = list(folder.glob(GRAPH + ".*.xnnpack-cache"))
        report[name] = {
            "build_s": round(build_s, 1),
            "graph_mb": round((folder / GRAPH).stat().st_size / 2**20, 1),
            "cache_mb": round(sum(c.stat().st_size for c in caches) / 2**20, 1),
            "first_open_s": round(first["open_s"], 2),
            "open_s": round(second["open_s"], 2),
            "encode_ms": round(second["encode_ms"], 1),
            "rss_mb": round(second["VmRSS"]),
            "anon_mb": round(second["RssAnon"]),
            "file_mb": round(second["RssFile"]),
            "cache_rss_mb": round(second["cache_rss_mb"]),
            "cos_vs_fp32": {"min": float(cos.min()), "mean": float(cos.mean())},
        }
        print(name, json.dumps(report[name]), flush=True)
    print(json.dumps({"prompts": len(texts), "variants": report}, indent=1))
    shutil.rmtree(args.work / "__pycache__", ignore_errors=True)


if __name__ == "__main__":
    main()
