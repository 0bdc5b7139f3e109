"""Widen an fp16-weight LiteRT graph to fp32 weights: the step before dynamic int8.

ai-edge-quantizer's dynamic int8 recipe quantizes the constant weight operand of
a FULLY_CONNECTED / CONV_2D. In an fp16-weight graph (the published SigLIP 2 and
CLIPSeg files) that operand is not a constant: it is the output of a DEQUANTIZE
of an fp16 constant, so the recipe finds nothing to quantize and returns the
graph unchanged (same size, same speed). Widening stores each such constant as
fp32, points the DEQUANTIZE's consumers at it and drops the DEQUANTIZE. Every
fp16 value is exactly representable in fp32, so the widened graph computes
exactly what the source computed; only now its weights are constants.

The rewrite goes through the flatbuffer schema's Python object API that ships
with ai-edge-litert (no [convert] extra needed). Buffers shared between
signatures (a converted tower's batch-1 and batch-8 subgraphs share weights)
stay shared: a buffer is widened once, in place, when every tensor that reads
it is widened.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from wherein.schemas.errors import ModelError

_ALIGN = 16  # buffer data alignment in the written file (SIMD loads, as ai-edge-quantizer writes)


@dataclass
class WidenReport:
    widened: int  # fp16 constants now stored as fp32
    dequantize_dropped: int  # DEQUANTIZE ops removed
    left: int  # fp16 constants that could not be widened (other consumers, graph outputs)
    bytes_before: int
    bytes_after: int

    def to_json(self) -> dict:
        return {
            "fp16_constants_widened": self.widened,
            "dequantize_ops_dropped": self.dequantize_dropped,
            "fp16_constants_left": self.left,
            "bytes": [self.bytes_before, self.bytes_after],
        }


def _schema():
    from ai_edge_litert import schema_py_generated as schema
    from ai_edge_litert.tools import flatbuffer_utils

    return schema, flatbuffer_utils


def read_model(path: Path):
    _, fb = _schema()
    try:
        return fb.read_model(Path(path))
    except Exception as exc:  # a truncated or foreign file fails deep inside flatbuffers
        raise ModelError(f"{path}: not a readable LiteRT flatbuffer ({exc})") from exc


def _is_const(model, tensor) -> bool:
    data = model.buffers[tensor.buffer].data if tensor.buffer < len(model.buffers) else None
    return data is not None and len(data) > 0


def _fp16_dequantize_ops(model) -> list[tuple[int, int]]:
    """(subgraph, op) of every DEQUANTIZE that reads an fp16 constant into an fp32 tensor."""
    schema, fb = _schema()
    found = []
    for si, sg in enumerate(model.subgraphs):
        for oi, op in enumerate(sg.operators or []):
            code = fb.get_builtin_code_from_operator_code(model.operatorCodes[op.opcodeIndex])
            if code != schema.BuiltinOperator.DEQUANTIZE or len(op.inputs) != 1:
                continue
            src, dst = sg.tensors[op.inputs[0]], sg.tensors[op.outputs[0]]
            if (
                src.type == schema.TensorType.FLOAT16
                and dst.type == schema.TensorType.FLOAT32
                and _is_const(model, src)
            ):
                found.append((si, oi))
    return found


def fp16_constant_count(path: Path) -> int:
    """How many fp16 constants feed a DEQUANTIZE: 0 means nothing to widen."""
    return len(_fp16_dequantize_ops(read_model(path)))


def weight_types(path: Path) -> dict[str, int]:
    """FULLY_CONNECTED / CONV_2D ops by the type of their constant weight: {"INT8": n, "FLOAT32": m}.

    How a quantized graph shows that the recipe reached the weights (a DEQUANTIZE'd
    fp16 weight is not a constant, so an unwidened graph counts none).
    """
    schema, fb = _schema()
    model = read_model(path)
    wanted = {schema.BuiltinOperator.FULLY_CONNECTED, schema.BuiltinOperator.CONV_2D}
    names = {v: k for k, v in vars(schema.TensorType).items() if not k.startswith("_")}
    counts: dict[str, int] = defaultdict(int)
    for sg in model.subgraphs:
        for op in sg.operators or []:
            code = fb.get_builtin_code_from_operator_code(model.operatorCodes[op.opcodeIndex])
            if code in wanted and len(op.inputs) > 1 and op.inputs[1] >= 0:
                w = sg.tensors[op.inputs[1]]
                if _is_const(model, w):
                    counts[names.get(w.type, str(w.type))] += 1
    return dict(counts)


def _graph_refs(model, si: int) -> set[int]:
    """Tensors of subgraph si that the subgraph or a signature names as input/output."""
    sg = model.subgraphs[si]
    refs = set(sg.inputs or []) | set(sg.outputs or [])
    for sig in model.signatureDefs or []:
        if sig.subgraphIndex == si:
            refs |= {t.tensorIndex for t in (sig.inputs or []) + (sig.outputs or [])}
    return refs


def widen_model(model) -> WidenReport:
    """Rewrite model (a ModelT) in place; return what was done."""
    schema, _ = _schema()
    candidates = _fp16_dequantize_ops(model)
    # Who reads each tensor, per subgraph: a widened constant must feed DEQUANTIZEs only.
    readers: dict[tuple[int, int], list[int]] = defaultdict(list)
    for si, sg in enumerate(model.subgraphs):
        for oi, op in enumerate(sg.operators or []):
            for t in op.inputs or []:
                if t >= 0:
                    readers[(si, t)].append(oi)
    deq_ops = set(candidates)
    chosen: list[tuple[int, int]] = []
    for si, oi in candidates:
        op = model.subgraphs[si].operators[oi]
        src, dst = op.inputs[0], op.outputs[0]
        only_dequantize = all((si, r) in deq_ops for r in readers[(si, src)])
        if (
            only_dequantize
            and dst not in _graph_refs(model, si)
            and src not in _graph_refs(model, si)
        ):
            chosen.append((si, oi))
    left = len(candidates) - len(chosen)
    widened_tensors = {(si, model.subgraphs[si].operators[oi].inputs[0]) for si, oi in chosen}

    # Buffers: widen in place when every tensor reading the buffer is widened, else copy.
    users: dict[int, set[tuple[int, int]]] = defaultdict(set)
    for si, sg in enumerate(model.subgraphs):
        for ti, t in enumerate(sg.tensors):
            users[t.buffer].add((si, ti))
    new_buffer: dict[int, int] = {}
    before = after = 0
    for si, ti in sorted(widened_tensors):
        t = model.subgraphs[si].tensors[ti]
        old = t.buffer
        if old not in new_buffer:
            data = np.frombuffer(model.buffers[old].data, dtype="<f2")
            wide = data.astype("<f4").view(np.uint8)
            before += data.nbytes
            after += wide.nbytes
            if users[old] <= widened_tensors:
                model.buffers[old].data = wide
                new_buffer[old] = old
            else:
                model.buffers.append(schema.BufferT(data=wide))
                new_buffer[old] = len(model.buffers) - 1
        t.buffer = new_buffer[old]
        t.type = schema.TensorType.FLOAT32
        t.quantization = None

    # Point each DEQUANTIZE's readers at its (now fp32) input; drop the op and its output.
    by_graph: dict[int, dict[int, int]] = defaultdict(dict)  # si -> {dequantized out: const in}
    drop_ops: dict[int, set[int]] = defaultdict(set)
    for si, oi in chosen:
        op = model.subgraphs[si].operators[oi]
        by_graph[si][op.outputs[0]] = op.inputs[0]
        drop_ops[si].add(oi)
    for si, alias in by_graph.items():
        sg = model.subgraphs[si]
        sg.operators = [op for oi, op in enumerate(sg.operators) if oi not in drop_ops[si]]
        for op in sg.operators:
            op.inputs = [alias.get(t, t) for t in op.inputs]
        _drop_tensors(model, si, set(alias))
    return WidenReport(len(chosen), len(chosen), left, before, after)


def _drop_tensors(model, si: int, dead: set[int]) -> None:
    """Remove tensors nothing reads or writes any more, renumbering every reference."""
    sg = model.subgraphs[si]
    for op in sg.operators:
        used = set(op.inputs or []) | set(op.outputs or []) | set(op.intermediates or [])
        if used & dead:
            raise ModelError("internal: a dropped DEQUANTIZE output is still in use")
    keep = [ti for ti in range(len(sg.tensors)) if ti not in dead]
    new_index = {old: new for new, old in enumerate(keep)}

    def remap(ids):
        return None if ids is None else [new_index[t] if t >= 0 else t for t in ids]

    sg.tensors = [sg.tensors[ti] for ti in keep]
    sg.inputs, sg.outputs = remap(sg.inputs), remap(sg.outputs)
    for op in sg.operators:
        op.inputs, op.outputs = remap(op.inputs), remap(op.outputs)
        op.intermediates = remap(op.intermediates)
    for sig in model.signatureDefs or []:
        if sig.subgraphIndex == si:
            for t in (sig.inputs or []) + (sig.outputs or []):
                t.tensorIndex = new_index[t.tensorIndex]


def write_model(model, path: Path) -> None:
    """Serialise with tensor data after the flatbuffer, 16-byte aligned (offset/size buffers).

    The same layout ai-edge-quantizer writes; it keeps the flatbuffer itself small
    (no 2 GB flatbuffer limit) and the weights aligned for SIMD loads. Never write
    over the file the model was read from: its buffers map that file.
    """
    schema, fb = _schema()
    tensor_buffers = {t.buffer for sg in model.subgraphs for t in sg.tensors}
    data: dict[int, np.ndarray] = {}
    for bi, buf in enumerate(model.buffers):
        if bi in tensor_buffers and buf.data is not None and len(buf.data):
            data[bi] = np.frombuffer(buf.data, dtype=np.uint8)
            buf.data, buf.offset, buf.size = None, 1, 1  # non-default: packed, patched below
    try:
        head = fb.convert_object_to_bytearray(model)
    finally:
        for bi, arr in data.items():
            model.buffers[bi].data, model.buffers[bi].offset, model.buffers[bi].size = arr, 0, 0
    packed = schema.Model.GetRootAs(head, 0)
    offsets, pos = {}, _round_up(len(head))
    for bi, arr in data.items():
        offsets[bi] = pos
        fb.update_packed_buffer(packed.Buffers(bi), offset=pos, size=arr.nbytes)
        pos = _round_up(pos + arr.nbytes)
    with open(path, "wb") as f:
        f.write(head)
        for bi, arr in data.items():
            f.write(b"\0" * (offsets[bi] - f.tell()))
            f.write(arr.data)  # the array's buffer, uncopied


def _round_up(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def widen(src: Path, dst: Path) -> WidenReport:
    """src (fp16 weights) -> dst (fp32 weights), written atomically; same signatures, same results."""
    from wherein.indexer.store.atomic import atomic_path

    model = read_model(src)
    report = widen_model(model)
    with atomic_path(dst, durable=False) as tmp:
        write_model(model, tmp)
    return report
