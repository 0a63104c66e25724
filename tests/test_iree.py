"""IREE, the runtime added as one file: doctor, `port --backend iree` (shared parameter archive), `lm train
--backend iree` vs eager through the CLI, and sampling through its graph executor. (Parity at every shape and the
training conformance tiers run in test_backends.py / test_train_conformance.py like every other runtime.)"""

from __future__ import annotations

import json

import pytest

from npuport.cli import main
from npuport.runtimes import get_runtime

ok, why = get_runtime("iree").available()
pytestmark = pytest.mark.skipif(not ok, reason=f"iree: {why}")


def test_doctor_lists_iree_with_version(capsys):
    assert main(["doctor", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)["runtimes"]["iree"]
    assert info["available"] and info["executes"] == "executes" and info["trains"] and info["ports"]
    assert info["versions"]["iree-base-compiler"].startswith("3.") and "cpu" in info["devices"]


def test_port_and_verify_cli(tiny_model_dir, eval_jsonl, tmp_path):
    out = tmp_path / "out"
    # two shapes (each a compile; test_backends ports IREE at two batch sizes too)
    assert main(["-q", "port", str(tiny_model_dir), "--backend", "iree", "--buckets", "16,32", "--batch-sizes", "1",
                 "--eval-data", str(eval_jsonl), "-o", str(out), "--bench-runs", "1"]) == 0
    art = out / "iree-fp32"
    assert sorted(p.name for p in art.glob("*.vmfb")) == ["model_1x16.vmfb", "model_1x32.vmfb"]
    assert len(list(art.glob("*.irpa"))) == 1  # every shape reads one parameter archive
    m = json.loads((art / "manifest.json").read_text())
    assert m["runtime"]["name"] == "iree" and m["runtime"]["executes"] == "executes"
    assert m["parity"]["data"]["max_abs_logit_diff"] <= 1e-4 and m["parity"]["data"]["decision_agreement"] == 1.0
    assert main(["-q", "verify", str(out), "--eval-data", str(eval_jsonl)]) == 0


def test_lm_train_iree_matches_eager_and_samples(tmp_path, capsys):
    common = ["-q", "lm", "train", "--demo-corpus", "--preset", "tiny", "--steps", "10", "--batch", "4", "--seq-len", "32",
              "--warmup-steps", "2", "--eval-every", "5", "--ckpt-every", "5", "--threads", "2"]
    assert main([*common, "--backend", "eager", "-o", str(tmp_path / "eager")]) == 0
    assert main([*common, "--backend", "iree", "--form", "split", "--npu-friendly", "-o", str(tmp_path / "iree")]) == 0
    assert "iree: 10 steps" in capsys.readouterr().out
    assert main(["lm", "compare", str(tmp_path / "eager"), str(tmp_path / "iree"), "--json", str(tmp_path / "c.json")]) == 0
    c = json.loads((tmp_path / "c.json").read_text())
    assert c["pearson"] > 0.9999 and c["max_abs_loss_diff"] < 1e-4
    graphs = json.loads((tmp_path / "iree" / "manifest.json").read_text())["backend"]["graphs"]
    assert set(graphs) == {"grad", "update"} and not graphs["grad"]["gather_like_ops"]
    capsys.readouterr()
    assert main(["lm", "sample", str(tmp_path / "iree"), "--backend", "iree", "--prompt", "Once", "--tokens", "20",
                 "--temperature", "0"]) == 0
    iree_text = capsys.readouterr().out
    assert main(["lm", "sample", str(tmp_path / "iree"), "--prompt", "Once", "--tokens", "20", "--temperature", "0"]) == 0
    assert capsys.readouterr().out == iree_text  # greedy decoding: the compiled forward picks the same characters
