"""P12: the detector's training step as static graphs (one per length bucket) on every runtime that runs graphs.

Tier 1: every gradient of the captured (gather-free, split) gradient graph vs torch.autograd on the eager Detector.
Tier 2: parameters and both Adam moments after steps 1 and 3 vs the eager trainer's own optimizer
        (detector/train.py `_optimizer`: no decay on biases and norms, the head at --head-lr) + clip_grad_norm_.
Tier 3: a 50-step loss trajectory over two buckets vs the same schedule in eager PyTorch.
The reference side never goes through npuport's step code: it is the model as users call it and torch's AdamW.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

from npuport.detector.config import DetectorTrainConfig
from npuport.detector.epochs import _optimizer, freeze_below
from npuport.detector.static_train import detector_slots, static_batches
from npuport.models.detector import build_preset
from npuport.runtimes import get_runtime
from npuport.static.adapters import adapt
from npuport.train.capture import GATHER_LIKE
from npuport.train.select import open_step_runner, training_runtimes
from npuport.train.step import ClassifierObjective, OptimConfig

GRAPH_BACKENDS = [b for b in training_runtimes() if not b.startswith("eager") and get_runtime(b).runs_graphs]
BATCH, BUCKETS, LR, HEAD_LR, WD = 4, (16, 32), 2e-3, 6e-3, 0.01
OPT = OptimConfig(beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=WD, max_grad_norm=1.0)
# ModernBERT on every runtime; the BERT family (token-type gather, unused pooler) on ONNX Runtime, to bound CI time
CASES = [(b, "tiny-modernbert") for b in GRAPH_BACKENDS] + [(b, "tiny-bert") for b in GRAPH_BACKENDS if b == "onnxruntime"]


def model_of(preset):
    # two layers, one global and one sliding-window (CI time: each runtime compiles every layer of every step graph)
    return build_preset(preset, seed=3, vocab_size=120, pad_token_id=0, num_hidden_layers=2)


def batches(n, seed=0):
    """Rows of 5..30 tokens (both buckets), labels from a rule the model can learn; static (B, bucket) batches."""
    rng = np.random.default_rng(seed)
    rows = [np.concatenate([[2], rng.integers(5, 120, int(rng.integers(3, 29))), [3]]) for _ in range(n)]
    labels = np.array([int(r[1] > 60) for r in rows], np.int64)
    return static_batches(rows, labels, rng.permutation(n), BATCH, BUCKETS, 0, rng)


def runner_for(backend, model, tmp, *, form="fused", gather_free=False, buckets=BUCKETS, graphs=None):
    """graphs: where step graphs are exported (shared between runtimes, as ranks share them); tmp: what it compiles."""
    static, _ = adapt(model)
    return open_step_runner(backend, static, OPT, batch=BATCH, seq_len=buckets[-1], seq_lens=buckets, form=form,
                            objective=ClassifierObjective(2, gather_free=gather_free),
                            slots=detector_slots(static, HEAD_LR / LR), workdir=graphs or tmp, compiled_dir=tmp,
                            threads=2)


def reference_loss(model, ids, mask, labels, weights):
    keep = torch.as_tensor(weights) > 0  # filler rows are simply absent on the reference side
    logits = model(torch.as_tensor(ids)[keep], torch.as_tensor(mask)[keep])
    return torch.nn.functional.cross_entropy(logits, torch.as_tensor(labels)[keep])


@pytest.fixture(scope="module", params=CASES, ids=lambda x: f"{x[0]}-{x[1]}")
def case(request, tmp_path_factory, step_graph_dir):
    backend, preset = request.param
    model = model_of(preset)
    runners = {
        "fused": runner_for(backend, copy.deepcopy(model), tmp_path_factory.mktemp("fused"), graphs=step_graph_dir),
        # one bucket for the split form (CI time: every graph is a compile); the fused form covers two
        "split-npu": runner_for(backend, copy.deepcopy(model), tmp_path_factory.mktemp("split"), form="split",
                                gather_free=True, buckets=BUCKETS[:1], graphs=step_graph_dir),
    }
    yield backend, preset, runners
    for r in runners.values():  # sessions released here, not by the cyclic collector at some later test's gc
        r.close()


def plan_for(runner, n, seed=0):
    """Static batches of the lengths this runner was compiled for."""
    return [b for b in batches(n, seed) if b[0].shape[1] in runner.seq_lens]


def reset(runner, preset):
    ps = [p.detach() for n, p in adapt(model_of(preset))[0].named_parameters() if n in runner.fns.names]
    runner.set_state(ps, [torch.zeros_like(p) for p in ps], [torch.zeros_like(p) for p in ps])


def test_tier1_gradients_match_autograd(case):
    _, preset, rs = case
    r = rs["split-npu"]
    reset(r, preset)
    for batch in plan_for(r, 24)[:3]:
        loss, grads = r.grad(*batch)
        ref = model_of(preset)
        ref_loss = reference_loss(ref, *batch)
        ref_loss.backward()
        assert loss == pytest.approx(float(ref_loss), rel=1e-5)
        want = {f"detector.{n}": p.grad for n, p in ref.named_parameters()}
        assert {n for n, g in want.items() if g is not None} == set(r.fns.names)  # exactly what the loss reaches
        for name, g in zip(r.fns.names, grads):
            torch.testing.assert_close(torch.as_tensor(g), want[name], rtol=1e-4, atol=1e-6,
                                       msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("form", ["fused", "split-npu"])
def test_tier2_adamw_state_matches_the_eager_trainers_optimizer(case, form):
    _, preset, rs = case
    r = rs[form]
    reset(r, preset)
    ref = model_of(preset)
    opt = _optimizer(ref, DetectorTrainConfig(data="-", out="-", preset=preset, lr=LR, head_lr=HEAD_LR, weight_decay=WD))
    base = [g["lr"] for g in opt.param_groups]
    for t, batch in enumerate(plan_for(r, 24)[:3], start=1):
        factor = t / 3  # a changing lr, as the schedule feeds it
        r.step(t, LR * factor, *batch)
        opt.zero_grad(set_to_none=True)
        reference_loss(ref, *batch).backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
        for g, b in zip(opt.param_groups, base):
            g["lr"] = b * factor
        opt.step()
        if t in (1, 3):
            got = dict(zip(r.fns.names, zip(*r.get_state())))
            for n, p in ref.named_parameters():
                if f"detector.{n}" not in got:  # unreached (BERT's pooler): torch's AdamW never touched it either
                    assert p.grad is None and p not in opt.state
                    continue
                st = opt.state[p]
                gp, gm, gv = got[f"detector.{n}"]
                # atol ~ lr/500: Adam divides by sqrt(v) + eps, so an element whose gradient is near eps (1e-8)
                # turns a 1e-4 relative gradient rounding into ~1e-2 of its step; a wrong update moves ~lr
                torch.testing.assert_close(gp, p.detach(), rtol=1e-5, atol=LR / 500,
                                           msg=lambda m, s=f"step {t} param {n}": f"{s}: {m}")
                torch.testing.assert_close(gm, st["exp_avg"], rtol=1e-4, atol=1e-8, msg=lambda m, s=f"step {t} m {n}": f"{s}: {m}")
                torch.testing.assert_close(gv, st["exp_avg_sq"], rtol=2e-4, atol=1e-12, msg=lambda m, s=f"step {t} v {n}": f"{s}: {m}")


def test_tier3_fifty_step_trajectory_over_two_buckets(case):
    _, preset, rs = case
    r = rs["fused"]
    reset(r, preset)
    ref = open_step_runner("eager", adapt(model_of(preset))[0], OPT, batch=BATCH, seq_len=BUCKETS[-1],
                           seq_lens=BUCKETS, objective=ClassifierObjective(2),
                           slots=detector_slots(adapt(model_of(preset))[0], HEAD_LR / LR))
    plan = batches(48, seed=1)
    assert {b[0].shape[1] for b in plan} == set(BUCKETS)
    got, want = [], []
    for t in range(1, 51):
        batch = plan[(t - 1) % len(plan)]
        lr = LR * min(1.0, t / 10)
        got.append(r.step(t, lr, *batch))
        want.append(ref.step(t, lr, *batch))
    assert np.isfinite(got).all()
    assert np.mean(want[-10:]) < np.mean(want[:10]) - 0.1, "the reference did not learn; the trajectory would prove little"
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)


def test_one_graph_per_bucket_standard_onnx_and_gather_free(case):
    _, _, rs = case
    fused = rs["fused"].graphs
    assert set(fused) == {f"fused_{BATCH}x{t}" for t in BUCKETS}
    split = rs["split-npu"].graphs
    assert set(split) == {"grad", "update"}
    for g in split.values():
        assert g["gather_like_ops"] == [] and not set(g["op_types"]) & set(GATHER_LIKE), g["op_types"]


def test_filler_rows_contribute_nothing(tmp_path):
    """A bucket's short last batch: 3 real rows + 1 filler at weight 0 give the 3 rows' own loss and gradients."""
    r = runner_for("onnxruntime" if "onnxruntime" in GRAPH_BACKENDS else "eager", model_of("tiny-modernbert"),
                   tmp_path, form="split", buckets=BUCKETS[:1])
    rng = np.random.default_rng(5)
    rows = [np.array([2, *rng.integers(5, 120, n), 3]) for n in (4, 9, 12)]  # all in the 16-token bucket
    (batch,) = static_batches(rows, np.array([0, 1, 1]), np.arange(3), BATCH, BUCKETS, 0, rng)
    assert batch[3].tolist() == [1, 1, 1, 0] and batch[0].shape == (BATCH, 16)
    loss, grads = r.grad(*batch)
    ref = model_of("tiny-modernbert")
    ref_loss = reference_loss(ref, *batch)
    ref_loss.backward()
    assert loss == pytest.approx(float(ref_loss), rel=1e-5)
    want = {f"detector.{n}": p.grad for n, p in ref.named_parameters()}
    for name, g in zip(r.fns.names, grads):
        torch.testing.assert_close(torch.as_tensor(g), want[name], rtol=1e-4, atol=1e-6)


def test_frozen_encoder_trains_the_head_only(tmp_path):
    """--train-top-layers 0: the encoder is a constant of the graph; only the head's gradients exist and change."""
    model = model_of("tiny-bert")
    freeze_below(model, 0)
    static, _ = adapt(model)
    slots = detector_slots(static)
    trained = {s.name for s in slots}
    assert trained == {"detector.head.weight", "detector.head.bias"}, trained  # BERT has no final norm; pooler unused
    backend = "onnxruntime" if "onnxruntime" in GRAPH_BACKENDS else "eager"
    r = open_step_runner(backend, static, OPT, batch=BATCH, seq_len=BUCKETS[-1], seq_lens=BUCKETS,
                         objective=ClassifierObjective(2), slots=slots, workdir=tmp_path, threads=2)
    before = {n: p.detach().clone() for n, p in static.named_parameters()}
    for t, batch in enumerate(batches(8), start=1):
        r.step(t, LR, *batch)
    after = dict(zip(r.fns.names, r.get_state()[0]))
    assert set(after) == trained
    assert all(not torch.equal(after[n], before[n]) for n in after if n.startswith("detector.head."))
    assert all(torch.equal(p.detach(), before[n]) for n, p in static.named_parameters() if n not in trained)


