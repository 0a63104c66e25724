"""ethos-u's quantizer side, shared by the compile (ethosu.py) and quantization-aware training (ethosu_qat.py):
the Vela compile spec, ExecuTorch's Ethos-U quantizer with npuport's per-group configs, the groups themselves, and the
quieting of Vela's and ExecuTorch's output.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
from typing import TYPE_CHECKING

from ._histogram import fast_histogram_search

if TYPE_CHECKING:
    import torch


# What -inf becomes before quantisation (ExecuTorch's QuantizeInfConfig; its default is -256). An attention mask puts
# -inf on the padded keys' scores, and the observers of the masked scores and of softmax's `x - max` then span the
# substitute, so its size sets their step: at -256 the scores of a 1 x 128 row spanned [-288, 0], and the int16 exp
# table, 513 points linearly interpolated over that range, was off by up to ~4 % near 0, where the weights that count
# are (the demo detector's decisions the U55 lost at int16 moved 0.52 from the fake-quantised graph; 0.08 at -32,
# `benchmarks/ethosu_maskfill.py`). Any value far enough below the scores is exact in effect: a masked key keeps
# e^-32 (1e-14) of the top key's weight at most, far below the 16-bit output step (3e-5).
MASKED_SCORE = -32.0


def compile_spec(target: str):
    import dataclasses

    from executorch.backends.arm.common.pipeline_config import QuantizeInfConfig
    from executorch.backends.arm.ethosu import EthosUCompileSpec

    spec = EthosUCompileSpec(target, extra_flags=["--verbose-performance"])
    # the target's own pipeline defaults (the U55 softmax form), only the -inf substitute changed
    config = spec._get_pass_pipeline_config()
    spec.set_pass_pipeline_config(dataclasses.replace(config, quantize_inf=QuantizeInfConfig(
        neg_inf=MASKED_SCORE, pos_inf=config.quantize_inf.pos_inf)))
    return spec


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


@functools.cache
def scaled_layernorm() -> type:
    """The ScaledLayerNorm class (built on first use: torch is imported lazily here)."""
    import torch

    class ScaledLayerNorm(torch.nn.Module):  # named *LayerNorm: module_groups puts it in the "layernorm" group
        """LayerNorm in a form whose rsqrt an integer NPU's lookup table evaluates well. Exact in real arithmetic.

        ExecuTorch lowers LayerNorm to mean, variance and rsqrt, and an int16 rsqrt to a 513-point table, linearly
        interpolated, over the variance's whole calibrated range. A BERT residual stream has outlier channels, so
        that range is wide ([149, 1.2e5] on the me5-small detector) and ordinary tokens' variances fall in the first
        segments, where rsqrt is steepest: `benchmarks/ethosu_localise.py` traced the decisions the U55 lost at int16
        to the partitions holding those LayerNorms. LayerNorm is unchanged by any positive per-token scale r applied
        to the deviations d first: with u = d * r, d / sqrt(mean(d^2) + eps) = u / sqrt(mean(u^2) + eps * r^2). With
        r = 1 / mean|d|, mean(u^2) lies in [1, C] (about 1.6 for a Gaussian row), where the table is accurate; r is
        itself a reciprocal table, and its error only rescales u, which cancels."""

        def __init__(self, ln: torch.nn.LayerNorm):
            super().__init__()
            self.weight, self.bias, self.eps = ln.weight, ln.bias, ln.eps

        def forward(self, x):  # (B, T, C)
            d = x - x.mean(-1, keepdim=True)
            r = torch.reciprocal(d.abs().mean(-1, keepdim=True) + 1e-6)  # (B, T, 1); any r > 0 is exact
            u = d * r
            y = u * torch.rsqrt((u * u).mean(-1, keepdim=True) + self.eps * r * r)
            if self.weight is not None:
                y = y * self.weight
            return y + self.bias if self.bias is not None else y

    return ScaledLayerNorm


def scales_layernorm(precision: str) -> bool:
    """Where the scaled LayerNorm is used: int16 (a16w8 everywhere), where it keeps the demo detector's decisions on
    the U55 and the plain form does not. Not at int8, even with the LayerNorm group at a16w8: there the loss is the
    8-bit quantisation of the residual stream around it, and the scaled form measured worse (npu_mixed.py at commit
    87abefe: 70 % of decisions with `--int16 layernorm` against 85 % plain)."""
    return precision == "int16"


def integer_form(module: torch.nn.Module) -> torch.nn.Module:
    """`module` with every last-axis LayerNorm in its ScaledLayerNorm form; parameters shared, the original untouched
    (other runtimes of the same port use it). The float proof of the swap is `integer_form_vs_float_max_abs` in the manifest."""
    import copy

    import torch

    memo = {id(t): t for t in [*module.parameters(), *module.buffers()]}  # copy the module tree, not the weights
    m = copy.deepcopy(module, memo)
    for sub in list(m.modules()):
        for name, child in list(sub.named_children()):
            if isinstance(child, torch.nn.LayerNorm) and len(child.normalized_shape) == 1:
                setattr(sub, name, scaled_layernorm()(child))
    return m


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


def set_group_config(q, groups: dict, names, config) -> None:
    """ExecuTorch's per-module quantizer configs for these groups (a module type or a module name each); the
    calibration graph (quantize) and the QAT graph (ethosu_qat) set them the same way."""
    for g in names:
        for kind, what in groups[g]:
            (q.set_module_type if kind == "type" else q.set_module_name)(what, config)


class SharedAnnotationGraph:
    """ExecuTorch's transform_for_annotation (the decompositions its quantizer runs before annotating: on the tiny
    test model 4.8 s of prepare_pt2e's 5.1) done once for several quantize() calls on the same module that quantise
    the same nodes at other widths, as --sensitivity's rounds do (one group at 8 bits, the rest at 16). The transform
    decomposes the nodes that are quantised, whatever their width, and strips its temporary annotations, so later
    calls take a copy of the first one's graph (tests/test_ethosu.py checks the figures against separate transforms).
    Not for calls that leave other groups on the host: their nodes are not quantised, so not decomposed."""

    def __init__(self):
        self._graph = None

    def wrap(self, transform):
        import copy

        def shared(model):
            if self._graph is None:
                self._graph = transform(model)
            return copy.deepcopy(self._graph)

        return shared


def quantize(export, module, example, calib, eu_spec, precision: str, raised: tuple[str, ...] = (),
             lowered: tuple[str, ...] = (), host: tuple[str, ...] = (), keep_observers: bool = False,
             scaled_layernorm: bool | None = None, shared: SharedAnnotationGraph | None = None):
    """PT2E (on the module's integer_form where scales_layernorm says, or as `scaled_layernorm` forces): int8 (or
    a16w8 everywhere for int16) globally; the groups in `raised` at a16w8 (16-bit activations,
    8-bit weights), those in `lowered` at int8, those in `host` unquantised (float: the partitioner leaves them to
    the host CPU), through the quantizer's per-module configs."""
    import torch
    from executorch.backends.arm.quantizer import (
        EthosUQuantizer,
        get_symmetric_a16w8_quantization_config,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    if scales_layernorm(precision) if scaled_layernorm is None else scaled_layernorm:  # exact in float
        module = integer_form(module)
    # torch 2.13: the exported module's input guards reject the calibration batches' other values of the same shape
    m = export(module, example).module(check_guards=False)
    q = EthosUQuantizer(eu_spec)
    if shared is not None:
        if host:
            raise ValueError("a shared annotation graph is for calls that quantise every node (no host groups)")
        q.transform_for_annotation = shared.wrap(q.transform_for_annotation)
    a16w8 = get_symmetric_a16w8_quantization_config(is_per_channel=True)
    a8w8 = get_symmetric_quantization_config(is_per_channel=True)
    q.set_global(a16w8 if precision == "int16" else a8w8)
    groups = module_groups(module) if raised or lowered or host else {}
    for names, config in ((raised, a16w8), (lowered, a8w8), (host, None)):
        set_group_config(q, groups, names, config)
    prepared = prepare_pt2e(m, q)
    with torch.no_grad():
        for ids, mask in calib:
            prepared(ids, mask)
    if keep_observers:
        return prepared
    with fast_histogram_search():  # the same ranges as torchao's search, without its per-element loop
        return convert_pt2e(prepared)
