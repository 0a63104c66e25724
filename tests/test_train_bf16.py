"""bf16 mixed-precision training (`lm train --precision bf16`): the gradient graph in bf16, the master weights, Adam
moments and update in fp32, on eager (autocast) and OpenVINO (the bf16 hint on the gradient graph only)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from npuport.cli import main
from npuport.errors import ConfigError
from npuport.models.lm import build_lm, preset_config
from npuport.train.data import DEMO_CORPUS, Batches, CharVocab, encode_documents, read_documents
from npuport.train.loop import LMTrainConfig
from npuport.train.select import open_step_runner
from npuport.train.step import OptimConfig

BATCH, SEQ = 4, 32


def bf16_exact(t: torch.Tensor) -> float:
    """Share of values a bf16 tensor could hold exactly: ~0 for fp32 master weights, 1 for weights kept in bf16."""
    return float((t.to(torch.bfloat16).float() == t).float().mean())


@pytest.mark.parametrize("backend", ["eager", "openvino"])
def test_bf16_step_updates_fp32_master_weights_like_the_fp32_step(backend, tmp_path):
    docs = read_documents(DEMO_CORPUS)
    vocab = CharVocab.build(docs)
    x, y = Batches(encode_documents(docs, vocab), BATCH, SEQ, seed=3).get(1)
    cfg = preset_config("tiny", vocab.size, max_seq_len=SEQ)

    def runner(precision, name):
        return open_step_runner(backend if precision == "bf16" else "eager", build_lm(cfg, seed=1), OptimConfig(),
                                batch=BATCH, seq_len=SEQ, precision=precision, workdir=tmp_path / name, threads=2)

    ref, mixed = runner("fp32", "ref"), runner("bf16", "bf16")
    init = [p.clone() for p in ref.get_state()[0]]
    losses = [(ref.step(t, 1e-3, x, y), mixed.step(t, 1e-3, x, y)) for t in (1, 2, 3)]
    assert all(abs(a - b) < 2e-2 for a, b in losses), losses  # bf16 rounding, not a different step
    assert mixed.info["precision"] == "bf16"
    if backend == "openvino":
        g = mixed.info["graphs"]
        assert mixed.info["form"] == "split" and g["grad"]["precision"] == "bf16" and g["update"]["precision"] == "fp32"
        assert g["update"]["executes_in"] == "f32" and g["grad"]["executes_in"] in ("bf16", "f32")
    params, m, v = mixed.get_state()
    for name, p0, p, pr, mi, vi in zip(mixed.fns.names, init, params, ref.get_state()[0], m, v):
        assert p.dtype == mi.dtype == vi.dtype == torch.float32
        assert bf16_exact(p) < 0.5, f"{name}: the master weights were rounded to bf16"
        step, step_ref = p - p0, pr - p0
        # three Adam steps move each weight by ~3 lr; bf16 gradients flip the sign of only a few tiny components
        assert float((step - step_ref).abs().mean()) < 0.1 * float(step_ref.abs().mean()), name


def test_cli_bf16_run_follows_the_fp32_control_and_records_its_precision(tmp_path, capsys):
    common = ["-q", "lm", "train", "--demo-corpus", "--preset", "tiny", "--steps", "16", "--batch", "4", "--seq-len", "32",
              "--lr", "3e-3", "--warmup-steps", "2", "--eval-every", "8", "--ckpt-every", "8"]
    assert main([*common, "--backend", "eager", "-o", str(tmp_path / "fp32")]) == 0
    assert main([*common, "--backend", "openvino", "--precision", "bf16", "-o", str(tmp_path / "bf16")]) == 0
    manifest = json.loads((tmp_path / "bf16" / "manifest.json").read_text())
    assert manifest["backend"]["precision"] == "bf16" and set(manifest["backend"]["graphs"]) == {"grad", "update"}
    assert json.loads((tmp_path / "bf16" / "run.json").read_text())["config"]["precision"] == "bf16"
    assert main(["lm", "compare", str(tmp_path / "fp32"), str(tmp_path / "bf16"), "--json", str(tmp_path / "c.json")]) == 0
    c = json.loads((tmp_path / "c.json").read_text())
    assert c["config_differs"] == ["precision"]
    assert c["pearson"] > 0.99 and c["max_abs_loss_diff"] < 0.05, c
    assert np.isfinite(c["final_max_abs_param_diff"])
    # a bf16 run resumes as bf16 only
    capsys.readouterr()
    assert main([*common, "--backend", "openvino", "--steps", "20", "--resume", "-o", str(tmp_path / "bf16")]) == 2
    assert "precision" in capsys.readouterr().err


def test_bf16_on_a_runtime_without_it_is_refused_naming_those_with_it(tmp_path, capsys):
    with pytest.raises(ConfigError, match="openvino"):
        LMTrainConfig(corpus="demo", runtime="onnxruntime", precision="bf16")
    # no --precision: the runtime's own, recorded in the run's config (qnn's HTP trains in fp16 with loss scaling)
    assert LMTrainConfig(corpus="demo", runtime="openvino").precision == "fp32"
    assert LMTrainConfig(corpus="demo", runtime="qnn").precision == "fp16"
    with pytest.raises(ConfigError, match="trains in fp16, not bf16"):
        LMTrainConfig(corpus="demo", runtime="qnn", precision="bf16")
    assert main(["lm", "train", "--demo-corpus", "--preset", "tiny", "--backend", "iree", "--precision", "bf16",
                 "-o", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "trains in fp32, not bf16" in err and "eager" in err and "openvino" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()
