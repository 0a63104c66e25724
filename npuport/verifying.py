"""Parity: compiled artifact vs the eager fp32 reference, on probes and (optionally) a labelled data set.

Figures: max|Δlogit|, max|Δprob| (probability of `deviation`), decision agreement. Tolerances live in one
table keyed by precision; a runtime whose arithmetic differs declares its own rows (`Runtime.tolerances`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .models.detector import Detector
from .parity import compare, merge
from .router import BucketRouter
from .runtimes import Session, feeds_of, get_runtime, runtime_names
from .task import Task


@dataclass(frozen=True)
class Tolerance:
    logit: float
    prob: float
    agreement: float


TOLERANCES: dict[tuple[str, str], Tolerance] = {
    ("*", "fp32"): Tolerance(logit=1e-4, prob=1e-4, agreement=1.0),
    ("*", "fp16"): Tolerance(logit=5e-2, prob=2e-2, agreement=0.99),
    ("*", "bf16"): Tolerance(logit=1.5e-1, prob=4e-2, agreement=0.99),
    ("*", "int8"): Tolerance(logit=5e-1, prob=1e-1, agreement=0.99),
    # 16-bit activations, 8-bit weights (QNN a16w8, Ethos-U int16): 8-bit weight rounding dominates. Measured on the
    # demo detector at 1 x 64 (QNN, attention mask kept in float, 20 rows): |Δlogit| 0.77 where logits sit at ±8-10,
    # |Δprob| 1.0e-2, decisions 100% — a confident logit moves a lot while its probability hardly does. (At buckets
    # 64 + 128 on 40 rows it does not hold: 97.5% decisions, benchmarks/results/npu_port.json.)
    ("*", "int16"): Tolerance(logit=1.0, prob=5e-2, agreement=0.99),
}


def tolerance(runtime: str, precision: str) -> Tolerance:
    """The table's row for `precision`, unless the runtime declares its own (`Runtime.tolerances`: an accelerator
    whose arithmetic differs, like an fp16 HTP that accumulates in fp16)."""
    own = get_runtime(runtime).tolerances.get(precision) if runtime in runtime_names() else None
    return Tolerance(**own) if own else TOLERANCES[("*", precision)]


def judge_decisions(fig: dict, bar: float, scores: bool = True) -> dict:
    """An integer artifact checked on eval data is judged by the bar it was ported under (`--min-agreement`): its
    decisions on the data, and no NaN anywhere. Its logit and probability changes are recorded, not gated: a trained
    detector's confident logits move by more than any fixed logit tolerance under int8 while its decisions hold
    (demo detector, OpenVINO int8: max |Δlogit| 0.6-1.8 at 99.4-100 % decisions), so a table tolerance would call
    FAIL what the gate wrote. `scores=False`: the random-token probes, judged on NaN only (see `judge`)."""
    ok = not fig["nan"] and (not scores or fig["decision_agreement"] >= bar)
    return {**fig, "decision_bar": bar, **({} if scores else {"scores_judged_on": "data"}), "pass": bool(ok)}


def judge_by(fig: dict, runtime: str, precision: str, bar: float | None, scores: bool = True) -> dict:
    """`judge_decisions` against `bar` where an integer artifact was gated on data, else the tolerance table."""
    return judge(fig, runtime, precision, scores) if bar is None else judge_decisions(fig, bar, scores)


def judge(fig: dict, runtime: str, precision: str, scores: bool = True) -> dict:
    """Within the (runtime, precision) tolerances? `scores=False`: probabilities and decisions are reported, not
    gated (NaN and the logit tolerance still are) — used for the random-token probes of a lossy precision when real
    data is judged too. Such probes sit at margins near zero, where P(deviation) moves fastest (a quarter of the
    logit change) and any quantisation flips a coin; and a calibrated graph never saw their token mix, so their
    activations clip at the calibrated ranges (tiny detector, QNN: |Δlogit| 0.17 on probes at int8 and int16 alike,
    1e-3 on the data). Probabilities and decisions are judged where they mean something: the eval data."""
    tol = tolerance(runtime, precision)
    ok = (
        not fig["nan"]
        and fig["max_abs_logit_diff"] <= tol.logit
        and (not scores or fig["max_abs_prob_diff"] <= tol.prob)
        and (not scores or fig["decision_agreement"] >= tol.agreement)
    )
    return {**fig, "tolerance": tol.__dict__, **({} if scores else {"scores_judged_on": "data"}),
            "pass": bool(ok)}


def eager_logits(model: Detector, rows: list[np.ndarray], batch: int = 32) -> np.ndarray:
    """Reference: every row at its exact length (no padding), fp32.

    Rows of the same length run together (up to `batch` per call, still no padding): one row per call left the
    GEMMs too small to use the cores (the demo's 660 test rows: 27 s one by one, measured in the port stage). A row's
    logits do not depend on its batch neighbours beyond float summation order (~1e-7)."""
    from itertools import groupby

    arrays = [np.asarray(r, dtype=np.int64) for r in rows]
    out: list = [None] * len(arrays)
    with torch.no_grad():
        for _, same in groupby(sorted(range(len(arrays)), key=lambda i: len(arrays[i])), key=lambda i: len(arrays[i])):
            same = list(same)
            for s in range(0, len(same), batch):
                idx = same[s : s + batch]
                ids = torch.from_numpy(np.stack([arrays[i] for i in idx]))
                for i, logits in zip(idx, model(ids, torch.ones_like(ids)).float().numpy()):
                    out[i] = logits
    return np.stack(out)


def rows_sha256(rows: list[np.ndarray]) -> str:
    """sha256 over the token rows, in order (each row's length and int64 ids): identical rows <=> identical hash."""
    import hashlib

    h = hashlib.sha256()
    for r in rows:
        a = np.ascontiguousarray(r, dtype=np.int64)
        h.update(len(a).to_bytes(8, "little"))
        h.update(a.tobytes())
    return h.hexdigest()


@dataclass(frozen=True)
class EagerReference:
    """`eager_logits` of one model on one list of rows, with what identifies both: a caller that already ran the
    model on the --eval-data rows (the demo's evaluation) hands this to `port`, which takes the logits only when its
    own model's state fingerprint and its own rows hash the same - the same weights, the same rows, the same
    function - and otherwise computes them itself."""

    source_sha256: str  # models.detector.state_fingerprint of the model that computed them
    rows_sha256: str
    logits: np.ndarray

    @classmethod
    def of(cls, model: Detector, rows: list[np.ndarray]) -> EagerReference:
        from .models.detector import state_fingerprint

        return cls(state_fingerprint(model), rows_sha256(rows), eager_logits(model, rows))

    def matches(self, source_sha256: str, rows: list[np.ndarray]) -> bool:
        return (self.source_sha256 == source_sha256 and len(self.logits) == len(rows)
                and self.rows_sha256 == rows_sha256(rows))


CHANGED_ROWS_SHOWN = 20  # the first rows (0-based, in the data's order) whose decision changed


def probe_parity(session: Session, probes: dict, refs: dict, task: Task) -> dict:
    parts = []
    for shape, plist in probes.items():
        for (ids, mask), ref in zip(plist, refs[shape]):
            got = session.run(feeds_of(ids.numpy(), mask.numpy()))
            parts.append(compare(ref, got, task))
    return merge(parts)


def data_parity(session: Session, router: BucketRouter, rows: list[np.ndarray], ref: np.ndarray, task: Task) -> dict:
    routed = router.run(session, rows)
    figs = compare(ref, routed.logits, task)
    dr, dg = task.decisions(ref), task.decisions(routed.logits)
    if dr is not None:  # which rows changed: a user looks at them (often near the threshold) before trusting a port
        changed = np.flatnonzero(~(dr == dg).reshape(len(ref), -1).all(axis=1))
        figs["changed_rows"] = [int(i) for i in changed[:CHANGED_ROWS_SHOWN]]
    return figs
