"""P9 #1: the qnn runtime (Qualcomm HTP through onnxruntime-qnn). On this x86 machine the compiled context binary runs
in Qualcomm's HTP simulator: a real compile for the NPU and a bit-accurate execution of it, at fp16."""

import json

import numpy as np
import pytest

from npuport.artifact import find_artifacts, load_session
from npuport.cli import main
from npuport.runtimes import get_runtime

pytestmark = pytest.mark.skipif(not get_runtime("qnn").available()[0] and not __import__("os").environ.get("CI"),
                                reason='needs onnxruntime-qnn: pip install "npuport[qnn]" (CI installs it)')


def test_doctor_says_what_executes_where(capsys):
    assert main(["doctor", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)["runtimes"]["qnn"]
    assert info["available"] and info["executes"] == "simulator" and info["devices"] == {"htp": ["fp16"]}


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
    assert "supports precision fp16, not fp32" in capsys.readouterr().err
