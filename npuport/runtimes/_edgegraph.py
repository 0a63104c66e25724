"""The host side of a partitioned ExecuTorch program, stored without pickle and run again later.

A program lowered for an NPU is a graph of host ops (an embedding lookup, mask building, quantize / dequantize) around
`executorch_call_delegate` nodes whose payload only the NPU (or its reference model) can run. `to_json` writes that
graph as plain JSON (op names, argument references, literal arguments) and its tensors as safetensors; `HostProgram`
runs it with PyTorch's kernels for the host ops and a caller-supplied function per delegate. torch.export's own
serialiser stores weights with torch.save (pickle) and cannot hold delegates, hence this small format.
"""

from __future__ import annotations

import json
import operator
from pathlib import Path
from typing import Any, Callable

import torch

from ..errors import ArtifactError

FORMAT = "npuport-edge-graph/1"
_DTYPES = {str(d).removeprefix("torch."): d for d in (torch.float32, torch.float16, torch.bfloat16, torch.int64,
                                                       torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)}


def _op_name(target) -> str:
    if target is operator.getitem:
        return "getitem"
    if str(getattr(target, "__name__", "")) == "executorch_call_delegate" or str(target) == "executorch_call_delegate":
        return "delegate"
    return str(getattr(target, "_op", target))  # EdgeOpOverload wraps the OpOverload: "aten.index_select.default"


def _encode(a: Any) -> Any:
    if isinstance(a, torch.fx.Node):
        return {"ref": a.name}
    if isinstance(a, torch.dtype):
        return {"dtype": str(a).removeprefix("torch.")}
    if isinstance(a, (list, tuple)):
        return [_encode(x) for x in a]
    if a is None or isinstance(a, (bool, int, float, str)):
        return a
    raise ArtifactError(f"cannot store argument {a!r} of type {type(a).__name__} in a host graph")


def to_json(ep, delegate_ids: dict[str, int]) -> tuple[dict, dict[str, torch.Tensor]]:
    """(graph, tensors) for an edge-dialect ExportedProgram after partitioning. `delegate_ids` maps each
    `lowered_module_N` attribute name to the index of its payload file."""
    sig = ep.graph_signature
    consts = {**sig.inputs_to_parameters, **sig.inputs_to_buffers, **sig.inputs_to_lifted_tensor_constants}
    tensors, nodes, inputs = {}, [], []
    for n in ep.graph.nodes:
        if n.op == "placeholder":
            if n.name in consts:
                key = consts[n.name]
                t = ep.state_dict[key] if key in ep.state_dict else ep.constants[key]
                tensors[n.name] = t.detach().contiguous()
                nodes.append({"name": n.name, "op": "constant"})
            else:
                inputs.append(n.name)
        elif n.op == "get_attr":
            nodes.append({"name": n.name, "op": "delegate_ref", "index": delegate_ids[str(n.target)]})
        elif n.op == "call_function":
            nodes.append({"name": n.name, "op": _op_name(n.target), "args": _encode(list(n.args)),
                          "kwargs": {k: _encode(v) for k, v in n.kwargs.items()}})
        elif n.op == "output":
            outputs = _encode(list(n.args[0]))
    return {"format": FORMAT, "inputs": inputs, "nodes": nodes, "outputs": outputs}, tensors


def _resolve(op: str):
    ns, name, overload = op.split(".") if op.count(".") == 2 else (*op.split("."), "default")
    try:
        return getattr(getattr(getattr(torch.ops, ns), name), overload)
    except AttributeError as e:
        raise ArtifactError(f"host graph op {op!r} is not registered in this PyTorch (needs executorch installed)") from e


class HostProgram:
    """Run a stored host graph: `delegate(index, inputs) -> outputs` runs each NPU partition."""

    def __init__(self, graph: dict, tensors: dict[str, torch.Tensor], delegate: Callable[[int, list], list]):
        if graph.get("format") != FORMAT:
            raise ArtifactError(f"host graph format {graph.get('format')!r} unknown; expected {FORMAT}")
        import executorch.exir.passes.dim_order_ops_registry  # noqa: F401 - registers dim_order_ops
        import torchao.quantization.pt2e  # noqa: F401 - registers quantized_decomposed

        self.graph, self.tensors, self.delegate = graph, tensors, delegate
        self.ops = {n["op"]: _resolve(n["op"]) for n in graph["nodes"]
                    if n["op"] not in ("constant", "delegate_ref", "delegate", "getitem")}

    @classmethod
    def load(cls, graph_file: Path, tensor_file: Path, delegate) -> "HostProgram":
        from safetensors.torch import load_file

        return cls(json.loads(graph_file.read_text()), load_file(str(tensor_file)), delegate)

    def __call__(self, *inputs: torch.Tensor) -> list:
        env: dict[str, Any] = dict(zip(self.graph["inputs"], inputs))

        def dec(a):
            if isinstance(a, dict):
                return env[a["ref"]] if "ref" in a else _DTYPES[a["dtype"]]
            if isinstance(a, list):
                return [dec(x) for x in a]
            return a

        for n in self.graph["nodes"]:
            op = n["op"]
            if op == "constant":
                env[n["name"]] = self.tensors[n["name"]]
            elif op == "delegate_ref":
                env[n["name"]] = n["index"]
            elif op == "delegate":
                args = dec(n["args"])
                env[n["name"]] = self.delegate(args[0], args[1:])
            elif op == "getitem":
                seq, i = dec(n["args"])
                env[n["name"]] = seq[i]
            else:
                env[n["name"]] = self.ops[op](*dec(n["args"]), **{k: dec(v) for k, v in n["kwargs"].items()})
        return dec(self.graph["outputs"])


def save(directory: Path, stem: str, graph: dict, tensors: dict[str, torch.Tensor]) -> list[str]:
    from safetensors.torch import save_file

    (directory / f"{stem}.json").write_text(json.dumps(graph))
    save_file(tensors, str(directory / f"{stem}.safetensors"))
    return [f"{stem}.json", f"{stem}.safetensors"]
