"""ethos-u's quantization-aware training: the PT2E QAT graph `npuport detector train --qat ethos-u` trains, and
the trained ranges loaded back into the graph `port` converts (runtimes/_qat.py stores and checks them).

Kept apart from ethosu.py, which compiles: this is the training side of the same quantizer configs.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from ..errors import ArtifactError
from . import _qat
from ._histogram import fast_histogram_search
from .ethosu_quant import compile_spec, integer_form, module_groups, quantize, quiet, scales_layernorm, set_group_config


def qat_prepared(module, example, eu_spec, precision: str, calib=None, raised: tuple[str, ...] = ()):
    """prepare_qat_pt2e with the same configs as ethosu_quant.quantize (its global one, and a16w8 for the groups in
    `raised`, as `port --int16` sets them per module), fake-quant instead of observers. Exported
    with gradients on (a graph exported under no_grad would not train); QAT and port build it the same way, so their
    fake-quant modules match one for one (runtimes/_qat.py checks it). With `calib` batches, every activation's range
    is first calibrated as `port` would (HistogramObserver) and then held: see seed_ranges."""
    import torch
    from executorch.backends.arm.quantizer import (
        EthosUQuantizer,
        get_symmetric_a16w8_quantization_config,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import prepare_qat_pt2e

    with warnings.catch_warnings(), quiet():
        warnings.simplefilter("ignore")
        # the same integer_form the calibration graph (quantize) is built from, so their fake-quants match one for one
        form = integer_form(module) if scales_layernorm(precision) else module
        m = torch.export.export(form, tuple(example), strict=True).module(check_guards=False)
        q = EthosUQuantizer(eu_spec)
        a16w8 = get_symmetric_a16w8_quantization_config(is_per_channel=True, is_qat=True)
        q.set_global(a16w8 if precision == "int16" else get_symmetric_quantization_config(is_per_channel=True,
                                                                                           is_qat=True))
        set_group_config(q, module_groups(form) if raised else {}, raised, a16w8)
        prepared = prepare_qat_pt2e(m, q)
        _qat.hold(prepared)  # the forward rounds as the converted graph will
        if calib is not None:
            ptq = quantize(lambda mod, ex: torch.export.export(mod, tuple(ex), strict=True), module, example, calib,
                            eu_spec, precision, tuple(raised), keep_observers=True)
            seed_ranges(prepared, ptq)
        return prepared


def seed_ranges(qat, ptq) -> None:
    """Each activation fake-quant of the QAT graph takes the range the PTQ graph's observer calibrated, and keeps it
    (observer off): QAT then trains the weights under the ranges the integer graph will use. Why not the QAT
    observers' own moving min-max: a LayerNorm's variance edge spans its outlier tokens' values, so at 8 bits the
    other tokens' variances round to 0 and rsqrt gives inf (measured on the me5-small detector: NaN from the first
    step), where the histogram range keeps them. Weight fake-quants keep observing the weights as they train."""
    import torch

    pairs = list(zip(_qat.modules(ptq), _qat.modules(qat), strict=False))
    if len(_qat.modules(ptq)) != len(_qat.modules(qat)) or any(
            str(getattr(a.args[0], "target", a.args[0])) != str(getattr(b.args[0], "target", b.args[0]))
            for a, b in pairs):
        raise ArtifactError("ExecuTorch's quantizer annotated the QAT graph differently from the calibration graph; "
                            "QAT cannot take the calibrated ranges (another ExecuTorch version?)")
    for a, b in pairs:
        obs, fq = getattr(ptq, a.target), getattr(qat, b.target)
        if _qat.is_weight(b) or not hasattr(fq, "activation_post_process"):  # weights, and derived (bias) quantizers
            continue
        with fast_histogram_search():
            scale, zp = obs.calculate_qparams()
        inner = fq.activation_post_process
        lo, hi = inner.quant_min, inner.quant_max
        if inner.qscheme in (torch.per_tensor_symmetric, torch.per_channel_symmetric):
            half = scale * (hi - lo) / 2
            inner.min_val, inner.max_val = -half, half
        else:
            inner.min_val, inner.max_val = (lo - zp) * scale, (hi - zp) * scale
        fq.scale.copy_(scale.reshape(fq.scale.shape))
        fq.zero_point.copy_(zp.reshape(fq.zero_point.shape))
        fq.disable_observer()


def from_qat(captured, spec, shape, example):
    """The QAT ranges loaded into this shape's graph, frozen and converted; with the trained fake-quant graph's own
    logits on the probes (the QAT model's forward, which the integer graph must reproduce)."""
    import torch
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e

    qat = spec.options["qat"]
    prepared = qat_prepared(captured.static, example, compile_spec(spec.device), spec.precision,
                            raised=tuple(qat.get("int16") or ()))
    _qat.load(prepared, Path(qat["ranges"]), shape[0], qat["ranges_sha256"])
    with torch.no_grad():
        fq = [prepared(ids, mask).float() for ids, mask in captured.probes(shape, n=3)]
    return convert_pt2e(prepared), fq
