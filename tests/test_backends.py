"""Every registered backend: port a tiny real ModernBERT with buckets and batch sizes, then check parity at the
compiled shapes, through the bucket router at lengths that were not compiled, and with heavy padding."""

import numpy as np
import pytest
import torch

from npuport.api import ModelSource, PortConfig, VerifyConfig, port, verify
from npuport.artifact import load_session
from npuport.models.detector import load_detector
from npuport.router import BucketRouter
from npuport.runtimes import ShapeSpec, feeds_of
from npuport.runtimes import get_runtime as get_backend
from npuport.runtimes import runtime_names as backend_names
from npuport.verifying import eager_logits

# Every registered runtime that builds artifacts must appear in one of these two; test_every_backend_has_a_parity_test
# enforces it. A runtime that cannot be installed here is listed with the reason, never counted as covered.
PARITY_TESTED = ["eager", "onnxruntime", "openvino", "inductor", "iree"]
# fp32 is what the fixture below ports; these runtimes have no fp32 and are tested at their own precisions.
TESTED_ELSEWHERE = {"qnn": "tests/test_qnn.py: fp16, int8, int16 on the HTP simulator",
                    "ethos-u": "tests/test_ethosu.py: int8 in the TOSA reference model, Vela figures"}
OUT_OF_REACH = {"rbln": "Rebellions SDK: private package index and an ATOM board; run tests/ where it is installed"}
SHAPES = ShapeSpec(batch_sizes=(1, 3), buckets=(16, 40))


def test_every_backend_has_a_parity_test():
    missing = set(backend_names(ports=True)) - set(PARITY_TESTED) - set(TESTED_ELSEWHERE) - set(OUT_OF_REACH)
    assert not missing, f"registered runtimes without a parity test: {missing}"


@pytest.mark.skipif(not __import__("os").environ.get("CI"), reason="CI installs every runtime; a developer may not")
def test_ci_has_every_tested_runtime():
    """In CI a missing runtime would turn its parity tests into skips: refuse that instead."""
    absent = {n: get_backend(n).available()[1] for n in [*PARITY_TESTED, *TESTED_ELSEWHERE] if not get_backend(n).available()[0]}
    assert not absent, f"CI must install every runtime it tests: {absent}"


@pytest.fixture(scope="module")
def ported(tiny_model_dir, eval_jsonl, tmp_path_factory):
    names = [b for b in PARITY_TESTED if get_backend(b).available()[0]]
    out = tmp_path_factory.mktemp("port") / "out"
    report = port(PortConfig(source=ModelSource(model_dir=str(tiny_model_dir)), out=str(out), runtimes=tuple(names),
                             shapes=SHAPES, eval_data=str(eval_jsonl), bench_runs=2))
    return out, report


def _skip_unavailable(name):
    ok, reason = get_backend(name).available()
    if not ok:
        pytest.skip(f"{name}: {reason}")


def test_port_takes_a_given_eager_reference_only_for_its_own_weights_and_rows(tiny_model_dir, eval_jsonl, tmp_path):
    """The demo hands its evaluation's eager logits on the test split to the port (api.port eval_reference). The
    port takes them only when they are of its model's weights and of its own rows: logits tampered with but keyed
    right show up as failed parity (so they were read, not recomputed); a reference of other rows or of other
    weights is ignored and the port computes its own."""
    import dataclasses

    from npuport.detector.data import encode, load_examples
    from npuport.models.detector import load_tokenizer
    from npuport.verifying import EagerReference

    shapes = ShapeSpec(batch_sizes=(1,), buckets=(16, 40))
    model = load_detector(tiny_model_dir)
    rows = encode(load_tokenizer(tiny_model_dir), load_examples(eval_jsonl), shapes.buckets[-1])
    good = EagerReference.of(model, rows)
    np.testing.assert_array_equal(good.logits, eager_logits(model, rows))

    def run(ref, name):
        return port(PortConfig(source=ModelSource(model_dir=str(tiny_model_dir)), out=str(tmp_path / name),
                               runtimes=("onnxruntime",), shapes=shapes, eval_data=str(eval_jsonl),
                               capture_methods=("trace",), bench_runs=1), eval_reference=ref)

    tampered = run(dataclasses.replace(good, logits=good.logits + np.array([5.0, -5.0], dtype=np.float32)), "tampered")
    assert tampered["eval_reference"] == "given"
    assert not tampered["backends"]["onnxruntime"]["fp32"]["pass"]
    for name, ref in {"other-rows": EagerReference.of(model, rows[:-1]),
                      "other-weights": dataclasses.replace(good, source_sha256="0" * 64), "none": None}.items():
        report = run(ref, name)
        assert report["eval_reference"] == "computed", name
        assert report["backends"]["onnxruntime"]["fp32"]["pass"], name


