"""Shorten CLIPSeg's causal text graph from 77 token positions to L: the same cond, less work.

The host reads one row of the text graph's output: hidden[0, eot]. CLIP's text
transformer is causal (every attention adds a mask that hides positions j > i)
and everything else in it works row by row (LayerNorm, MLP, projections), so
row eot depends only on rows 0..eot. A graph of L >= eot + 1 positions fed the
first L token embeddings computes that row exactly as the 77-position graph
does: prompts of up to L - 2 content tokens (SOT and EOT take two) fit.

What the rewrite changes, and nothing else (weights stay byte for byte; an fp16
graph keeps its DEQUANTIZE ops):
- every activation tensor's shape / shape_signature: 77 -> L;
- RESHAPE shape constants (and RESHAPE options): 77 -> L;
- per-position constants [..., 77, W] read by an element-wise op (the position
  embedding): their first L rows;
- square constants [..., 77, 77]: their top-left [L, L] block, only when they are
  causal: an ADD'ed mask must hide every j > i, a BATCH_MATMUL left operand must
  be zero there (then position i mixes only positions <= i).

Anything else that mentions the sequence length (a 77 in another int constant,
a weight or a constant with 77 on another axis, a flattened 8 x 77 axis) is
refused with a ModelError naming it: the rewrite is exact or it is not made.
`models optimize` then checks cond from the short graph against the 77 graph
before the host may use it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from wherein.indexer.models.optimize.widen import _is_const, _schema, read_model, write_model
from wherein.schemas.errors import ModelError

DEFAULT_LENGTH = 16
MASKED = -1e4  # an additive mask entry at or below this hides its position after softmax
_FLOAT = {"FLOAT32": "<f4", "FLOAT16": "<f2"}
_INT = {"INT32": "<i4", "INT64": "<i8"}


@dataclass
class ShortenReport:
    source_length: int
    length: int
    sliced: list[str] = field(default_factory=list)  # constants cut to L positions
    shape_constants: int = 0  # RESHAPE shape constants rewritten
    activations: int = 0  # activation tensors reshaped

    def to_json(self) -> dict:
        return {
            "positions": [self.source_length, self.length],
            "constants_sliced": self.sliced,
            "shape_constants": self.shape_constants,
            "activations": self.activations,
        }


def short_name(source: Path, length: int) -> str:
    return f"{source.stem}_t{length}.tflite"


def _name(t) -> str:
    raw = t.name.decode() if isinstance(t.name, bytes) else str(t.name)
    return raw.rstrip(";").rsplit(";", 1)[-1].rsplit("/", 1)[-1][-60:] or "?"


class _Graph:
    """One subgraph with its readers and op names, as the rewrite needs them."""

    def __init__(self, model) -> None:
        schema, fb = _schema()
        self.model = model
        self.schema = schema
        if len(model.subgraphs) != 1:
            raise ModelError(f"expected one subgraph, found {len(model.subgraphs)}")
        self.sg = model.subgraphs[0]
        names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
        self.op_names: list[str] = [
            names.get(code, str(code))
            for code in (
                fb.get_builtin_code_from_operator_code(model.operatorCodes[op.opcodeIndex])
                for op in self.sg.operators
            )
        ]
        self.readers: dict[int, list[tuple[int, int]]] = defaultdict(list)  # tensor -> (op, slot)
        for oi, op in enumerate(self.sg.operators):
            for slot, t in enumerate(op.inputs or []):
                if t >= 0:
                    self.readers[t].append((oi, slot))
        types = {v: k for k, v in vars(schema.TensorType).items() if not k.startswith("_")}
        self.type_name = lambda t: types.get(t.type, str(t.type))

    def effective_readers(self, ti: int) -> list[tuple[str, int, int]]:
        """(op name, op, slot) of the ops reading tensor ti, looking through DEQUANTIZE."""
        out = []
        for oi, slot in self.readers[ti]:
            if self.op_names[oi] == "DEQUANTIZE":
                out += self.effective_readers(self.sg.operators[oi].outputs[0])
            else:
                out.append((self.op_names[oi], oi, slot))
        return out

    def const(self, t) -> np.ndarray:
        dtype = {**_FLOAT, **_INT}[self.type_name(t)]
        arr = np.frombuffer(self.model.buffers[t.buffer].data, dtype=dtype)
        return arr.reshape([int(d) for d in t.shape])


def _seq_length(g: _Graph) -> int:
    sg = g.sg
    if len(sg.inputs) != 1 or len(sg.outputs) != 1:
        raise ModelError("expected one input and one output (token embeddings -> hidden)")
    shape_in = [int(d) for d in sg.tensors[sg.inputs[0]].shape]
    shape_out = [int(d) for d in sg.tensors[sg.outputs[0]].shape]
    if len(shape_in) != 3 or shape_in[0] != 1 or shape_in != shape_out:
        raise ModelError(
            f"expected input and output [1, n, width], found {shape_in} -> {shape_out}"
        )
    return shape_in[1]


def _check_causal(g: _Graph, t, arr: np.ndarray, readers) -> None:
    """A square [.., S, S] constant may be cut to [.., L, L] only if row i never sees j > i."""
    upper = np.triu(np.ones(arr.shape[-2:], dtype=bool), k=1)
    above = arr[..., upper].astype(np.float64)
    for op, oi, slot in readers:
        if op == "ADD":
            ok = bool(np.all(above <= MASKED))
        elif op == "BATCH_MATMUL" and slot == 0:
            opts = g.sg.operators[oi].builtinOptions
            ok = not getattr(opts, "adjX", False) and bool(np.all(above == 0))
        else:
            raise ModelError(
                f"constant {_name(t)} {list(arr.shape)} is read by {op}: cannot tell if it is causal"
            )
        if not ok:
            raise ModelError(
                f"constant {_name(t)} {list(arr.shape)} is not causal (row i sees positions j > i "
                f"through {op}): a shorter graph would compute something else"
            )


def _set_data(g: _Graph, ti: int, arr: np.ndarray, users: dict[int, int]) -> None:
    t = g.sg.tensors[ti]
    data = np.ascontiguousarray(arr).view(np.uint8).ravel()
    if users[t.buffer] == 1:
        g.model.buffers[t.buffer].data = data
    else:  # another tensor reads the same bytes: give this one its own buffer
        g.model.buffers.append(g.schema.BufferT(data=data))
        t.buffer = len(g.model.buffers) - 1
        users[t.buffer] = 1
    t.shape = np.array(arr.shape, dtype=np.int32)
    if t.shapeSignature is not None and len(t.shapeSignature):
        t.shapeSignature = np.array(arr.shape, dtype=np.int32)


def _replace(dims, s: int, length: int) -> np.ndarray:
    a = np.array(dims, dtype=np.int64)
    flat = (a != s) & (a > 0) & (a % s == 0)  # 8 x 77 folded into one axis
    if flat.any():
        raise ModelError(f"shape {a.tolist()} folds the {s} positions into another axis")
    return np.where(a == s, length, a)


def shorten_model(model, length: int = DEFAULT_LENGTH) -> ShortenReport:
    """Rewrite model (a ModelT) in place to `length` positions; ModelError when not exact."""
    g = _Graph(model)
    s = _seq_length(g)
    if not 2 <= length < s:
        raise ModelError(f"length {length}: must be at least 2 and below {s}")
    report = ShortenReport(s, length)
    sg = g.sg
    users: dict[int, int] = defaultdict(int)
    for t in sg.tensors:
        users[t.buffer] += 1
    for ti, t in enumerate(sg.tensors):
        if not _is_const(model, t):
            continue
        shape = [int(d) for d in t.shape]
        kind = g.type_name(t)
        readers = g.effective_readers(ti)
        if kind in _INT:
            values = g.const(t)
            if s not in values:
                continue
            bad = [op for op, _, slot in readers if (op, slot) != ("RESHAPE", 1)]
            if bad:
                raise ModelError(
                    f"int constant {_name(t)} {values.ravel().tolist()} holds {s} and is read by "
                    f"{bad[0]}, not as a RESHAPE shape"
                )
            new = _replace(values, s, length).astype(values.dtype)
            _set_data(g, ti, new.reshape(values.shape), users)
            report.shape_constants += 1
            continue
        if s not in shape:
            continue
        if kind not in _FLOAT or (t.quantization is not None and t.quantization.scale is not None):
            raise ModelError(f"constant {_name(t)} {shape} ({kind}) holds {s} positions")
        axes = {i for i, d in enumerate(shape) if d == s}
        n = len(shape)
        arr = g.const(t)
        if axes == {n - 2}:  # one row per position: the position embedding
            bad = [op for op, _, _ in readers if op not in ("ADD", "SUB", "MUL")]
            if bad:
                raise ModelError(f"constant {_name(t)} {shape} is read by {bad[0]} (a weight?)")
            _set_data(g, ti, arr[..., :length, :], users)
        elif axes == {n - 2, n - 1}:  # position x position: a causal mask or mixing matrix
            _check_causal(g, t, arr, readers)
            _set_data(g, ti, arr[..., :length, :length], users)
        else:
            raise ModelError(
                f"constant {_name(t)} {shape}: {s} on an axis other than the sequence one"
            )
        report.sliced.append(f"{_name(t)} {shape}")
    for t in sg.tensors:
        if _is_const(model, t) or t.shape is None:
            continue
        before = np.asarray(t.shape).tolist()
        t.shape = _replace(t.shape, s, length).astype(np.int32)
        if t.shapeSignature is not None and len(t.shapeSignature):
            t.shapeSignature = _replace(t.shapeSignature, s, length).astype(np.int32)
        report.activations += before != t.shape.tolist()
    for oi, op in enumerate(sg.operators):
        if g.op_names[oi] == "RESHAPE":
            opts = op.builtinOptions
            if opts is not None and getattr(opts, "newShape", None) is not None:
                opts.newShape = _replace(opts.newShape, s, length).astype(np.int32).tolist()
            _check_reshape(g, oi)
    return report


def _check_reshape(g: _Graph, oi: int) -> None:
    """Every RESHAPE keeps its element count: a missed length-dependent size shows up here."""
    op = g.sg.operators[oi]
    src, dst = g.sg.tensors[op.inputs[0]], g.sg.tensors[op.outputs[0]]
    a, b = int(np.prod(src.shape)), int(np.prod(dst.shape))
    if a != b:
        raise ModelError(
            f"RESHAPE {_name(src)} {np.asarray(src.shape).tolist()} -> "
            f"{np.asarray(dst.shape).tolist()} after shortening: a size the rewrite could not place"
        )


def shorten(src: Path, dst: Path, length: int = DEFAULT_LENGTH) -> ShortenReport:
    """src (the 77-position text graph) -> dst (length positions), written atomically."""
    from wherein.indexer.store.atomic import atomic_path

    model = read_model(src)
    report = shorten_model(model, length)
    with atomic_path(dst, durable=False) as tmp:
        write_model(model, tmp)
    return report
