"""Classification metrics in numpy (no scikit-learn dependency for a handful of formulas)."""

from __future__ import annotations

import numpy as np


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Mann-Whitney U form of ROC-AUC, ties counted half. NaN when only one class is present."""
    y = np.asarray(labels).astype(bool)
    s = np.asarray(scores, dtype=np.float64)
    pos, neg = s[y], s[~y]
    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s), dtype=np.float64)
    sorted_s = s[order]
    i = 0
    while i < len(s):  # average ranks over ties
        j = i
        while j + 1 < len(s) and sorted_s[j + 1] == sorted_s[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return float((ranks[y].sum() - len(pos) * (len(pos) + 1) / 2.0) / (len(pos) * len(neg)))


def roc_curve(labels: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(labels).astype(bool)
    thr = np.unique(scores)[::-1]
    tpr = [0.0] + [float((scores[y] >= t).mean()) if y.any() else 0.0 for t in thr]
    fpr = [0.0] + [float((scores[~y] >= t).mean()) if (~y).any() else 0.0 for t in thr]
    return np.array(fpr), np.array(tpr)


def calibration(labels: np.ndarray, probs: np.ndarray, bins: int = 10) -> tuple[float, list[dict]]:
    """Expected calibration error over equal-width bins of P(deviation), and the per-bin table."""
    y = np.asarray(labels, dtype=np.float64)
    p = np.asarray(probs, dtype=np.float64)
    edges = np.linspace(0.0, 1.0, bins + 1)
    ece, table = 0.0, []
    for k in range(bins):
        sel = (p >= edges[k]) & ((p < edges[k + 1]) if k < bins - 1 else (p <= edges[k + 1]))
        if not sel.any():
            continue
        conf, acc = float(p[sel].mean()), float(y[sel].mean())
        ece += sel.mean() * abs(conf - acc)
        table.append({"lo": float(edges[k]), "hi": float(edges[k + 1]), "n": int(sel.sum()), "mean_prob": conf, "frac_positive": acc})
    return float(ece), table


def classification_metrics(labels, probs, threshold: float = 0.5) -> dict:
    y = np.asarray(labels).astype(int)
    p = np.asarray(probs, dtype=np.float64)
    pred = (p >= threshold).astype(int)
    tp = int(((pred == 1) & (y == 1)).sum())
    tn = int(((pred == 0) & (y == 0)).sum())
    fp = int(((pred == 1) & (y == 0)).sum())
    fn = int(((pred == 0) & (y == 1)).sum())
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    ece, _ = calibration(y, p)
    return {
        "n": int(len(y)), "accuracy": (tp + tn) / len(y), "precision": precision, "recall": recall, "f1": f1,
        "roc_auc": roc_auc(y, p), "ece": ece, "threshold": float(threshold),
        "confusion_matrix": {"tn": tn, "fp": fp, "fn": fn, "tp": tp}, "positive_fraction": float(y.mean()),
    }


def best_threshold(labels, probs) -> float:
    """The threshold (among midpoints of observed probabilities, plus 0.5) with the highest F1; ties -> closest to 0.5."""
    p = np.unique(np.asarray(probs, dtype=np.float64))
    cands = np.unique(np.concatenate([[0.5], (p[:-1] + p[1:]) / 2 if len(p) > 1 else p]))
    # Extreme thresholds fit validation noise and transfer badly to new personas: stay within [0.1, 0.9].
    cands = cands[(cands >= 0.1) & (cands <= 0.9)]
    best, best_f1 = 0.5, -1.0
    for t in cands:
        f1 = classification_metrics(labels, probs, float(t))["f1"]
        if f1 > best_f1 + 1e-12 or (abs(f1 - best_f1) <= 1e-12 and abs(t - 0.5) < abs(best - 0.5)):
            best, best_f1 = float(t), f1
    return best