def test_cli_train_on_a_runtime_gives_a_normal_detector_directory(tiny_model_dir, eval_jsonl, tmp_path):
    """`detector train --backend onnxruntime`: metrics match the eager control; port and verify take the result."""
    from npuport.cli import main

    backend = "onnxruntime" if "onnxruntime" in GRAPH_BACKENDS else GRAPH_BACKENDS[0]
    runs = {}
    for b in ("eager", backend):
        out = tmp_path / b
        assert main(["-q", "detector", "train", "--data", str(eval_jsonl), "--val", str(eval_jsonl), "--init",
                     str(tiny_model_dir), "-o", str(out), "--epochs", "2", "--batch", "4", "--max-len", "32",
                     "--buckets", "16,32", "--backend", b]) == 0
        runs[b] = json.loads((out / "train_summary.json").read_text())
    got, want = ([h["train_loss"] for h in runs[b]["history"]] for b in (backend, "eager"))
    np.testing.assert_allclose(got, want, rtol=1e-4)
    assert runs[backend]["training"]["buckets"] == [16, 32]
    assert len(list((tmp_path / backend / "graphs").glob("fused_4x16.*.onnx"))) == 1  # named by its key
    out = tmp_path / "port"
    assert main(["-q", "port", str(tmp_path / backend / "model"), "-o", str(out), "--buckets", "16,32",
                 "--backend", "onnxruntime", "--bench-runs", "1"]) == 0
    assert main(["-q", "verify", str(out)]) == 0


