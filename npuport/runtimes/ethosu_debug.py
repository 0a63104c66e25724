"""A lowered Ethos-U program run in PyTorch with any of its partitions on the TOSA reference model.

ExecuTorch keeps each delegate's fake-quantised source graph (`original_module`) beside the payload, so a partition
can run either way on the same inputs: the localisation behind `benchmarks/ethosu_localise.py` (which partition's
lowering moves the decisions) and the LayerNorm form's test. Not used by `port`, which runs the stored artifact.
"""

from __future__ import annotations

from collections.abc import Collection

from ..errors import ArtifactError
from .ethosu import _delegate_meta, _Reference


class Lowered:
    """`edge`: what to_edge_transform_and_lower returned; `parts`: the Vela compiles _vela_parts recorded for it."""

    def __init__(self, edge, parts: list[dict]):
        self.gm = edge.exported_program().module()
        self.modules = [m for n, m in self.gm.named_children() if n.startswith("lowered_module")]
        tosa = []
        for m in self.modules:
            k = next((i for i, p in enumerate(parts) if p["processed"] == m.processed_bytes), None)
            if k is None:
                raise ArtifactError("a partition has no Vela compile matching its payload")
            tosa.append(parts[k]["tosa"])
        self.reference = _Reference(tosa, [_delegate_meta(m) for m in self.modules])
        self._index = {id(m): k for k, m in enumerate(self.modules)}
        self._originals = [m.original_module.module() for m in self.modules]  # .module() rebuilds a graph: once

    def run(self, *inputs, on_reference: Collection[int] | str = (), given: dict | None = None):
        """(program output, {partition: (inputs, outputs)}). Partitions in `on_reference` ("all", or indices) run on
        the reference model, each fed what came before it; those in `given` return the given outputs; the rest run
        as their fake-quantised graphs."""
        import torch

        lowered, given = self, given or {}

        class Run(torch.fx.Interpreter):
            def call_function(self, target, args, kwargs):
                if getattr(target, "__name__", "") != "executorch_call_delegate":
                    return super().call_function(target, args, kwargs)
                k = lowered._index[id(args[0])]
                ins = [t for t in args[1:] if isinstance(t, torch.Tensor)]
                out = given[k] if k in given else lowered._originals[k](*args[1:])
                if on_reference == "all" or k in on_reference:
                    got = lowered.reference(k, ins)
                    out = got[0] if isinstance(out, torch.Tensor) else type(out)(got)
                self.seen[k] = (ins, out)
                return out

        r = Run(self.gm)
        r.seen = {}  # partition -> (inputs, outputs), filled by call_function
        with torch.no_grad():
            out = r.run(*inputs)
        return (out[0] if isinstance(out, (tuple, list)) else out), r.seen
