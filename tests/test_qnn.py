"""P9 #1: the qnn runtime (Qualcomm HTP through onnxruntime-qnn). On this x86 machine the compiled context binary runs
in Qualcomm's HTP simulator: a real compile for the NPU and a bit-accurate execution of it, at fp16."""

import json

import numpy as np
import pytest
import torch

from npuport.artifact import find_artifacts, load_session
from npuport.cli import main
from npuport.runtimes import get_runtime

pytestmark = pytest.mark.skipif(not get_runtime("qnn").available()[0] and not __import__("os").environ.get("CI"),
                                reason='needs onnxruntime-qnn: pip install "npuport[qnn]" (CI installs it)')


def test_doctor_says_what_executes_where(capsys):
    assert main(["doctor", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)["runtimes"]["qnn"]
    assert info["available"] and info["executes"] == "simulator" and info["devices"] == {"htp": ["fp16", "int8", "int16"]}


def test_detector_on_the_htp_simulator(tiny_model_dir, eval_jsonl, tmp_path):
    out = tmp_path / "out"
    assert main(["-q", "port", str(tiny_model_dir), "-o", str(out), "--buckets", "16,32", "--backend", "qnn",
                 "--eval-data", str(eval_jsonl), "--bench-runs", "1"]) == 0
    (art,) = find_artifacts(out)
    m = json.loads((art / "manifest.json").read_text())
    assert m["runtime"]["executes"] == "simulator" and m["runtime"]["meta"]["format"] == "qnn-context-binary"
    assert set(m["runtime"]["meta"]["host_ops"]) == {"1x16", "1x32"}
    assert m["parity"]["probes"]["pass"] and m["parity"]["data"]["decision_agreement"] == 1.0
    assert {"qnn_1x16.onnx", "qnn_1x16_qnn.bin", "qnn_1x32_qnn.bin"} <= set(m["files"])  # context binaries are hashed
    manifest, session = load_session(art)
    ids = np.full((1, 32), 5, dtype=np.int64)
    assert session.run({"input_ids": ids, "attention_mask": np.ones_like(ids)}).shape == (1, 2)
    assert main(["-q", "verify", str(out), "--eval-data", str(eval_jsonl)]) == 0
    with open(art / "qnn_1x32_qnn.bin", "r+b") as f:  # a changed context binary is refused
        f.seek(100)
        f.write(b"\x00\x01\x02\x03")
    assert main(["-q", "verify", str(out)]) == 1


def test_fp32_is_refused_with_the_precisions_it_has(tiny_model_dir, tmp_path, capsys):
    """Without --precision / --device qnn gets its own defaults (fp16 on htp); asking for fp32 is refused."""
    assert main(["-q", "port", str(tiny_model_dir), "-o", str(tmp_path / "o"), "--seq-len", "16", "--backend", "qnn",
                 "--precision", "fp32"]) == 2
    assert "supports precision fp16, int8, int16, not fp32" in capsys.readouterr().err


@pytest.mark.parametrize("precision", ["int8", "int16"])
def test_calibrated_qdq_on_the_htp(tiny_model_dir, eval_jsonl, tmp_path, precision):
    """int8 / int16: QDQ graphs calibrated on --calibration-data, compiled for the HTP's integer units."""
    out = tmp_path / "out"
    assert main(["-q", "port", str(tiny_model_dir), "-o", str(out), "--seq-len", "16", "--backend", "qnn",
                 "--precision", precision, "--calibration-data", str(eval_jsonl), "--eval-data", str(eval_jsonl),
                 "--bench-runs", "1"]) == 0
    (art,) = find_artifacts(out)
    m = json.loads((art / "manifest.json").read_text())
    meta = m["runtime"]["meta"]
    assert meta["calibration"] == "--calibration-data eval.jsonl (12 rows)" and meta["calibration_batches"] == 12
    assert ("QUInt16" if precision == "int16" else "QUInt8") in meta["quantization"]
    # the additive attention mask (finfo.min) would take every 8/16-bit step: it and what it feeds stay float
    kept = int(meta["quantization"].split("; ")[1].split()[0])
    assert kept >= 3, meta["quantization"]
    assert meta["whole_graph_on_npu"], meta["host_ops"]  # only the final DequantizeLinear stays on the host
    assert meta["matmul_weights"] == "int8 per output channel"  # and the HTP runs them (whole graph on the NPU)
    drift = m["parity"]["probes"]["max_abs_logit_diff"]
    assert 0 < drift and m["parity"]["probes"]["pass"] and m["parity"]["data"]["decision_agreement"] >= 0.99
    # AI Hub's figures beside max|Δ|: PSNR of the logits (finite: the integer graph is not exact) and top-1
    data = m["parity"]["data"]
    assert 0 < data["psnr_db"] < 200 and 0.99 <= data["top1_agreement"] <= 1.0
    report = (out / "report.md").read_text()
    assert "PSNR dB (logits)" in report and f"{min(data['psnr_db'], m['parity']['probes']['psnr_db']):.1f}" in report
    # the profile's load time: opening the context binary, as a server does at start
    entry = json.loads((out / "report.json").read_text())["backends"]["qnn"][precision]
    assert 0 < m["latency"]["load_s"] == entry["load_seconds"] and "load s" in report


def test_matmul_weights_are_quantised_per_output_channel(tmp_path):
    """One symmetric int8 scale per column of each MatMul weight [K, N]: a column of small weights beside a column
    of large ones keeps its resolution (per tensor it would round to 0)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from npuport.runtimes.qnn import _quantize_mixed

    w = np.stack([np.linspace(-1e-3, 1e-3, 8), np.linspace(-4.0, 4.0, 8)], axis=1).astype(np.float32)  # [K=8, N=2]
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 2])],
                              [numpy_helper.from_array(w, "w")])
    src, dst = tmp_path / "pre.onnx", tmp_path / "q.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), str(src))
    feeds = [{"x": np.random.default_rng(i).standard_normal((1, 4, 8)).astype(np.float32)} for i in range(4)]
    _quantize_mixed(src, dst, feeds, {}, base="8", other=())
    q = onnx.load(str(dst))
    inits = {t.name: numpy_helper.to_array(t) for t in q.graph.initializer}
    (dq,) = [n for n in q.graph.node if n.op_type == "DequantizeLinear" and n.input[0] in inits
             and inits[n.input[0]].shape == w.shape]
    assert {a.name: a.i for a in dq.attribute}.get("axis") == 1
    codes, scale = inits[dq.input[0]], inits[dq.input[1]]
    assert codes.dtype == np.int8 and scale.shape == (2,)  # symmetric int8, one scale per output column
    np.testing.assert_allclose(codes * scale, w, atol=scale.max() / 2 + 1e-9)
    assert np.abs(codes[:, 0]).max() == 127  # the small column uses all its steps


def test_a_raised_group_keeps_the_vocabulary_tables_type_at_8_bits(tmp_path):
    """qnn's int8 default raises every activation to 16 bits, but not the tensors that carry a large lookup
    table's type (a Gather's output and its Cast): on the HTP those set the table's storage, and a 16-bit vocabulary
    doubles the context binary. What is computed from them (the product, the sum) goes to 16 bits."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from npuport.runtimes._quantize import TABLE_ELEMENTS, table_activations
    from npuport.runtimes.qnn import _quantize_mixed

    rng = np.random.default_rng(0)
    codes = rng.integers(-8, 8, (TABLE_ELEMENTS // 256, 256), dtype=np.int8)  # a 4-bit vocabulary stored as int8
    nodes = [helper.make_node("Gather", ["codes", "ids"], ["g"], name="gather"),
             helper.make_node("Cast", ["g"], ["c"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("Mul", ["c", "scale"], ["m"], name="mul"),
             helper.make_node("Add", ["m", "pos"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 256])],
                              [numpy_helper.from_array(codes, "codes"),
                               numpy_helper.from_array(np.float32(0.02), "scale"),
                               numpy_helper.from_array(rng.standard_normal((4, 256)).astype(np.float32), "pos")])
    src, dst = tmp_path / "pre.onnx", tmp_path / "q.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), str(src))
    assert table_activations(src) == {"g", "c"}
    assert table_activations(src, min_elements=TABLE_ELEMENTS + 1) == set()  # a small table is an ordinary one
    feeds = [{"ids": rng.integers(0, len(codes), (1, 4))} for _ in range(4)]
    _quantize_mixed(src, dst, feeds, {"embeddings": [n.name for n in nodes]}, base="8", other=("embeddings",))
    q = onnx.load(str(dst))
    zero_points = {t.name: t.data_type for t in q.graph.initializer}
    width = {n.input[0]: zero_points[n.input[2]] for n in q.graph.node if n.op_type == "QuantizeLinear"}
    assert width["c"] == TensorProto.UINT8  # the table's type: 8 bits (converted to 16 where the Mul reads it)
    assert width["m"] == width["y_QuantizeLinear_Input"] == TensorProto.UINT16  # computed from it: raised
    # every group raised (qnn's int8 default): a 16-bit graph, tensors in no group included, but the table's type
    _quantize_mixed(src, dst, feeds, {}, base="16", other=())
    q = onnx.load(str(dst))
    zero_points = {t.name: t.data_type for t in q.graph.initializer}
    width = {n.input[0]: zero_points[n.input[2]] for n in q.graph.node if n.op_type == "QuantizeLinear"}
    assert width["c"] == TensorProto.UINT8 and width["m"] == TensorProto.UINT16
    _quantize_mixed(src, dst, feeds, {}, base="16", other=(), narrow_tables=False)  # --precision int16: all of it
    q = onnx.load(str(dst))
    zero_points = {t.name: t.data_type for t in q.graph.initializer}
    assert {zero_points[n.input[2]] for n in q.graph.node if n.op_type == "QuantizeLinear"} == {TensorProto.UINT16}


def test_bad_calibration_data_is_refused_before_anything_is_written(tiny_model_dir, tmp_path, capsys):
    bad = tmp_path / "calib.jsonl"
    bad.write_text('{"persona": "x"}\n')
    assert main(["-q", "port", str(tiny_model_dir), "-o", str(tmp_path / "o"), "--seq-len", "16", "--backend", "qnn",
                 "--precision", "int8", "--calibration-data", str(bad), "--min-agreement", "0"]) == 2
    assert "calib.jsonl" in capsys.readouterr().err and not (tmp_path / "o").exists()


def _lm_runners(tmp_path):
    from npuport.models.lm import build_lm, preset_config
    from npuport.train.data import DEMO_CORPUS, Batches, CharVocab, encode_documents, read_documents
    from npuport.train.select import open_step_runner
    from npuport.train.step import OptimConfig

    docs = read_documents(DEMO_CORPUS)
    vocab = CharVocab.build(docs)
    batches = Batches(encode_documents(docs, vocab), 2, 16, seed=3)
    mk = lambda b, **kw: open_step_runner(b, build_lm(preset_config("tiny", vocab.size), seed=1), OptimConfig(),  # noqa: E731
                                          batch=2, seq_len=16, form="split", **kw)
    return mk("eager"), mk("qnn", workdir=tmp_path / "qnn"), batches


def test_training_on_the_htp_follows_the_eager_control(tmp_path):
    """P9 #4: fp16 gradients on the HTP simulator + fp32 AdamW on the host track eager fp32 step for step."""
    import torch

    eager, qnn, batches = _lm_runners(tmp_path)
    assert qnn.info["precision"].startswith("fp16 gradients")
    x, y = batches.get(1)
    ge, gq = eager.grad(x, y)[1], qnn.grad(x, y)[1]
    flat = lambda gs: torch.cat([torch.as_tensor(g).flatten() for g in gs])  # noqa: E731
    rel = float((flat(ge) - flat(gq)).norm() / flat(ge).norm())
    assert rel < 0.1, rel  # all-fp16 forward + backward on the HTP: measured 3.1% of the norm; garbage would be ~1
    eager, qnn, batches = _lm_runners(tmp_path)
    for t in range(1, 9):
        x, y = batches.get(t)
        le, lq = eager.step(t, 1e-3, x, y), qnn.step(t, 1e-3, x, y)
        assert abs(le - lq) < 1e-2, (t, le, lq)  # fp16 forward: loss within fp16 resolution of ~4
    assert qnn.summary()["skipped_steps"] == 0
    dp = torch.cat([(pe - pq).abs().flatten() for pe, pq in zip(eager.get_state()[0], qnn.get_state()[0])])
    # Adam moves a weight by up to ~lr per step whatever the gradient's size, so weights with near-zero gradients
    # may differ by up to 8 x lr after 8 steps; the typical weight must agree far closer than that
    assert torch.isfinite(dp).all() and float(dp.median()) < 1e-4 and float(dp.max()) < 8 * 1e-3 * 1.5, (dp.median(), dp.max())


def test_an_overflowing_step_is_skipped_and_the_scale_halved(tmp_path):
    """Weights 30x too large overflow fp16 on the HTP: the step is skipped, the scale halved, nothing updated."""
    import torch

    from npuport.errors import ConfigError
    from npuport.train.mixed import MAX_SCALE

    eager, qnn, batches = _lm_runners(tmp_path)
    params, m, v = qnn.get_state()
    qnn.set_state([p * 30 for p in params], m, v)
    before = [p.clone() for p in qnn.get_state()[0]]
    x, y = batches.get(1)
    qnn.step(1, 1e-3, x, y)
    s = qnn.summary()
    assert s["skipped_steps"] == 1 and s["final_loss_scale"] == 512.0
    assert all(torch.equal(a, b) for a, b in zip(before, qnn.get_state()[0]))  # the update was skipped
    qnn.scale = MAX_SCALE * 4  # the HTP would saturate it silently: refused instead
    with pytest.raises(ConfigError, match="loss scale"):
        qnn.step(2, 1e-3, x, y)


def test_detector_fine_tuned_on_the_htp_follows_the_eager_control(tiny_model_dir, eval_jsonl, tmp_path):
    """P12 on the NPU: the classifier's fp16 gradient graphs (one per bucket) on the HTP simulator, fp32 AdamW on
    the host, against the same static schedule in eager PyTorch; the result is a normal detector directory."""
    runs = {}
    for b in ("eager", "qnn"):
        assert main(["-q", "detector", "train", "--data", str(eval_jsonl), "--init", str(tiny_model_dir), "-o",
                     str(tmp_path / b), "--epochs", "2", "--batch", "4", "--max-len", "32", "--buckets", "16,32",
                     "--backend", b]) == 0
        runs[b] = json.loads((tmp_path / b / "train_summary.json").read_text())["training"]
    le, lq = np.array(runs["eager"]["step_losses"]), np.array(runs["qnn"]["step_losses"])
    assert len(le) == len(lq) >= 4 and np.abs(le - lq).max() < 1e-2, (le, lq)  # fp16 forward on the HTP
    assert runs["qnn"]["mixed_precision"]["skipped_steps"] == 0
    assert set(runs["qnn"]["runner"]["graphs"]) == {"grad_scaled_4x16", "grad_scaled_4x32"}
    from npuport.models.detector import load_detector, state_fingerprint

    # the run wrote a detector that loads, was changed by the HTP's steps, and computes finite logits
    trained, init = load_detector(tmp_path / "qnn" / "model"), load_detector(tiny_model_dir)
    assert state_fingerprint(trained) != state_fingerprint(init)
    ids = torch.tensor([[1, 5, 6, 7, 2]])
    with torch.no_grad():
        logits = trained(ids, torch.ones_like(ids))
    assert logits.shape == (1, 2) and torch.isfinite(logits).all()


@pytest.fixture(scope="module")
def varied_model(tmp_path_factory):
    """test_int8's fixed-vocabulary model with weights drawn 25x wider, and its coarse one-row calibration: ranges
    the real rows overrun, so activations clip at any width and no 16-bit recipe recovers the decisions (measured on
    the simulator: 90 % of 40 rows with every group raised)."""
    from test_int8 import _fixed_vocab_model

    model, rows = _fixed_vocab_model(tmp_path_factory, initializer_range=0.5)
    coarse = tmp_path_factory.mktemp("calib") / "coarse.jsonl"
    coarse.write_text(json.dumps({"persona": "x " * 10, "reply": "x " * 20, "label": 0}) + "\n")
    return model, rows, coarse


def _qnn_meta(out):
    (art,) = find_artifacts(out)
    m = json.loads((art / "manifest.json").read_text())
    return m, m["runtime"]["meta"]


def test_int16_groups_mix_activation_widths_in_one_context_binary(tiny_model_dir, eval_jsonl, tmp_path, capsys,
                                                                  monkeypatch):
    """P13: int8 weights everywhere, 16-bit activations in the named groups; without --int16 the runtime's default
    recipe, recorded as such; the groups must exist and only integer NPUs take the flag."""
    from npuport.runtimes import _quantize
    from npuport.runtimes.qnn import QnnRuntime
    from npuport.spec import EVERY_GROUP

    monkeypatch.setattr(_quantize, "TABLE_ELEMENTS", 1000)  # the tiny model's word embeddings count as a vocabulary

    base = ["-q", "port", str(tiny_model_dir), "--seq-len", "16", "--backend", "qnn", "--precision", "int8",
            "--eval-data", str(eval_jsonl), "--min-agreement", "0", "--bench-runs", "1"]
    assert main([*base, "-o", str(tmp_path / "d")]) == 0
    m, meta = _qnn_meta(tmp_path / "d")
    # the default: every group, the role groups and each layer's own tensors (the attention projections) alike
    assert QnnRuntime.default_int16 == EVERY_GROUP and meta["int16"] == meta["int16_by_default"]
    assert set(meta["int16"]) == {"embeddings", "layernorm", "attention", "gelu", "ffn_out", "head", "layer.0",
                                  "layer.1", "layer.2"}
    assert "QUInt16 in every group" in meta["quantization"]
    assert meta["cost"]["context_mb"] > 0 and meta["cost"]["host_ops"] == [] and meta["whole_graph_on_npu"]
    tables = meta["int8_table_tensors"]  # the embeddings are raised, but not the vocabulary's type
    assert tables and "the vocabulary table's tensors at QUInt8" in meta["quantization"]
    assert f"stay 8-bit ({', '.join(tables)}" in (tmp_path / "d" / "report.md").read_text()
    # (--int16 none, every activation at 8 bits: the first round of the --keep-fp32 auto test below)
    assert main([*base, "-o", str(tmp_path / "g"), "--int16", "gelu,ffn_out,head", "--sensitivity"]) == 0
    m, meta = _qnn_meta(tmp_path / "g")
    assert meta["int16"] == ["gelu", "ffn_out", "head"] and meta["int16_by_default"] == []
    assert meta["whole_graph_on_npu"] and m["parity"]["data"]["n"] == 12
    # --sensitivity: each group alone at 8-bit (the rest at 16) on the simulator itself
    sens = meta["sensitivity"]
    assert set(sens) == {"embeddings", "layernorm", "attention", "gelu", "ffn_out", "head"}
    assert all(v["judged_on"] == "simulator" and 0 < v["rows"] <= 16 and 0 <= v["decision_agreement"] <= 1
               and v["max_abs_logit_diff"] > 0 for v in sens.values())
    report = (tmp_path / "g" / "report.md").read_text()
    assert "16-bit activations (weights 8-bit) in: gelu, ffn_out, head." in report
    assert "each group alone at 8-bit, the rest at 16-bit, on the simulator" in report
    capsys.readouterr()
    assert main([*base, "-o", str(tmp_path / "x"), "--int16", "layer.9"]) == 2  # the tiny model has 3 layers
    err = capsys.readouterr().err
    assert "--int16 layer.9: this model has no such group" in err and "layernorm" in err
    assert not (tmp_path / "x").exists()
    assert main([*base, "-o", str(tmp_path / "x"), "--int16", "softmaxx"]) == 2
    assert "--int16 'softmaxx'" in capsys.readouterr().err and not (tmp_path / "x").exists()


def test_keep_fp32_auto_raises_groups_to_16_bit_one_round_each_and_refuses_when_none_holds(varied_model, tmp_path,
                                                                                            capsys):
    """--keep-fp32 auto on an integer NPU: each refused round raises the costliest group still at 8 bits (by the
    sensitivity measured on the simulator) to 16-bit activations, not to float on the host; every round is recorded
    with its decisions on the simulator and its cost on the target. Here clipping ranges defeat every recipe, so the
    rounds run out and nothing is written. (Raising until the decisions hold: benchmarks/npu_mixed.py on the demo.)"""
    model, rows, coarse = varied_model
    out = tmp_path / "o"
    assert main(["-q", "port", str(model), "-o", str(out), "--seq-len", "32", "--backend", "qnn", "--precision", "int8",
                 "--eval-data", str(rows), "--calibration-data", str(coarse), "--int16", "none", "--keep-fp32", "auto",
                 "--bench-runs", "1"]) == 1
    v = json.loads((out / "report.json").read_text())["backends"]["qnn"]["int8"]
    assert v["refused"] and not list(out.glob("*/manifest.json"))  # nothing written
    rounds, sens = v["auto_keep"], v["sensitivity"]
    assert set(sens) == {"embeddings", "layernorm", "attention", "gelu", "ffn_out", "head"}
    assert all(s["judged_on"] == "simulator" for s in sens.values())
    order = sorted(sens, key=lambda g: (sens[g]["decision_agreement"], -sens[g]["max_abs_logit_diff"]))
    assert [r["int16"] for r in rounds] == [order[:k] for k in range(len(order) + 1)]  # one group more per round
    assert all(r["kept_fp32"] == [] and r["cost"]["context_mb"] > 0 and r["cost"]["host_ops"] == [] for r in rounds)
    assert all(r["decision_agreement"] < 0.995 for r in rounds)
    assert "every measured group at 16-bit activations" in v["reason"] and "--precision int16" in v["reason"]
    report = (out / "report.md").read_text()
    assert "| 16-bit activations in | decision agreement | max abs Δlogit | context MB | host ops |" in report
    # qnn's own default (every group at 16 bits) refused: nothing is left to raise, so the hint is --precision int16
    capsys.readouterr()
    d = tmp_path / "d"
    assert main(["-q", "port", str(model), "-o", str(d), "--seq-len", "32", "--backend", "qnn", "--precision", "int8",
                 "--eval-data", str(rows), "--calibration-data", str(coarse), "--bench-runs", "1"]) == 1
    v = json.loads((d / "report.json").read_text())["backends"]["qnn"]["int8"]
    assert v["refused"] and "try --precision int16" in v["reason"] and "--keep-fp32 auto" not in v["reason"]
    said = capsys.readouterr()
    assert "try --precision int16" in said.out + said.err and not list(d.glob("*/manifest.json"))
