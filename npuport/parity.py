"""Parity arithmetic: two arrays of logits -> max |Δlogit|, max |Δscore| and decision agreement (numpy only).

A leaf: `verify` judges these figures against tolerances, runtimes' quantisers use them to gate a graph."""

from __future__ import annotations

import numpy as np

from .task import Task


def softmax_dev(logits: np.ndarray) -> np.ndarray:
    """The detector's view: P(deviation), the softmax probability of label 1."""
    return Task().scores(logits)[:, 1]


def compare(ref: np.ndarray, got: np.ndarray, task: Task | None = None) -> dict:
    """Figures for one set of rows: max|Δlogit|, max|Δscore| over every label (probability, sigmoid or regression
    value) and the share of rows whose decision is the same (regression has none: 1.0 by definition)."""
    task = task or Task()
    if np.isnan(got).any():
        return {"max_abs_logit_diff": float("nan"), "max_abs_prob_diff": float("nan"), "decision_agreement": 0.0,
                "n": int(len(ref)), "nan": True}
    dr, dg = task.decisions(ref), task.decisions(got)
    same = 1.0 if dr is None else float(np.mean((dr == dg).reshape(len(ref), -1).all(axis=1)))
    return {
        "max_abs_logit_diff": float(np.abs(ref - got).max()),
        "max_abs_prob_diff": float(np.abs(task.scores(ref) - task.scores(got)).max()),
        "decision_agreement": same,
        "n": int(len(ref)),
        "nan": False,
    }


def merge(parts: list[dict]) -> dict:
    n = sum(p["n"] for p in parts)
    return {
        "max_abs_logit_diff": max(p["max_abs_logit_diff"] for p in parts),
        "max_abs_prob_diff": max(p["max_abs_prob_diff"] for p in parts),
        "decision_agreement": sum(p["decision_agreement"] * p["n"] for p in parts) / n,
        "n": n,
        "nan": any(p["nan"] for p in parts),
    }


def agreement(ref: np.ndarray, got: np.ndarray, task: Task | None = None) -> tuple[float, float]:
    """(decision agreement, max |Δlogit|) of two logit arrays."""
    f = compare(ref, got, task)
    return f["decision_agreement"], f["max_abs_logit_diff"]
