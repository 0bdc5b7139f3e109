"""A .tflite graph that takes long enough to run to see what other threads do meanwhile.

Written with LiteRT's flatbuffer schema (no torch, no converter): the input row goes
through one fully connected layer, is tiled to ROWS rows, through LAYERS square
layers of WIDTH (ROWS x WIDTH x WIDTH multiply-adds each: 0.1-0.3 s in all on one
core), averaged back to one row and projected to the output width. The signature
names its tensors as litert-torch does (args_0 -> output_0).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

ROWS = 2048
WIDTH = 512
LAYERS = 24


def write_slow_graph(path: Path, inputs: int, outputs: int, int_input: bool = False) -> Path:
    """A graph [1, inputs] -> [1, outputs]; its input int32 (token ids) if int_input."""
    from ai_edge_litert import schema_py_generated as s
    from ai_edge_litert.tools import flatbuffer_utils as fb

    rng = np.random.default_rng(0)
    buffers: list = [s.BufferT()]  # buffer 0: the empty one every tensor without data uses
    tensors: list = []

    def tensor(shape: list[int], kind: int = s.TensorType.FLOAT32, data=None) -> int:
        t = s.TensorT()
        t.shape, t.type, t.name = shape, kind, f"t{len(tensors)}".encode()
        t.buffer = 0
        if data is not None:
            b = s.BufferT()
            b.data = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
            buffers.append(b)
            t.buffer = len(buffers) - 1
        tensors.append(t)
        return len(tensors) - 1

    def weights(n_out: int, n_in: int) -> int:
        w = (rng.standard_normal((n_out, n_in)) / np.sqrt(n_in)).astype(np.float32)
        return tensor([n_out, n_in], data=w)

    codes = [s.BuiltinOperator.FULLY_CONNECTED, s.BuiltinOperator.TILE, s.BuiltinOperator.MEAN]
    codes.append(s.BuiltinOperator.CAST)
    ops: list = []

    def op(code: int, ins: list[int], outs: list[int], options=None, kind: int = 0) -> None:
        o = s.OperatorT()
        o.opcodeIndex, o.inputs, o.outputs = codes.index(code), ins, outs
        if options is not None:
            o.builtinOptionsType, o.builtinOptions = kind, options
        ops.append(o)

    def dense(x: int, rows: int, n_out: int, n_in: int) -> int:
        y = tensor([rows, n_out])
        op(s.BuiltinOperator.FULLY_CONNECTED, [x, weights(n_out, n_in), -1], [y])
        return y

    source = tensor([1, inputs], s.TensorType.INT32 if int_input else s.TensorType.FLOAT32)
    x = source
    if int_input:
        x = tensor([1, inputs])
        op(s.BuiltinOperator.CAST, [source], [x])
    x = dense(x, 1, WIDTH, inputs)
    tiled = tensor([ROWS, WIDTH])
    multiples = tensor([2], s.TensorType.INT32, np.array([ROWS, 1], np.int32))
    op(s.BuiltinOperator.TILE, [x, multiples], [tiled])
    x = tiled
    for _ in range(LAYERS):
        x = dense(x, ROWS, WIDTH, WIDTH)
    mean = tensor([1, WIDTH])
    reducer = s.ReducerOptionsT()
    reducer.keepDims = True
    axis = tensor([1], s.TensorType.INT32, np.array([0], np.int32))
    op(s.BuiltinOperator.MEAN, [x, axis], [mean], reducer, s.BuiltinOptions.ReducerOptions)
    out = dense(mean, 1, outputs, WIDTH)

    graph = s.SubGraphT()
    graph.tensors, graph.inputs, graph.outputs, graph.operators = tensors, [source], [out], ops
    model = s.ModelT()
    model.version, model.subgraphs, model.buffers = 3, [graph], buffers
    model.operatorCodes = []
    for code in codes:
        c = s.OperatorCodeT()
        c.builtinCode = c.deprecatedBuiltinCode = code
        c.version = 1
        model.operatorCodes.append(c)
    sig = s.SignatureDefT()
    sig.signatureKey, sig.subgraphIndex = b"serving_default", 0
    sig.inputs = [_tensor_map(s, "args_0", source)]
    sig.outputs = [_tensor_map(s, "output_0", out)]
    model.signatureDefs = [sig]
    fb.write_model(model, path)
    return path


def _tensor_map(s, name: str, index: int):
    m = s.TensorMapT()
    m.name, m.tensorIndex = name.encode(), index
    return m