def test_bf16_detector_training_on_openvino_follows_the_fp32_control(tiny_model_dir, eval_jsonl, tmp_path):
    """`detector train --backend openvino --precision bf16`: bf16 gradient graphs per bucket, the fp32 update graph,
    losses within bf16 rounding of the fp32 static control."""
    from npuport.cli import main

    runs = {}
    for b, prec in (("eager", "fp32"), ("openvino", "bf16")):
        out = tmp_path / b
        assert main(["-q", "detector", "train", "--data", str(eval_jsonl), "--val", str(eval_jsonl), "--init",
                     str(tiny_model_dir), "-o", str(out), "--epochs", "2", "--batch", "4", "--max-len", "32",
                     "--buckets", "16,32", "--backend", b, "--precision", prec]) == 0
        runs[b] = json.loads((out / "train_summary.json").read_text())
    got, want = ([h["train_loss"] for h in runs[b]["history"]] for b in ("openvino", "eager"))
    np.testing.assert_allclose(got, want, rtol=2e-2)
    r = runs["openvino"]["training"]["runner"]
    assert r["precision"] == "bf16" and r["form"] == "split"
    assert {k: g["precision"] for k, g in r["graphs"].items()} == {"grad_4x16": "bf16", "grad_4x32": "bf16",
                                                                   "update": "fp32"}
    assert json.loads((tmp_path / "openvino" / "train_config.json").read_text())["precision"] == "bf16"
    assert "precision" not in json.loads((tmp_path / "eager" / "train_config.json").read_text())  # as older runs