def test_evaluation_scored_by_the_eager_reference_matches_evaluate(tiny_model_dir, eval_jsonl):
    """The demo's evaluation scores the test split with the port's reference function (every row unpadded) so the
    port can take those logits: its metrics are evaluate's (padded batches) to float rounding, and its reference is
    eager_logits of the same rows."""
    from npuport.detector.data import encode, load_examples
    from npuport.detector.evaluate import EvalConfig, evaluate, evaluate_with_reference
    from npuport.models.detector import load_tokenizer, state_fingerprint

    cfg = EvalConfig(model_dir=str(tiny_model_dir), data=str(eval_jsonl))
    plain = evaluate(cfg)
    scored, ref = evaluate_with_reference(cfg)
    for k in ("f1", "accuracy", "precision", "recall", "n", "confusion_matrix"):
        assert scored[k] == plain[k], k
    assert scored["roc_auc"] == pytest.approx(plain["roc_auc"], abs=1e-9)
    model = load_detector(tiny_model_dir)
    rows = encode(load_tokenizer(tiny_model_dir), load_examples(eval_jsonl), model.spec.max_length)
    assert ref.matches(state_fingerprint(model), rows)
    np.testing.assert_array_equal(ref.logits, eager_logits(model, rows))


@pytest.mark.parametrize("name", PARITY_TESTED)
def test_port_parity(ported, name):
    _skip_unavailable(name)
    out, report = ported
    r = report["backends"][name]["fp32"]
    assert r["pass"], r
    assert r["max_abs_logit_diff"] <= 1e-4 and r["decision_agreement"] == 1.0
    assert r["parity"]["data"]["n"] == 12  # every eval row went through the router


@pytest.mark.parametrize("name", PARITY_TESTED)
def test_router_at_uncompiled_lengths(ported, tiny_model_dir, name):
    _skip_unavailable(name)
    out, _ = ported
    manifest, session = load_session(out / f"{name}-fp32")
    model = load_detector(tiny_model_dir)
    g = np.random.default_rng(0)
    lengths = [3, 9, 16, 17, 33, 40, 2, 25]  # 7 rows of bucket 40 -> batches 3+3+1
    rows = [np.concatenate([[2], g.integers(10, model.config.vocab_size, n - 2), [3]]) for n in lengths]
    router = BucketRouter(session.shapes, manifest.pad_token_id)
    routed = router.run(session, rows)
    ref = eager_logits(model, rows)
    torch.testing.assert_close(torch.from_numpy(routed.logits), torch.from_numpy(ref), rtol=1e-4, atol=1e-5)
    assert routed.buckets == [16, 16, 16, 40, 40, 40, 16, 40]
    assert router.plan(7) == [3, 3, 1]


@pytest.mark.parametrize("name", PARITY_TESTED)
def test_heavy_padding_no_nan(ported, name):
    _skip_unavailable(name)
    out, _ = ported
    manifest, session = load_session(out / f"{name}-fp32")
    ids = np.zeros((3, 40), dtype=np.int64)
    mask = np.zeros_like(ids)
    ids[:, 0], mask[:, 0] = 2, 1  # one real token per row, 39 pads; row 2 fully real
    ids[2], mask[2] = 7, 1
    got = session.run(feeds_of(ids, mask))
    assert np.isfinite(got).all()


