"""What a model's logits mean: the problem type, the label names and the decision rule, in one place.

Used by parity checks (which probabilities and decisions must agree), `serve` (what a response says) and reports.
The persona-deviation detector is one binary single-label task whose label 1 is `deviation`; a stock Hugging Face
classifier brings its own `problem_type` and `id2label`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import ConfigError

SINGLE = "single_label_classification"
MULTI = "multi_label_classification"
REGRESSION = "regression"
PROBLEM_TYPES = (SINGLE, MULTI, REGRESSION)
DETECTOR_LABELS = ("in_persona", "deviation")


@dataclass(frozen=True)
class Task:
    problem_type: str = SINGLE
    labels: tuple[str, ...] = DETECTOR_LABELS
    threshold: float = 0.5  # binary single-label: on P(label 1); multi-label: on each label's sigmoid

    def __post_init__(self):
        if self.problem_type not in PROBLEM_TYPES:
            raise ConfigError(f"problem_type {self.problem_type!r}: use one of {', '.join(PROBLEM_TYPES)}")
        if not self.labels:
            raise ConfigError("a task needs at least one label")

    @classmethod
    def from_spec(cls, spec: dict) -> "Task":
        """From a manifest's / config's head spec (older artifacts have no problem_type: the binary detector)."""
        labels = tuple(spec.get("labels") or DETECTOR_LABELS)
        return cls(problem_type=spec.get("problem_type") or SINGLE, labels=labels,
                   threshold=float(spec.get("threshold", 0.5)))

    @property
    def is_detector(self) -> bool:
        """The persona-deviation view (`deviation_probability`) applies."""
        return self.problem_type == SINGLE and self.labels == DETECTOR_LABELS

    @property
    def binary(self) -> bool:
        return self.problem_type == SINGLE and len(self.labels) == 2

    def scores(self, logits: np.ndarray) -> np.ndarray:
        """(N, L) logits -> (N, L) what users read: softmax, per-label sigmoid, or the regression values."""
        z = np.asarray(logits, dtype=np.float64)
        if self.problem_type == SINGLE:
            z = z - z.max(axis=-1, keepdims=True)
            e = np.exp(z)
            return e / e.sum(axis=-1, keepdims=True)
        if self.problem_type == MULTI:
            return 1.0 / (1.0 + np.exp(-z))
        return z

    def decisions(self, logits: np.ndarray) -> np.ndarray | None:
        """(N,) class indices (binary: P(label 1) >= threshold), (N, L) booleans for multi-label, None for
        regression (no decision to agree on)."""
        s = self.scores(logits)
        if self.problem_type == SINGLE:
            return (s[:, 1] >= self.threshold).astype(np.int64) if self.binary else s.argmax(axis=-1)
        if self.problem_type == MULTI:
            return s >= self.threshold
        return None

    def describe(self, logits_row: np.ndarray) -> dict:
        """One row as a response: the label(s) and every label's score."""
        row = np.asarray(logits_row)[None]
        s = self.scores(row)[0]
        scores = {name: float(v) for name, v in zip(self.labels, s)}
        d = self.decisions(row)
        if d is None:
            return {"scores": scores}
        if self.problem_type == MULTI:
            return {"labels": [n for n, on in zip(self.labels, d[0]) if on], "scores": scores}
        return {"label": self.labels[int(d[0])], "scores": scores}
