"""DiLoCo's pieces, pinned: the outer Nesterov step against a golden fixture (ours and torch's SGD, which torchft's
DiLoCo steps), Streaming DiLoCo's fragments, the low-precision outer gradients, and --init-from."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from npuport.cli import main
from npuport.train.distributed import (
    INT8_BLOCK,
    DistConfig,
    _roundtrip,
    fragment_bounds,
    launch,
    outer_step,
)
from npuport.train.loop import LMTrainConfig, read_metrics, read_run

GOLDEN = json.loads((Path(__file__).parent / "data" / "diloco_outer_golden.json").read_text())
TINY = dict(corpus="demo", preset="tiny", batch=8, seq_len=32, lr=3e-3, warmup=3, eval_every=4, ckpt_every=4)


@pytest.mark.parametrize("case", GOLDEN["cases"], ids=lambda c: f"lr{c['lr']}-mu{c['momentum']}")
def test_outer_step_matches_the_golden_fixture(case):
    theta, buf = torch.tensor(GOLDEN["theta0"]), torch.zeros(8)
    for d, want in zip(GOLDEN["deltas"], case["thetas"]):
        theta, buf = outer_step(theta, buf, torch.tensor(d), case["lr"], case["momentum"])
        np.testing.assert_allclose(theta.numpy(), want, rtol=0, atol=1e-6)
    # torch's own SGD (what torchft.local_sgd.DiLoCo runs as its outer optimizer) still gives the fixture
    p = torch.nn.Parameter(torch.tensor(GOLDEN["theta0"]))
    opt = torch.optim.SGD([p], lr=case["lr"], momentum=case["momentum"], nesterov=case["momentum"] > 0)
    for d, want in zip(GOLDEN["deltas"], case["thetas"]):
        p.grad = torch.tensor(d)
        opt.step()
        np.testing.assert_allclose(p.detach().numpy(), want, rtol=0, atol=1e-6)


def test_fragments_are_contiguous_cover_everything_and_refuse_too_many():
    sizes = [100, 5, 5, 300, 5, 5, 300, 5, 5, 100]
    for k in (1, 2, 3, 4):
        b = fragment_bounds(sizes, k)
        assert len(b) == k and b[0][0] == 0 and b[-1][1] == len(sizes)
        assert all(b[i][1] == b[i + 1][0] and b[i][0] < b[i][1] for i in range(k - 1))
    assert fragment_bounds(sizes, 2) == [(0, 5), (5, 10)]  # a tensor goes where it starts: 410 | 420 of 830
    with pytest.raises(Exception, match="too few for 11 fragments"):
        fragment_bounds(sizes, 11)


def test_low_precision_outer_gradients_round_as_documented():
    x = torch.randn(3 * INT8_BLOCK + 17, generator=torch.Generator().manual_seed(0))
    assert torch.equal(_roundtrip(x, "fp32"), x)
    assert (_roundtrip(x, "bf16") - x).abs().max() <= x.abs().max() * 2**-8
    q = _roundtrip(x, "int8")
    for i in range(0, x.numel(), INT8_BLOCK):  # at most half a step of each block's absmax / 127
        blk = slice(i, i + INT8_BLOCK)
        assert (q[blk] - x[blk]).abs().max() <= x[blk].abs().max() / 127 / 2 + 1e-7


CFG8 = LMTrainConfig(**TINY, steps=8, runtime="onnxruntime", threads=1)


@pytest.fixture(scope="module")
def diloco_fp32(tmp_path_factory):
    """2 workers, H = 4, fp32 outer gradients: the reference of the two tests below (one launch for both)."""
    out = tmp_path_factory.mktemp("diloco") / "fp32"
    return out, launch(CFG8, DistConfig(workers=2, sync="diloco", inner_steps=4), out)


def test_int8_and_bf16_outer_gradients_cut_the_bytes_and_still_train(tmp_path, diloco_fp32):
    sent = {}
    for dtype in ("fp32", "bf16", "int8"):
        run = diloco_fp32[0] if dtype == "fp32" else tmp_path / dtype
        m = diloco_fp32[1] if dtype == "fp32" else launch(
            CFG8, DistConfig(workers=2, sync="diloco", inner_steps=4, outer_dtype=dtype), run)
        sent[dtype] = m["bytes_sent_per_worker"]
        losses = [r["loss"] for r in read_metrics(run)]
        assert np.isfinite(losses).all() and losses[-1] < losses[0]
    numel = m["param_bytes"] // 4  # two outer steps (4, 8), each sends one pseudo-gradient
    assert sent["fp32"] == 2 * 4 * numel and sent["bf16"] == 2 * 2 * numel
    blocks = -(-numel // INT8_BLOCK)  # int8 values (the last block padded) + one fp32 scale per block
    assert sent["int8"] == 2 * (blocks * INT8_BLOCK + 4 * blocks)


def test_streaming_fragments_sync_one_fragment_at_a_time(tmp_path, diloco_fp32):
    m = launch(CFG8, DistConfig(workers=2, sync="diloco", inner_steps=4, fragments=2), tmp_path / "f2")
    full = diloco_fp32[1]
    # one fragment every 2 steps = the same bytes as the whole model every 4 steps
    assert m["bytes_sent_per_worker"] == full["bytes_sent_per_worker"]
    ms = read_metrics(tmp_path / "f2")
    curve = [r["bytes_sent"] for r in ms]
    assert curve[0] == 0 < curve[1] == curve[2] < curve[3]  # a fragment sent at steps 2, 4, 6 and 8


def test_init_from_starts_from_a_finished_run_and_records_it(tmp_path, capsys):
    base = ["-q", "lm", "train", "--demo-corpus", "--preset", "tiny", "--backend", "onnxruntime", "--steps", "6",
            "--batch", "4", "--seq-len", "32", "--warmup-steps", "1", "--ckpt-every", "3", "--eval-every", "3"]
    assert main([*base, "-o", str(tmp_path / "a")]) == 0
    assert main([*base, "--init-from", str(tmp_path / "a"), "-o", str(tmp_path / "b")]) == 0
    rec = read_run(tmp_path / "b")["init_from"]
    assert rec["step"] == 6 and len(rec["sha256"]) == 64
    assert json.loads((tmp_path / "b" / "manifest.json").read_text())["init_from"] == rec
    first_a, first_b = read_metrics(tmp_path / "a")[0]["loss"], read_metrics(tmp_path / "b")[0]["loss"]
    assert first_b < first_a - 0.05  # it starts where a finished, not from the random init
    assert main([*base, "--init-from", f"{tmp_path / 'a'}@3", "-o", str(tmp_path / "c")]) == 0
    assert read_run(tmp_path / "c")["init_from"]["step"] == 3
    capsys.readouterr()
    # refusals name the fix, and write nothing
    assert main([*base, "--init-from", str(tmp_path / "nope"), "-o", str(tmp_path / "d")]) == 2
    assert "is not an npuport LM run (no run.json)" in capsys.readouterr().err
    assert main([*base, "--init-from", f"{tmp_path / 'a'}@4", "-o", str(tmp_path / "e")]) == 2
    err = capsys.readouterr().err
    assert "no checkpoint for step 4" in err and "(checkpoints: 3, 6)" in err
    assert main([*base, "--seq-len", "64", "--init-from", str(tmp_path / "a"), "-o", str(tmp_path / "f")]) == 2
    assert "use the same --preset and --seq-len" in capsys.readouterr().err
    assert not any((tmp_path / d).exists() for d in "def")