def test_verify_passes_and_report_fields(ported, eval_jsonl):
    out, report = ported
    for m in ("trace", "export", "onnx"):
        assert report["capture"][m]["max_abs_diff"] is not None
    assert report["capture"]["trace"]["max_abs_diff"] == 0.0
    for name, per in report["backends"].items():
        for k in ("max_abs_logit_diff", "max_abs_prob_diff", "decision_agreement", "p50_ms"):
            assert k in per["fp32"]
    res = verify(VerifyConfig(path=str(out), eval_data=str(eval_jsonl)))
    assert res["pass"], res
    assert (out / "report.md").read_text().count("PASS") >= len(report["backends"])


def test_shared_weights_one_file(ported):
    """Buckets share one copy of the weights: one ONNX data file, one IR, one package."""
    out, _ = ported
    assert len(list((out / "onnxruntime-fp32").glob("*.onnx"))) == 1
    if (out / "openvino-fp32").exists():
        assert len(list((out / "openvino-fp32").glob("*.bin"))) == 1
    if (out / "inductor-fp32").exists():
        assert len(list((out / "inductor-fp32").glob("*.pt2"))) == 1


def test_an_integer_artifact_gated_on_data_is_judged_by_its_decision_bar_not_a_logit_tolerance():
    """int8 on a trained detector: confident logits move by more than the table's int8 logit tolerance while the
    decisions hold. Ported with --eval-data and --min-agreement, the bar is the decisions (NaN still fails)."""
    from npuport.verifying import judge, judge_decisions, tolerance

    fig = {"max_abs_logit_diff": tolerance("onnxruntime", "int8").logit * 4, "max_abs_prob_diff": 0.5,
           "decision_agreement": 0.996, "n": 500, "nan": False}
    assert not judge(fig, "onnxruntime", "int8")["pass"]  # the table alone would call it FAIL
    held = judge_decisions(fig, 0.995)
    assert held["pass"] and held["decision_bar"] == 0.995
    assert not judge_decisions({**fig, "decision_agreement": 0.994}, 0.995)["pass"]
    assert not judge_decisions({**fig, "nan": True}, 0.995)["pass"]
    probes = judge_decisions({**fig, "decision_agreement": 0.5}, 0.995, scores=False)  # random probes: reported only
    assert probes["pass"] and probes["scores_judged_on"] == "data"
    assert not judge_decisions({**fig, "nan": True}, 0.995, scores=False)["pass"]


def test_probes_of_a_lossy_precision_keep_the_logit_gate_when_data_judges_scores():
    """Random-token probes of an int8 artifact: probabilities and decisions are reported, judged on the data; a
    logit drift past the tolerance or a NaN still fails them, and without data everything is gated."""
    from npuport.verifying import judge, tolerance

    tol = tolerance("onnxruntime", "int8")
    fig = {"max_abs_logit_diff": tol.logit / 2, "max_abs_prob_diff": tol.prob * 2, "decision_agreement": 0.5,
           "n": 3, "nan": False}
    assert not judge(fig, "onnxruntime", "int8")["pass"]
    loose = judge(fig, "onnxruntime", "int8", scores=False)
    assert loose["pass"] and loose["scores_judged_on"] == "data"
    assert not judge({**fig, "max_abs_logit_diff": tol.logit * 1.01}, "onnxruntime", "int8", scores=False)["pass"]
    assert not judge({**fig, "nan": True}, "onnxruntime", "int8", scores=False)["pass"]


def test_eager_reference_batches_equal_lengths_and_keeps_row_order(tiny_model_dir):
    """The eager reference runs rows of one length together (no padding): each row's logits are the ones it gets
    alone, in the caller's order, whatever the grouping (batches split at `batch` and at every length change)."""
    model = load_detector(tiny_model_dir)
    g = np.random.default_rng(1)
    lengths = [7, 12, 7, 30, 12, 7, 7, 30, 5]
    rows = [np.concatenate([[2], g.integers(10, model.config.vocab_size, n - 2), [3]]) for n in lengths]
    alone = []
    with torch.no_grad():
        for r in rows:
            ids = torch.from_numpy(r)[None]
            alone.append(model(ids, torch.ones_like(ids)).float().numpy()[0])
    for batch in (1, 2, 32):
        got = eager_logits(model, rows, batch=batch)
        assert got.shape == (len(rows), len(alone[0]))
        np.testing.assert_allclose(got, np.stack(alone), rtol=0, atol=1e-5)
