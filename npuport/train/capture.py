"""The training step captured as a static graph: make_fx with NPU-friendly decompositions, then standard ONNX.

The step functions themselves (train/step.py) are plain torch; what is here decides how they lower: softmax without
the fused kernel, embedding and gather backward as matmuls in the gather-free graph, slice backward as a pad, and
an exporter kept quiet. `op_types` / `fx_op_types` list what a captured graph holds (the manifests record them).
"""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import torch

from ..errors import ExportError
from ..fsio import save_with
from .step import StepFunctions


def _plain_softmax(x, dim, dtype=None):
    return torch.softmax(x, dim, dtype=dtype)


# The math SDPA path calls `_safe_softmax` (zeros for fully masked rows), which lowers to Where ops over
# (B, H, T, T) forward and backward. A causal mask never masks a full row (the diagonal is open), so plain
# softmax computes the same numbers; ~5% of an ONNX Runtime step on the small preset.
def _embedding_backward_matmul(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
    """d(embedding)/d(weight) as one_hot(indices)^T @ grad: a MatMul instead of ScatterND(reduction=add).

    ONNX Runtime 1.32 runs ScatterND-add racily with intra_op_num_threads > 1: on the small preset the embedding
    gradient came out wrong by up to 0.024 (of 0.37) and differed run to run, while one thread was exact.
    The matmul is deterministic everywhere and costs V*B*T*C flops, nothing at character vocabularies."""
    if scale_grad_by_freq:
        raise ExportError("embedding(scale_grad_by_freq=True) is not supported in a captured step")
    C = grad_output.shape[-1]
    flat = indices.reshape(-1)
    oh = (flat.unsqueeze(-1) == torch.arange(num_weights, device=flat.device)).to(grad_output.dtype)  # (N, V)
    if padding_idx >= 0:
        oh = oh * (flat != padding_idx).unsqueeze(-1).to(grad_output.dtype)
    return oh.t() @ grad_output.reshape(-1, C)  # (V, C)


def _embedding_one_hot(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """embedding(weight, ids) as one_hot(ids) @ weight: a MatMul instead of a Gather (the gather-free flavour of a
    classifier, whose embedding sits inside a Hugging Face backbone npuport does not own)."""
    oh = (indices.unsqueeze(-1) == torch.arange(weight.shape[0], device=indices.device)).to(weight.dtype)
    return oh @ weight


def _slice_backward_pad(grad_output, input_sizes, dim, start, end, step):
    """The gradient of x[..., start:end] as a zero Pad around it, not zeros + ScatterND (the exporter's lowering):
    Hugging Face's rotate_half slices q and k in every layer."""
    if step != 1:
        return torch.zeros(input_sizes, dtype=grad_output.dtype).slice_scatter(grad_output, dim, start, end, step)
    ndim = len(input_sizes)
    dim = dim % ndim
    size = input_sizes[dim]
    start = max(0, start + size if start < 0 else start)
    end = min(size, end + size if end < 0 else end)
    pad = [0, 0] * (ndim - dim - 1) + [start, size - end]
    return torch.nn.functional.pad(grad_output, pad)


def _gather_one_hot(input, dim, index, sparse_grad=False):
    """torch.gather as a one-hot compare + Mul + ReduceSum (BERT's embeddings gather their token-type buffer by
    position). Only where index and input agree outside `dim`, the case that occurs."""
    dim = dim % input.ndim
    if index.ndim != input.ndim or any(index.shape[d] != input.shape[d] for d in range(input.ndim) if d != dim):
        raise ExportError(f"the gather-free step cannot express gather(input {tuple(input.shape)}, dim {dim}, index "
                          f"{tuple(index.shape)}); train without --gather-free")
    inp, idx = input.movedim(dim, -1), index.movedim(dim, -1)  # (A…, n), (A…, m)
    oh = idx.unsqueeze(-1) == torch.arange(inp.shape[-1], device=idx.device)  # (A…, m, n)
    return (oh.to(inp.dtype) * inp.unsqueeze(-2)).sum(-1).to(input.dtype).movedim(-1, dim)


_DECOMPOSITIONS = {
    torch.ops.aten._safe_softmax.default: _plain_softmax,
    torch.ops.aten.embedding_dense_backward.default: _embedding_backward_matmul,
}


def trace_step(fns: StepFunctions, kind: str, batch: int, seq_len: int) -> torch.fx.GraphModule:
    """make_fx of the step: an ATen graph with the backward written out.

    torch.export cannot take `grad_and_value` directly; make_fx can. SDPA is pinned to its MATH kernel because
    the fused CPU flash-attention backward has no ONNX translation.
    """
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.nn.attention import SDPBackend, sdpa_kernel

    args = fns.example_args(kind, batch, seq_len)
    table = dict(_DECOMPOSITIONS)
    if fns.one_hot_embedding:
        table[torch.ops.aten.embedding.default] = _embedding_one_hot
        table[torch.ops.aten.slice_backward.default] = _slice_backward_pad
        table[torch.ops.aten.gather.default] = _gather_one_hot
    try:
        with sdpa_kernel([SDPBackend.MATH]), torch.no_grad():
            return make_fx(fns.fn(kind), decomposition_table=table, tracing_mode="real")(*args)
    except Exception as e:  # noqa: BLE001 - re-raised typed with the cause
        raise ExportError(f"tracing the {kind} step failed: {type(e).__name__}: {e}") from e


def export_step_onnx(fns: StepFunctions, kind: str, batch: int, seq_len: int, path: Path) -> dict:
    """Lower one step graph to a standard-opset ONNX file; returns {op_type: count} of the graph.

    optimize=False: the exporter's optimiser folds AdamW's `+ eps` away as "adding zero" (NaN from step 2);
    runtimes fold constants correctly themselves.
    """
    import onnx

    gm = trace_step(fns, kind, batch, seq_len)
    args = fns.example_args(kind, batch, seq_len)
    in_names, out_names = fns.io_names(kind)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with _quiet_exporter():
            prog = torch.onnx.export(
                gm, args, dynamo=True, optimize=False, input_names=in_names, output_names=out_names,
                verbose=False, report=False,
            )
    except Exception as e:  # noqa: BLE001
        raise ExportError(f"ONNX export of the {kind} step failed: {type(e).__name__}: {e}") from e
    model = untie_transposed_constants(prog.model_proto)
    save_with(path, lambda tmp: onnx.save(model, str(tmp)))
    ops = op_types(model)
    bad = sorted(d for d in {n.domain for n in model.graph.node} if d not in ("", "ai.onnx"))
    if bad:
        raise ExportError(f"{kind} step graph uses non-standard op domains {bad}; npuport allows the default only")
    return ops


@contextmanager
def _quiet_exporter():
    """The exporter warns about training mode, torchvision ops and pytree internals; none apply here."""
    import logging
    import warnings

    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch._export", "torch.export")]
    levels = [lg.level for lg in loggers]
    try:
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, lv in zip(loggers, levels):
            lg.setLevel(lv)


def untie_transposed_constants(model):
    """Give every constant that feeds a Transpose *and* other nodes a private copy for the Transpose.

    OpenVINO 2026.4's CPU plugin computes `x @ C` and `z @ C.T` wrongly when both read one constant C (the
    transposed product comes out as if untransposed: |err| ~ 6 on a unit test; a distinct copy is exact).
    A fixed RoPE rotation matrix in the gather-free graph hits exactly that in its backward. Harmless elsewhere.
    """
    import onnx

    g = model.graph
    inits = {i.name: i for i in g.initializer}
    consumers: Counter = Counter(x for n in g.node for x in n.input)
    for node in g.node:
        if node.op_type != "Transpose" or node.input[0] not in inits or consumers[node.input[0]] < 2:
            continue
        src = inits[node.input[0]]
        copy = onnx.TensorProto()
        copy.CopyFrom(src)
        copy.name = f"{src.name}__for_{node.output[0]}"
        g.initializer.append(copy)
        node.input[0] = copy.name
    return model


def op_types(model) -> dict[str, int]:
    """Op types of a graph including any nested function bodies (the exporter may emit local functions)."""
    c: Counter = Counter(n.op_type for n in model.graph.node)
    for f in model.functions:
        c.update(n.op_type for n in f.node)
    return dict(sorted(c.items()))


GATHER_LIKE = ("Gather", "GatherElements", "GatherND", "Scatter", "ScatterElements", "ScatterND")
# The same family in an ATen (FX) graph, for runtimes that compile the traced step without ONNX (AOTInductor)
GATHER_LIKE_ATEN = ("aten.embedding", "aten.embedding_dense_backward", "aten.gather", "aten.index", "aten.index_select",
                    "aten.index_put", "aten.scatter", "aten.scatter_add", "aten.scatter_reduce", "aten.take")


def fx_op_types(gm: torch.fx.GraphModule) -> dict[str, int]:
    """ATen ops of a traced step, by packet (aten.mm, not aten.mm.default): what op_types says of an ONNX graph."""
    c: Counter = Counter(str(n.target).rsplit(".", 1)[0] for n in gm.graph.nodes if n.op == "call_function"
                         and str(n.target).startswith("aten."))
    return dict(sorted(c.items()))
