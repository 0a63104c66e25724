"""The LM training loop and `npuport lm …` as a user runs them: runs, resume, compare, eval, sample, errors."""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import load_file

from npuport.cli import main
from npuport.errors import ConfigError
from npuport.train.loop import LMTrainConfig, latest_checkpoint, lr_at, read_metrics, train

TINY = dict(corpus="demo", preset="tiny", batch=4, seq_len=32, lr=3e-3, warmup=3, eval_every=4, ckpt_every=4)


def test_lr_schedule_warmup_then_cosine_to_floor():
    cfg = LMTrainConfig(**{**TINY, "steps": 100, "warmup": 10})
    assert lr_at(cfg, 1) == pytest.approx(3e-4)
    assert lr_at(cfg, 10) == pytest.approx(3e-3)
    assert lr_at(cfg, 100) == pytest.approx(3e-4)
    assert all(lr_at(cfg, s) >= lr_at(cfg, s + 1) for s in range(10, 100))


class Stop(Exception):
    pass


def test_resume_continues_exactly(tmp_path):
    cfg = LMTrainConfig(**TINY, steps=10, runtime="onnxruntime")
    full = train(cfg, tmp_path / "full", progress=False)

    def crash(rec):
        if rec["step"] == 6:  # after the step-4 checkpoint, before the step-8 one
            raise Stop

    with pytest.raises(Stop):
        train(cfg, tmp_path / "cut", progress=False, on_step=crash)
    resumed = train(cfg, tmp_path / "cut", resume=True, progress=False)
    assert resumed.manifest["resumed_from"] == 4
    a, b = read_metrics(tmp_path / "full"), read_metrics(tmp_path / "cut")
    assert [m["step"] for m in b] == list(range(1, 11))  # no lost or repeated steps
    assert [m["loss"] for m in a] == [m["loss"] for m in b]  # bit for bit
    ta = load_file(str(latest_checkpoint(tmp_path / "full")[1]))
    tb = load_file(str(latest_checkpoint(tmp_path / "cut")[1]))
    assert ta.keys() == tb.keys() and all(torch.equal(ta[k], tb[k]) for k in ta)
    assert full.val_loss == resumed.val_loss


def test_eager_resume_restores_adam_state(tmp_path):
    cfg = LMTrainConfig(**TINY, steps=8, runtime="eager")
    train(cfg, tmp_path / "full", progress=False)
    with pytest.raises(Stop):
        train(cfg, tmp_path / "cut", progress=False, on_step=lambda r: (_ for _ in ()).throw(Stop) if r["step"] == 5 else None)
    train(cfg, tmp_path / "cut", resume=True, progress=False)
    assert [m["loss"] for m in read_metrics(tmp_path / "full")] == [m["loss"] for m in read_metrics(tmp_path / "cut")]


def test_run_directory_guards(tmp_path):
    cfg = LMTrainConfig(**TINY, steps=2)
    train(cfg, tmp_path / "r", progress=False)
    with pytest.raises(ConfigError, match="already holds a run"):
        train(cfg, tmp_path / "r", progress=False)
    with pytest.raises(ConfigError, match=r"different config \(lr: run has 0.003, asked 0.01"):
        train(LMTrainConfig(**{**TINY, "lr": 1e-2}, steps=2), tmp_path / "r", resume=True, progress=False)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not empty"):
        train(cfg, tmp_path / "other", progress=False)
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine"
    with pytest.raises(ConfigError, match="no run.json"):
        train(cfg, tmp_path / "nothing", resume=True, progress=False)


