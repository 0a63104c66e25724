"""Parity arithmetic: two arrays of logits -> max |Δlogit|, max |Δscore|, decision agreement, and the figures
Qualcomm AI Hub compares outputs by: PSNR of the logits and top-1 agreement (numpy only).

A leaf: `verify` judges these figures against tolerances, runtimes' quantisers use them to gate a graph."""

from __future__ import annotations

import numpy as np

from .task import SINGLE, Task


def softmax_dev(logits: np.ndarray) -> np.ndarray:
    """The detector's view: P(deviation), the softmax probability of label 1."""
    return Task().scores(logits)[:, 1]


def compare(ref: np.ndarray, got: np.ndarray, task: Task | None = None) -> dict:
    """Figures for one set of rows: max|Δlogit|, max|Δscore| over every label (probability, sigmoid or regression
    value) and the share of rows whose decision is the same (regression has none: 1.0 by definition)."""
    task = task or Task()
    if np.isnan(got).any():
        return {"max_abs_logit_diff": float("nan"), "max_abs_prob_diff": float("nan"), "decision_agreement": 0.0,
                "n": int(len(ref)), "nan": True, "psnr_db": None, "top1_agreement": 0.0 if _has_top1(ref, task) else None,
                "logit_mse": float("nan"), "logit_peak": float(np.abs(ref).max())}
    dr, dg = task.decisions(ref), task.decisions(got)
    same = 1.0 if dr is None else float(np.mean((dr == dg).reshape(len(ref), -1).all(axis=1)))
    d = np.asarray(ref, dtype=np.float64) - np.asarray(got, dtype=np.float64)
    mse, peak = float(np.mean(d * d)), float(np.abs(ref).max())
    return {
        "max_abs_logit_diff": float(np.abs(d).max()),
        "max_abs_prob_diff": float(np.abs(task.scores(ref) - task.scores(got)).max()),
        "decision_agreement": same,
        "n": int(len(ref)),
        "nan": False,
        "psnr_db": psnr_db(mse, peak),
        "top1_agreement": float(np.mean(ref.argmax(-1) == got.argmax(-1))) if _has_top1(ref, task) else None,
        "logit_mse": mse,
        "logit_peak": peak,
    }


def psnr_db(mse: float, peak: float) -> float | None:
    """PSNR of the logits in dB, 10·log10(peak² / MSE) with peak the reference's largest |logit| (AI Hub's form);
    None where the logits are identical (MSE 0: infinite, which JSON cannot hold; max|Δlogit| 0 says it)."""
    if not np.isfinite(mse) or mse <= 0:
        return None
    return round(float(10 * np.log10(max(peak, 1e-30) ** 2 / mse)), 2)


def _has_top1(ref: np.ndarray, task: Task) -> bool:
    """Top-1 (the highest logit's class) means something for single-label classification with 2+ labels; the
    detector's decision is its threshold on P(deviation), which top-1 equals only at threshold 0.5."""
    return task.problem_type == SINGLE and np.ndim(ref) == 2 and ref.shape[-1] > 1


def merge(parts: list[dict]) -> dict:
    n = sum(p["n"] for p in parts)
    # every row has the same number of logits, so the rows' mean squared error is the row-weighted mean of the parts'
    mse = sum(p.get("logit_mse", float("nan")) * p["n"] for p in parts) / n
    peak = max(p.get("logit_peak", float("nan")) for p in parts)
    top1 = [p.get("top1_agreement") for p in parts]
    return {
        "max_abs_logit_diff": max(p["max_abs_logit_diff"] for p in parts),
        "max_abs_prob_diff": max(p["max_abs_prob_diff"] for p in parts),
        "decision_agreement": sum(p["decision_agreement"] * p["n"] for p in parts) / n,
        "n": n,
        "nan": any(p["nan"] for p in parts),
        "psnr_db": psnr_db(mse, peak),
        "top1_agreement": None if None in top1 else sum(t * p["n"] for t, p in zip(top1, parts)) / n,
        "logit_mse": mse,
        "logit_peak": peak,
    }


def agreement(ref: np.ndarray, got: np.ndarray, task: Task | None = None) -> tuple[float, float]:
    """(decision agreement, max |Δlogit|) of two logit arrays."""
    f = compare(ref, got, task)
    return f["decision_agreement"], f["max_abs_logit_diff"]
