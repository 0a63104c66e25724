"""The bar an integer artifact must clear before it is written, and what port does when it falls short.

`port --precision int8|int16 --eval-data FILE` compares the artifact's decisions with the fp32 reference on the eval
rows; below `--min-agreement` the artifact is refused (`refusal`). With `--keep-fp32 auto`, port does not stop at the
first refusal: it measures each quantisation group's cost alone (sensitivity, on the calibration rows), then keeps
the costliest group in float and quantises again, one group at a time, until the decisions clear the bar or nothing
is left to keep — the accuracy-control loop of NNCF's `quantize_with_accuracy_control` and optimum's, over npuport's
named groups (embeddings, layer.N, attention, ffn_out, head) on every runtime that measures sensitivity.
"""

from __future__ import annotations

from .runtimes import get_runtime as _runtime
from .spec import INTEGER_PRECISIONS, QuantOptions


def refusal(name: str, precision: str, figs: dict, quant: QuantOptions, meta: dict) -> dict | None:
    """An integer artifact whose decisions on the eval data fall below --min-agreement is refused, with the figure
    and what to try next (the groups that cost most when quantised alone, where they were measured)."""
    if precision not in INTEGER_PRECISIONS or quant.min_agreement <= 0 or "data" not in figs:
        return None
    agree = figs["data"]["decision_agreement"]
    if agree >= quant.min_agreement:
        return None
    sens = meta.get("sensitivity") or {}
    kept = list(meta.get("kept_fp32") or ())
    raises = _runtime(name).mixes_int16
    if raises:  # an integer NPU: raise groups to 16-bit activations instead of moving them off the chip
        kept = list(meta.get("int16") or ())
    worst = [g for g in ranked(sens) if g not in kept][:2]
    if raises:
        hint = (f"--int16 {','.join(kept + worst)} (the groups that cost most alone at 8-bit, see the report)" if worst
                else "--precision int16 (every activation at 16 bits), calibration rows like the ones you serve "
                     "(--calibration-data)" if quant.auto_keep or meta.get("int16_every_group") else
                "--keep-fp32 auto (raises the costliest groups to 16-bit activations until the decisions hold), or "
                "--precision int16")
    elif worst:
        hint = f"--keep-fp32 {','.join(kept + worst)} (the groups that cost most alone, see the report)"
    else:
        hint = ("--keep-fp32 auto (keeps the costliest groups in float until the decisions hold), or --sensitivity "
                "to see what each group costs")
        if "ffn_out" not in kept and _has_groups(name):  # the usual culprit (npuport/runtimes/_quantize.py FFN_OUT)
            hint = (f"--keep-fp32 {','.join([*kept, 'ffn_out'])} (every FFN down-projection in float: their inputs "
                    "carry the outliers), " + hint)
    if quant.method == "minmax" and "percentile" in _runtime(name).calibration_methods \
            and _runtime(name).smooth_quant is None:
        hint += ", or --calibration-method percentile"
    reason = (f"decision agreement {agree:.2%} on the eval data is below --min-agreement {quant.min_agreement:.2%} "
              f"(max |Δlogit| {figs['data']['max_abs_logit_diff']:.3g}); try {hint}")
    return {"refused": True, "pass": False, "reason": reason, "decision_agreement": agree,
            "max_abs_logit_diff": figs["data"]["max_abs_logit_diff"], "min_agreement": quant.min_agreement,
            "parity": figs, **({"sensitivity": sens} if sens else {})}


def _has_groups(runtime: str) -> bool:
    return _runtime(runtime).measures_sensitivity


def ranked(sens: dict) -> list[str]:
    """Groups, costliest first: fewest decisions kept when quantised alone, then the largest logit change."""
    return sorted(sens, key=lambda g: (sens[g]["decision_agreement"], -sens[g]["max_abs_logit_diff"]))


def next_group(sens: dict, kept: tuple[str, ...]) -> str | None:
    """`--keep-fp32 auto`: the costliest group still quantised, or None when every measured group is in float."""
    return next((g for g in ranked(sens) if g not in kept), None)


def quant_facts(meta: dict) -> dict:
    """How an integer artifact was quantised (and each group's cost alone, with --sensitivity), for report.md."""
    keys = ("quantization", "calibration", "calibration_method", "smooth_quant", "kept_fp32", "kept_by_default",
            "per_token", "per_token_by_default", "int16", "int16_by_default", "int8_table_tensors", "cost", "sensitivity",
            "auto_keep")
    facts = {k: meta[k] for k in keys if k in meta}
    return {"quant": facts} if facts else {}