def test_cli_train_compare_eval_sample(tmp_path, capsys):
    common = ["-q", "lm", "train", "--demo-corpus", "--preset", "tiny", "--steps", "12", "--batch", "4", "--seq-len", "32",
              "--warmup-steps", "2", "--eval-every", "6", "--ckpt-every", "6"]
    assert main([*common, "--backend", "eager", "-o", str(tmp_path / "eager")]) == 0
    assert main([*common, "--backend", "openvino", "--npu-friendly", "-o", str(tmp_path / "ov")]) == 0
    out = capsys.readouterr().out
    assert "openvino: 12 steps" in out and "tokens/s" in out
    manifest = json.loads((tmp_path / "ov" / "manifest.json").read_text())
    ops = manifest["backend"]["graphs"]["fused"]["op_types"]
    assert "MatMul" in ops and not {"Gather", "GatherElements", "ScatterElements", "ScatterND"} & set(ops)

    assert main(["lm", "compare", str(tmp_path / "eager"), str(tmp_path / "ov"), "--json", str(tmp_path / "c.json"),
                 "--plot", str(tmp_path / "c.png")]) == 0
    c = json.loads((tmp_path / "c.json").read_text())
    assert {"pearson", "max_abs_loss_diff", "tokens_per_s_ratio", "final_max_abs_param_diff"} <= c.keys()
    assert c["pearson"] > 0.9999 and c["max_abs_loss_diff"] < 1e-4
    assert (tmp_path / "c.png").stat().st_size > 10_000

    corpus = tmp_path / "held.txt"
    corpus.write_text("Once upon a time, a little cat went to the park and met a dog. " * 20, encoding="utf-8")
    assert main(["lm", "eval", str(tmp_path / "ov"), "--corpus", str(corpus), "--json", str(tmp_path / "e.json")]) == 0
    e = json.loads((tmp_path / "e.json").read_text())
    assert e["bpc"] == pytest.approx(e["val_loss"] / math.log(2)) and 0 < e["val_loss"] < 10

    capsys.readouterr()
    assert main(["lm", "sample", str(tmp_path / "ov"), "--prompt", "Once upon", "--tokens", "40"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("Once upon") and len(text.rstrip("\n")) == len("Once upon") + 40


def test_cli_errors_are_one_line_and_exit_2(tmp_path, capsys):
    run = tmp_path / "r"
    assert main(["-q", "lm", "train", "--demo-corpus", "--preset", "tiny", "--backend", "eager", "--steps", "2",
                 "--batch", "2", "--seq-len", "16", "-o", str(run)]) == 0
    capsys.readouterr()
    # characters outside the vocabulary at sampling time
    assert main(["lm", "sample", str(run), "--prompt", "Ωmega ☃"]) == 2
    err = capsys.readouterr().err
    assert "not in the model's vocabulary" in err and "'Ω'" in err and "Traceback" not in err
    # empty corpus
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    assert main(["lm", "train", "--corpus", str(empty), "--preset", "tiny", "-o", str(tmp_path / "x")]) == 2
    assert "empty" in capsys.readouterr().err
    # corpus shorter than one sequence
    short = tmp_path / "short.txt"
    short.write_text("Once upon a time.")
    assert main(["lm", "train", "--corpus", str(short), "--preset", "tiny", "--seq-len", "64", "-o", str(tmp_path / "y")]) == 2
    assert "one sequence needs 65" in capsys.readouterr().err
    assert not (tmp_path / "y").exists() and not (tmp_path / "x").exists()  # nothing half-written
    # resuming with a different config
    assert main(["-q", "lm", "train", "--demo-corpus", "--preset", "tiny", "--backend", "eager", "--steps", "2",
                 "--batch", "3", "--seq-len", "16", "--resume", "-o", str(run)]) == 2
    assert "batch: run has 2, asked 3" in capsys.readouterr().err
    # a directory that already holds another run
    assert main(["-q", "lm", "train", "--demo-corpus", "--preset", "tiny", "--backend", "eager", "--steps", "2",
                 "--batch", "2", "--seq-len", "16", "-o", str(run)]) == 2
    assert "already holds a run" in capsys.readouterr().err
    # compare with something that is not a run
    assert main(["lm", "compare", str(run), str(tmp_path)]) == 2
    assert "not an npuport LM run" in capsys.readouterr().err
