"""Parity figures beside max|Δ|: PSNR of the logits and top-1 agreement (Qualcomm AI Hub's comparison figures)."""

import math

import numpy as np
import pytest

from npuport.parity import compare, merge
from npuport.porting import parity_summary
from npuport.task import Task


def _logits(n=50, seed=0, labels=2):
    return np.random.default_rng(seed).normal(0, 3, (n, labels)).astype(np.float32)


def test_identical_logits_have_no_finite_psnr_and_full_top1():
    ref = _logits()
    f = compare(ref, ref.copy())
    assert f["max_abs_logit_diff"] == 0 and f["logit_mse"] == 0
    assert f["psnr_db"] is None and f["top1_agreement"] == 1.0


def test_psnr_is_ten_log10_peak_squared_over_mse():
    ref = _logits()
    got = ref + np.float32(0.01)  # every logit off by 0.01: MSE 1e-4
    f = compare(ref, got)
    peak = float(np.abs(ref).max())
    assert f["psnr_db"] == pytest.approx(10 * math.log10(peak**2 / 1e-4), abs=0.02)
    worse = compare(ref, ref + np.float32(0.1))
    assert worse["psnr_db"] == pytest.approx(f["psnr_db"] - 20, abs=0.02)  # 10× the error: 20 dB less


def test_merged_parts_give_the_figures_of_all_rows_at_once():
    ref, noise = _logits(40), np.random.default_rng(1).normal(0, 0.5, (40, 2)).astype(np.float32)
    got = ref + noise
    whole, parts = compare(ref, got), [compare(ref[:13], got[:13]), compare(ref[13:], got[13:])]
    m = merge(parts)
    assert m["psnr_db"] == pytest.approx(whole["psnr_db"], abs=0.01)
    assert m["top1_agreement"] == pytest.approx(whole["top1_agreement"])
    assert m["decision_agreement"] == pytest.approx(whole["decision_agreement"])


def test_top1_is_the_argmax_not_the_detectors_threshold():
    # P(deviation) 0.4 in both: decision at threshold 0.3 is 1 in both; the argmax flips between them
    ref = np.log(np.array([[0.6, 0.4]], dtype=np.float32))
    got = np.log(np.array([[0.45, 0.55]], dtype=np.float32))
    f = compare(ref, got, Task(threshold=0.3))
    assert f["decision_agreement"] == 1.0 and f["top1_agreement"] == 0.0


@pytest.mark.parametrize("problem_type", ["multi_label_classification", "regression"])
def test_top1_is_not_claimed_where_there_is_no_single_label(problem_type):
    ref = _logits(labels=3)
    task = Task(problem_type=problem_type, labels=("a", "b", "c"))
    f = compare(ref, ref + np.float32(0.01), task)
    assert f["top1_agreement"] is None and f["psnr_db"] is not None
    assert merge([f, f])["top1_agreement"] is None


def test_nan_output_has_no_psnr_and_the_summary_takes_the_worst_part():
    ref = _logits()
    assert compare(ref, np.full_like(ref, np.nan))["psnr_db"] is None
    good, bad = compare(ref, ref + np.float32(0.001)), compare(ref, ref + np.float32(0.1))
    s = parity_summary({"probes": {**good, "pass": True}, "data": {**bad, "pass": True}})
    assert s["psnr_db"] == bad["psnr_db"] and s["top1_agreement"] == min(good["top1_agreement"], bad["top1_agreement"])
