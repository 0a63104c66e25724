"""Data-parallel training on torch.distributed (gloo, real worker processes under torch's elastic agent)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from npuport.cli import main
from npuport.errors import ConfigError
from npuport.train.distributed import FAULT_ENV, DistConfig, committed_steps, launch
from npuport.train.loop import LMTrainConfig, latest_checkpoint, read_metrics, train

TINY = dict(corpus="demo", preset="tiny", batch=8, seq_len=32, lr=3e-3, warmup=3, eval_every=5, ckpt_every=5)


def final_params(run):
    return load_file(str(latest_checkpoint(run)[1]))


def test_allreduce_two_workers_reproduces_one_worker(tmp_path):
    cfg = LMTrainConfig(**TINY, steps=12, runtime="onnxruntime", threads=1)
    single = train(cfg, tmp_path / "single", progress=False)
    m = launch(cfg, DistConfig(workers=2, sync="allreduce", hash_every=3), tmp_path / "dp2")
    a = [x["loss"] for x in read_metrics(tmp_path / "single")]
    b = [x["loss"] for x in read_metrics(tmp_path / "dp2")]
    assert len(a) == len(b) == 12
    np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)  # same global batch, gradients averaged
    pa, pb = final_params(tmp_path / "single"), final_params(tmp_path / "dp2")
    for k in pa:
        if k.startswith("param."):
            torch.testing.assert_close(pb[k], pa[k], rtol=1e-4, atol=1e-5)
    # every step sends one gradient bucket = all parameters in fp32
    assert m["bytes_sent_per_worker"] == 12 * m["param_bytes"]
    # all-reduce ranks are identical by construction: one rank's state per checkpoint, not one per rank (P8 #4)
    for step_dir in (tmp_path / "dp2" / "checkpoints").glob("step_*[0-9]"):
        if step_dir.is_dir():
            assert sorted(p.name for p in step_dir.iterdir()) == ["COMMIT", "rank_0.safetensors"]
    assert m["val_loss"] == pytest.approx(single.val_loss, rel=1e-4)


def test_diloco_communicates_every_h_steps(tmp_path):
    cfg = LMTrainConfig(**TINY, steps=12, runtime="onnxruntime", threads=1)
    m = launch(cfg, DistConfig(workers=2, sync="diloco", inner_steps=4), tmp_path / "dl")
    assert m["bytes_sent_per_worker"] == 3 * m["param_bytes"]  # outer steps at 4, 8, 12
    # --ckpt-every 5 rounded up to whole outer steps (8), and the last step: not every outer step
    assert committed_steps(tmp_path / "dl") == [8, 12]
    losses = [x["loss"] for x in read_metrics(tmp_path / "dl")]
    assert np.isfinite(losses).all() and losses[-1] < losses[0]


@pytest.mark.parametrize("sync", ["allreduce", "diloco"])
def test_lost_worker_resumes_from_checkpoint_with_same_result(tmp_path, sync):
    """Rank 1 SIGKILLs itself at step 8 (after the step-5 checkpoint); the elastic agent restarts the group and the
    run completes from the committed checkpoint with the same final parameters, bit for bit.

    The killed run is the real CLI in its own process session with a hard timeout: a hang is a failure. (It was
    one: respawned ranks read the listening addresses the dead ranks had published in the agent's store and waited
    in gloo's connect; each restart round now has its own store prefix.)"""
    import os
    import signal
    import subprocess
    import sys

    cfg = LMTrainConfig(**TINY, steps=10, runtime="onnxruntime", threads=1)
    launch(cfg, DistConfig(workers=2, sync=sync, inner_steps=5), tmp_path / "ok")
    cmd = [sys.executable, "-m", "npuport.cli", "-q", "lm", "train", "--demo-corpus", "--preset", "tiny", "--backend",
           "onnxruntime", "--threads", "1", "--steps", "10", "--batch", "8", "--seq-len", "32", "--lr", "3e-3",
           "--warmup-steps", "3", "--eval-every", "5", "--ckpt-every", "5", "--workers", "2", "--sync", sync,
           "--inner-steps", "5", "--max-restarts", "5", "-o", str(tmp_path / "killed")]
    env = {**os.environ, FAULT_ENV: "1:8", "NPUPORT_DIST_TIMEOUT": "60"}
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        out, _ = proc.communicate(timeout=420)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail("the restart after a lost worker hung (420 s): " + out.decode(errors="replace")[-2000:])
    assert proc.returncode == 0, out.decode(errors="replace")[-3000:]
    m = json.loads((tmp_path / "killed" / "manifest.json").read_text())
    # >= 1: after a kill, gloo's first reconnect can be refused while the old ranks' sockets close; the agent
    # then restarts the group once more (max_restarts covers it), still from the same committed step
    assert m["restarts"] >= 1 and m["resumed_from"] == 5
    steps = [x["step"] for x in read_metrics(tmp_path / "killed")]
    assert steps == list(range(1, 11))  # no lost or repeated steps
    pa, pb = final_params(tmp_path / "ok"), final_params(tmp_path / "killed")
    for k in pa:  # deterministic runtime + restart from a committed checkpoint: bit-identical
        assert torch.equal(pa[k], pb[k]), k


def test_cli_distributed_and_errors(tmp_path, capsys):
    base = ["-q", "lm", "train", "--demo-corpus", "--preset", "tiny", "--backend", "onnxruntime", "--steps", "4",
            "--batch", "6", "--seq-len", "32", "--warmup-steps", "1"]
    assert main([*base, "--workers", "2", "--sync", "diloco", "--inner-steps", "2", "-o", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "diloco × 2 workers" in out and "MB sent per worker" in out
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    assert run["distributed"]["sync"] == "diloco" and run["distributed"]["world_size"] == 2
    assert main([*base, "--workers", "4", "--sync", "allreduce", "-o", str(tmp_path / "bad")]) == 2
    assert "divisible by --workers 4" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="--sync"):
        DistConfig(sync="gossip")


def test_diloco_outer_step_plumbing_one_worker_plain_average(tmp_path):
    """With one worker, outer lr 1 and no momentum, θ_global − (θ_global − θ_local) = θ_local: DiLoCo must then
    reproduce plain training exactly (checks the pseudo-gradient sign, the outer update and the state hand-back)."""
    cfg = LMTrainConfig(**TINY, steps=8, runtime="onnxruntime", threads=1)
    train(cfg, tmp_path / "plain", progress=False)
    launch(cfg, DistConfig(workers=1, sync="diloco", inner_steps=3, outer_lr=1.0, outer_momentum=0.0), tmp_path / "dl")
    a = [x["loss"] for x in read_metrics(tmp_path / "plain")]
    b = [x["loss"] for x in read_metrics(tmp_path / "dl")]
    np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-6)


def test_resume_refuses_another_world_size_and_torchrun_checks_config(tmp_path, capsys):
    """P8 #5: a resumed run keeps its world size (the shards depend on it); under torchrun, --resume compares the
    config and the corpus as the local launcher does (it checked nothing before)."""
    import subprocess
    import sys

    base = ["-q", "lm", "train", "--demo-corpus", "--preset", "tiny", "--backend", "onnxruntime", "--steps", "4",
            "--batch", "4", "--seq-len", "32", "--warmup-steps", "1", "--sync", "allreduce"]
    run = tmp_path / "r"
    assert main([*base, "--workers", "2", "-o", str(run)]) == 0
    capsys.readouterr()
    assert main([*base, "--workers", "4", "--resume", "-o", str(run)]) == 2
    assert "trained with 2" in capsys.readouterr().err
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1", "-m", "npuport.cli",
           *base[:-2], "--lr", "5e-3", "--sync", "allreduce", "--resume", "-o", str(run)]
    import os

    assert "NPUPORT_LAUNCHED" not in os.environ  # the launcher above did not leak its marker into this process
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode != 0
    assert "different config" in res.stdout + res.stderr
