"""Tiny end to end: generated data -> train (CLI) -> eval (CLI) -> port with dataset parity; and resume after a kill."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from npuport.cli import main


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    from npuport.detector.data import context_text, load_examples
    from npuport.detector.generate import write_dataset
    from npuport.detector.tokenizer import train_tokenizer

    d = tmp_path_factory.mktemp("det")
    write_dataset(d / "data", seed=0, per_persona=14, procedural=120)
    rows = load_examples(d / "data" / "train.jsonl")
    tok = train_tokenizer([context_text(e) + "\n" + e.reply for e in rows], vocab_size=600)
    tok.save_pretrained(str(d / "tok"))
    return d


def _train_args(ws, out, epochs=3, extra=(), max_len=128):
    return ["-q", "detector", "train", "--data", str(ws / "data" / "train.jsonl"), "--val", str(ws / "data" / "val.jsonl"),
            "--preset", "tiny-modernbert", "--tokenizer", str(ws / "tok"), "-o", str(out), "--epochs", str(epochs),
            "--lr", "2e-3", "--batch", "16", "--max-len", str(max_len), "--patience", "100", *extra]


def test_train_eval_port(workspace, tmp_path):
    run = tmp_path / "run"
    assert main(_train_args(workspace, run, max_len=64)) == 0  # 64 tokens, two buckets: the suite's time
    assert (run / "model" / "model.safetensors").is_file() and (run / "model" / "tokenizer.json").is_file()
    hist = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
    assert [h["epoch"] for h in hist] == [1, 2, 3]
    assert hist[-1]["train_loss"] < hist[0]["train_loss"]
    ev = tmp_path / "eval.json"
    assert main(["-q", "detector", "eval", str(run / "model"), "--data", str(workspace / "data" / "test.jsonl"),
                 "--json", str(ev), "--plots", str(tmp_path / "plots")]) == 0
    m = json.loads(ev.read_text())
    for k in ("f1", "accuracy", "roc_auc", "precision", "recall", "ece", "confusion_matrix", "threshold"):
        assert k in m
    assert m["roc_auc"] > 0.6  # learned something on unseen personas
    assert (tmp_path / "plots" / "roc.png").stat().st_size > 1000 and (tmp_path / "plots" / "reliability.png").is_file()
    out = tmp_path / "port"
    assert main(["-q", "port", str(run / "model"), "--backend", "onnxruntime,openvino", "--buckets", "32,64",
                 "--eval-data", str(workspace / "data" / "test.jsonl"), "-o", str(out), "--bench-runs", "1"]) == 0
    rep = json.loads((out / "report.json").read_text())
    for b in ("onnxruntime", "openvino"):
        data = rep["backends"][b]["fp32"]["parity"]["data"]
        assert data["decision_agreement"] == 1.0 and data["max_abs_prob_diff"] <= 1e-4 and data["n"] > 50


def test_resume_after_kill_matches_uninterrupted(workspace, tmp_path):
    full, cut = tmp_path / "full", tmp_path / "cut"
    # 2 epochs of rows cut to 64 tokens: a kill after the first epoch's checkpoint and a resume of the second need
    # no more (the suite's time)
    args = {"epochs": 2, "max_len": 64}
    assert main(_train_args(workspace, full, **args)) == 0
    cmd = [sys.executable, "-m", "npuport.cli", *_train_args(workspace, cut, **args)]
    # The same thread count as the in-process runs it is compared with (conftest sets one per xdist worker): a float
    # sum split over another number of threads rounds differently, and the comparison is to 1e-6.
    import torch

    env = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True, env=env)
    state = cut / "checkpoints" / "epoch_00000001" / "trainer_state.json"
    deadline = time.time() + 300
    while time.time() < deadline and not state.exists() and proc.poll() is None:
        time.sleep(0.05)
    assert state.exists(), proc.stderr.read().decode() if proc.poll() is not None else "no checkpoint in time"
    os.killpg(proc.pid, signal.SIGKILL)  # a hard interruption: no cleanup runs
    proc.wait()
    saved = json.loads(state.read_text())
    assert saved["epoch"] < 2, "the run finished before it could be interrupted"
    assert not (cut / "train_summary.json").exists()
    assert main(_train_args(workspace, cut, extra=("--resume",), **args)) == 0
    a = [json.loads(ln) for ln in (full / "metrics.jsonl").read_text().splitlines()]
    b = [json.loads(ln) for ln in (cut / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in b] == [1, 2]
    for x, y in zip(a, b):
        assert x["train_loss"] == pytest.approx(y["train_loss"], rel=1e-6, abs=1e-7)
        assert x["val_f1"] == y["val_f1"]
    from npuport.models.detector import load_detector, state_fingerprint

    assert state_fingerprint(load_detector(full / "model")) == state_fingerprint(load_detector(cut / "model"))


def test_resume_errors(workspace, tmp_path):
    run = tmp_path / "r"
    assert main(_train_args(workspace, run, epochs=1)) == 0
    # a different config cannot resume this run
    assert main(_train_args(workspace, run, epochs=1, extra=("--resume", "--seed", "5"))) == 2
    # and a non-empty run directory is never overwritten by a fresh run
    assert main(_train_args(workspace, run, epochs=1)) == 2
    assert main(_train_args(workspace, tmp_path / "none", epochs=1, extra=("--resume",))) == 2


def test_bad_data_writes_nothing_and_changed_data_refuses_resume(workspace, tmp_path, capsys):
    """P8 #5: inputs are validated before the run directory appears; a resume compares the data's content."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"persona": "p", "reply": "r"}\n')  # no label: not training data
    args = _train_args(workspace, tmp_path / "run", epochs=1)
    assert main([*args[:4], str(bad), *args[5:]]) == 2
    assert not (tmp_path / "run").exists()  # nothing stranded: a rerun is not told "not empty"
    data = tmp_path / "train.jsonl"
    data.write_bytes((workspace / "data" / "train.jsonl").read_bytes())
    run = tmp_path / "run2"
    args = _train_args(workspace, run, epochs=1)
    args[args.index("--data") + 1] = str(data)
    assert main(args) == 0
    with open(data, "a", encoding="utf-8") as f:  # same path, different content
        f.write('{"persona": "p", "reply": "an extra row", "label": 1}\n')
    capsys.readouterr()
    assert main([*args, "--resume"]) == 2
    assert "data_sha256" in capsys.readouterr().err
