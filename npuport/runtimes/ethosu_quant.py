"""ethos-u's quantizer side, shared by the compile (ethosu.py) and quantization-aware training (ethosu_qat.py):
the Vela compile spec, ExecuTorch's Ethos-U quantizer with npuport's per-group configs, the groups themselves, and the
quieting of Vela's and ExecuTorch's output.
"""

from __future__ import annotations

import contextlib
import logging
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def compile_spec(target: str):
    from executorch.backends.arm.ethosu import EthosUCompileSpec

    return EthosUCompileSpec(target, extra_flags=["--verbose-performance"])


@contextlib.contextmanager
def quiet():
    """Vela prints its whole report to stdout; ExecuTorch logs at INFO. Keep npuport's own progress readable."""
    import io
    import sys

    level = logging.getLogger("executorch").level
    logging.getLogger("executorch").setLevel(logging.ERROR)
    saved, sys.stdout = sys.stdout, io.StringIO()
    try:
        yield
    finally:
        sys.stdout = saved
        logging.getLogger("executorch").setLevel(level)


_ATTENTION = re.compile(r"\.(attention|attn|self_attn)$")


def module_groups(module: torch.nn.Module) -> dict[str, list[tuple[str, object]]]:
    """The quantisation groups of a module as ExecuTorch's quantizer selects them: group -> [("name", FQN) |
    ("type", module class)]. Same names as the ONNX runtimes' groups (runtimes/_quantize.py), found from the module
    tree instead of the exporter's name scopes."""
    from ._quantize import _LAYER, FFN_OUT

    groups: dict[str, list] = {}

    def add(g, item):
        if item not in groups.setdefault(g, []):
            groups[g].append(item)

    for name, m in module.named_modules():
        cls = type(m)
        if cls.__name__.endswith(("LayerNorm", "RMSNorm")):
            add("layernorm", ("type", cls))
        elif "GELU" in cls.__name__.upper() and not list(m.children()):
            add("gelu", ("type", cls))
        if name.endswith(".embeddings"):
            add("embeddings", ("name", name))
        elif _ATTENTION.search(name):
            add("attention", ("name", name))
        elif FFN_OUT.search(name):
            add("ffn_out", ("name", name))
        elif name.endswith((".head", ".classifier", ".pooler")) and name.count(".") <= 2:
            add("head", ("name", name))
        layer = _LAYER.search(name)
        if layer:
            add(f"layer.{layer.group(1) or layer.group(2)}", ("name", name))
    return groups


def quantize(export, module, example, calib, eu_spec, precision: str, raised: tuple[str, ...] = (),
              lowered: tuple[str, ...] = (), host: tuple[str, ...] = (), keep_observers: bool = False):
    """PT2E: int8 (or a16w8 everywhere for int16) globally; the groups in `raised` at a16w8 (16-bit activations,
    8-bit weights), those in `lowered` at int8, those in `host` unquantised (float: the partitioner leaves them to
    the host CPU), through the quantizer's per-module configs."""
    import torch
    from executorch.backends.arm.quantizer import (
        EthosUQuantizer,
        get_symmetric_a16w8_quantization_config,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    # torch 2.13: the exported module's input guards reject the calibration batches' other values of the same shape
    m = export(module, example).module(check_guards=False)
    q = EthosUQuantizer(eu_spec)
    a16w8 = get_symmetric_a16w8_quantization_config(is_per_channel=True)
    a8w8 = get_symmetric_quantization_config(is_per_channel=True)
    q.set_global(a16w8 if precision == "int16" else a8w8)
    groups = module_groups(module) if raised or lowered or host else {}
    for names, config in ((raised, a16w8), (lowered, a8w8), (host, None)):
        for g in names:
            for kind, what in groups[g]:
                (q.set_module_type if kind == "type" else q.set_module_name)(what, config)
    prepared = prepare_pt2e(m, q)
    with torch.no_grad():
        for ids, mask in calib:
            prepared(ids, mask)
    return prepared if keep_observers else convert_pt2e(prepared)
