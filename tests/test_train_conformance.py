"""Tiered conformance of the captured training step on every training backend (tiny preset, fp32).

Tier 1: every gradient of the captured gradient graph vs torch.autograd.
Tier 2: parameters and both Adam moments after 1 and 3 steps vs torch.optim.AdamW (+ clip_grad_norm_).
Tier 3: a 50-step loss trajectory vs the eager run, rtol 1e-4 / atol 1e-5.
Each backend runs the fused step (standard graph) and the split form (gradient + update graphs) with the
NPU-friendly gather-free graph, so both forms and both graph flavours are covered.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from npuport.models.lm import build_lm, preset_config
from npuport.runtimes import get_runtime
from npuport.train.capture import GATHER_LIKE, GATHER_LIKE_ATEN
from npuport.train.data import DEMO_CORPUS, Batches, CharVocab, encode_documents, read_documents
from npuport.train.select import open_step_runner, training_runtimes
from npuport.train.step import OptimConfig

# Runtimes that run npuport's fp32 step graphs as they are; qnn trains in mixed precision (tests/test_qnn.py)
GRAPH_BACKENDS = [b for b in training_runtimes() if not b.startswith("eager") and get_runtime(b).runs_graphs]
BATCH, SEQ, LR = 4, 32, 1e-3


@pytest.fixture(scope="module")
def data():
    docs = read_documents(DEMO_CORPUS)
    vocab = CharVocab.build(docs)
    return vocab, Batches(encode_documents(docs, vocab), BATCH, SEQ, seed=3)


def make(backend, vocab, tmp, *, form="fused", gather_free=False, graphs=None):
    """graphs: where step graphs are exported (shared between runtimes, as ranks share them); tmp: what it compiles."""
    model = build_lm(preset_config("tiny", vocab.size), seed=1)
    return open_step_runner(backend, model, OptimConfig(), batch=BATCH, seq_len=SEQ, form=form,
                            gather_free=gather_free, workdir=graphs or tmp, compiled_dir=tmp, threads=2)


@pytest.fixture(scope="module", params=GRAPH_BACKENDS)
def runners(request, data, tmp_path_factory, step_graph_dir):
    vocab, _ = data
    b = request.param
    return b, {
        "fused": make(b, vocab, tmp_path_factory.mktemp(f"{b}-fused"), graphs=step_graph_dir),
        "split-npu": make(b, vocab, tmp_path_factory.mktemp(f"{b}-split"), form="split", gather_free=True,
                          graphs=step_graph_dir),
    }


def reset(runner, vocab):
    fresh = build_lm(preset_config("tiny", vocab.size), seed=1)
    ps = [p.detach() for p in fresh.parameters()]
    runner.set_state(ps, [torch.zeros_like(p) for p in ps], [torch.zeros_like(p) for p in ps])


def finite(ts):
    for t in ts:
        assert torch.isfinite(torch.as_tensor(t)).all(), "NaN/Inf in the step's output"


def test_tier1_gradients_match_autograd(runners, data):
    _, rs = runners
    vocab, batches = data
    r = rs["split-npu"]
    reset(r, vocab)
    x, y = batches.get(1)
    loss, grads = r.grad(x, y)
    ref = make("eager", vocab, None)
    ref_loss, ref_grads = ref.grad(x, y)
    assert np.isfinite(loss)
    finite(grads)
    assert loss == pytest.approx(ref_loss, rel=1e-6)
    for name, g, gr in zip(r.fns.names, grads, ref_grads):
        torch.testing.assert_close(torch.as_tensor(g), torch.as_tensor(gr), rtol=1e-5, atol=1e-8, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("form", ["fused", "split-npu"])
def test_tier2_adamw_state_after_1_and_3_steps(runners, data, form):
    _, rs = runners
    vocab, batches = data
    r = rs[form]
    reset(r, vocab)
    ref = make("eager", vocab, None)
    for t in (1, 2, 3):
        x, y = batches.get(t)
        lr = LR * t / 3  # a changing learning rate, as the schedule feeds it
        r.step(t, lr, x, y)
        ref.step(t, lr, x, y)
        if t in (1, 3):  # step 1 alone hides bugs (moments start at zero)
            got, want = r.get_state(), ref.get_state()
            # v holds g*g, so a gradient's relative rounding (<= 1e-5, tier 1) shows twice in v.
            for what, g_list, w_list, rtol, atol in zip(("param", "m", "v"), got, want, (1e-5, 1e-5, 2e-5),
                                                        (1e-6, 1e-8, 1e-12)):
                finite(g_list)
                for name, g, w in zip(r.fns.names, g_list, w_list):
                    torch.testing.assert_close(g, w, rtol=rtol, atol=atol, msg=lambda m, s=f"step {t} {what}.{name}": f"{s}: {m}")


@pytest.mark.parametrize("form", ["fused", "split-npu"])
def test_tier3_fifty_step_trajectory(runners, data, form):
    _, rs = runners
    vocab, batches = data
    r = rs[form]
    reset(r, vocab)
    ref = make("eager", vocab, None)
    got, want = [], []
    for t in range(1, 51):
        x, y = batches.get(t)
        lr = 3e-3 * min(1.0, t / 10)
        got.append(r.step(t, lr, x, y))
        want.append(ref.step(t, lr, x, y))
    assert np.isfinite(got).all()
    assert want[-1] < want[0] - 0.3, "the reference did not learn; the trajectory would prove little"
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_graphs_are_standard_onnx_and_npu_graph_has_no_gather(runners):
    b, rs = runners
    fused = rs["fused"].graphs["fused"]
    assert fused["gather_like_ops"]  # the standard flavour does gather (embedding lookup, the loss's target pick)
    for kind, g in rs["split-npu"].graphs.items():
        assert g["gather_like_ops"] == [], f"{kind} graph of the NPU-friendly flavour uses {g['gather_like_ops']}"
        assert not set(g["op_types"]) & set(GATHER_LIKE) and not set(g["op_types"]) & set(GATHER_LIKE_ATEN)
    if "onnx" in get_runtime(b).compiles_from:
        assert "Gather" in fused["op_types"] or "GatherElements" in fused["op_types"]
        assert (rs["fused"].workdir / fused["file"]).is_file()
    else:  # compiled from the traced ATen graph: no ONNX file is exported that nothing would read
        assert fused["format"] == "fx" and fused["file"] is None and "export_s" not in fused and "trace_s" in fused
        assert "aten.embedding" in fused["op_types"] and not list(rs["fused"].compiled_dir.glob("*.onnx"))


@pytest.mark.parametrize("backend", [b for b in GRAPH_BACKENDS if b != "inductor"])
def test_tier1_standard_graph_large_batch_multithreaded(backend, data, tmp_path, step_graph_dir):
    """The standard (Gather) flavour at 2048 tokens on 2 threads: ONNX Runtime's ScatterND-add, which an
    embedding backward lowers to, races there; the captured step must not contain it (regression test). On the
    runtimes that compile the ONNX graph; inductor compiles from FX (its step graphs are checked above), and one more
    AOTInductor compile at this shape was half a minute of the suite."""
    vocab, _ = data
    batches = Batches(encode_documents(read_documents(DEMO_CORPUS), vocab), 16, 128, seed=5)
    model = build_lm(preset_config("tiny", vocab.size, max_seq_len=128), seed=1)
    r = open_step_runner(backend, model, OptimConfig(), batch=16, seq_len=128, form="split", workdir=step_graph_dir,
                         compiled_dir=tmp_path, threads=2)
    assert "ScatterND" not in r.graphs["grad"]["op_types"]
    ref = open_step_runner("eager", build_lm(preset_config("tiny", vocab.size, max_seq_len=128), seed=1), OptimConfig(),
                           batch=16, seq_len=128)
    x, y = batches.get(1)
    _, ref_grads = ref.grad(x, y)
    first = [g.copy() for g in r.grad(x, y)[1]]
    again = r.grad(x, y)[1]
    for name, g, g2, gr in zip(r.fns.names, first, again, ref_grads):
        assert np.array_equal(g, g2), f"{name}: gradient differs between two identical runs"
        torch.testing.assert_close(torch.as_tensor(g), torch.as_tensor(gr), rtol=1e-5, atol=1e-8,
                                   msg=lambda m, n=name: f"{n}: {m}")


def test_graphs_of_other_shapes_sharing_a_directory_never_replace_each_other(data, tmp_path):
    """Ranks and parallel test workers share one graph directory. A step graph of another shape or flavour must not
    take the file a runner checked and is about to compile (CI once compiled a 86-input gradient graph for a
    158-input runner when two workers both wrote `grad.onnx`)."""
    vocab, _ = data
    a = make("onnxruntime", vocab, tmp_path / "a", form="split", graphs=tmp_path / "shared")
    b = make("onnxruntime", vocab, tmp_path / "b", form="split", gather_free=True, graphs=tmp_path / "shared")
    for r in (a, b):
        for g in r.graphs.values():
            on_disk = hashlib.sha256((tmp_path / "shared" / g["file"]).read_bytes()).hexdigest()
            assert on_disk == g["sha256"], f"{g['file']} was replaced by another runner's graph"
    assert a.graphs["grad"]["file"] != b.graphs["grad"]["file"]
    again = make("onnxruntime", vocab, tmp_path / "c", form="split", graphs=tmp_path / "shared")
    assert all(g.get("reused") for g in again.graphs.values())  # the same key still finds its file