def test_bad_backend_and_buckets_are_refused_before_anything_is_written(tiny_model_dir, eval_jsonl, tmp_path, capsys):
    from npuport.cli import main

    base = ["-q", "detector", "train", "--data", str(eval_jsonl), "--init", str(tiny_model_dir), "--max-len", "64"]
    assert main([*base, "-o", str(tmp_path / "a"), "--backend", "rbln"]) == 2
    assert "cannot run a training step" in capsys.readouterr().err
    assert main([*base, "-o", str(tmp_path / "b"), "--backend", "onnxruntime", "--buckets", "16,32"]) == 2
    assert "largest must be >= --max-len 64" in capsys.readouterr().err
    assert main([*base, "-o", str(tmp_path / "c"), "--buckets", "16,64"]) == 2
    assert "need --runtime" in capsys.readouterr().err
    assert main([*base, "-o", str(tmp_path / "c"), "--precision", "bf16"]) == 2
    assert "need --runtime" in capsys.readouterr().err
    assert main([*base, "-o", str(tmp_path / "c"), "--backend", "onnxruntime", "--precision", "bf16"]) == 2
    assert "trains in fp32, not bf16" in capsys.readouterr().err
    assert not any((tmp_path / d).exists() for d in "abc")


def test_same_seed_same_new_head(tmp_path):
    """A backbone given to --init gets a new random head: drawn from --seed, so two runs (a control and a runtime)
    start from the same weights."""
    from npuport.detector.train import _initial_model

    d = tmp_path / "bb"
    model_of("tiny-bert").backbone.save_pretrained(d)
    heads = [_initial_model(DetectorTrainConfig(data="-", out="-", init=str(d), seed=s), None)[0].head.weight for s in (7, 7, 8)]
    assert torch.equal(heads[0], heads[1]) and not torch.equal(heads[0], heads[2])


def test_resume_on_a_runtime_replays_exactly(tiny_model_dir, eval_jsonl, tmp_path):
    """--resume on the static path: weights and both Adam moments come back from the checkpoint, the step graphs are
    reused (same key), and the replayed epoch equals the uninterrupted run's."""
    import shutil

    from npuport.cli import main
    from npuport.models.detector import load_detector, state_fingerprint

    def args(out, *extra):
        return ["-q", "detector", "train", "--data", str(eval_jsonl), "--val", str(eval_jsonl), "--init",
                str(tiny_model_dir), "-o", str(out), "--epochs", "3", "--batch", "4", "--max-len", "32", "--buckets",
                "32", "--patience", "100", "--backend", "onnxruntime", *extra]  # one bucket: one graph to export

    full, cut = tmp_path / "full", tmp_path / "cut"
    assert main(args(full)) == 0 and main(args(cut)) == 0
    shutil.rmtree(cut / "checkpoints" / "epoch_00000003")  # as if killed after epoch 2's checkpoint
    (cut / "train_summary.json").unlink()
    assert main(args(cut, "--resume")) == 0
    a = [json.loads(line) for line in (full / "metrics.jsonl").read_text().splitlines()]
    b = [json.loads(line) for line in (cut / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in b] == [1, 2, 3]
    for x, y in zip(a, b):
        assert x["train_loss"] == pytest.approx(y["train_loss"], rel=1e-6)
    summary = json.loads((cut / "train_summary.json").read_text())["training"]
    assert all(g.get("reused") for g in summary["runner"]["graphs"].values())
    ck = [load_detector(d / "epoch_00000003" / "model") for d in (full / "checkpoints", cut / "checkpoints")]
    for pa, pb in zip(ck[0].parameters(), ck[1].parameters()):
        torch.testing.assert_close(pa, pb, rtol=1e-5, atol=1e-7)
    assert state_fingerprint(load_detector(full / "model")) == state_fingerprint(load_detector(cut / "model"))
