"""The one training-loop core: metrics log (torn last line), checkpoint store (fallback, pruning, only its own
names deleted), the loop cadence; and the LM trainer resuming past a damaged newest checkpoint."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from npuport.errors import DataError
from npuport.train.core import CheckpointStore, MetricsLog, run_loop
from npuport.train.loop import LMTrainConfig, latest_checkpoint, read_metrics, train


def test_metrics_torn_last_line_dropped_with_warning(tmp_path, caplog):
    p = tmp_path / "metrics.jsonl"
    p.write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.5}\n{"step": 3, "lo')
    with caplog.at_level(logging.WARNING):
        assert [r["step"] for r in MetricsLog(p).read()] == [1, 2]
    assert "torn last line" in caplog.text


def test_metrics_bad_middle_line_names_file_and_line(tmp_path):
    p = tmp_path / "metrics.jsonl"
    p.write_text('{"step": 1}\nnot json\n{"step": 3}\n')
    with pytest.raises(DataError, match=r"metrics.jsonl:2"):
        MetricsLog(p).read()


def test_store_falls_back_prunes_and_keeps_foreign_files(tmp_path):
    store = CheckpointStore(tmp_path, "step", ".bin", keep=2)
    for n in (1, 2, 3):
        store.path(n).write_bytes(b"ok%d" % n)
    (tmp_path / "notes.txt").write_text("mine")
    store.path(3).write_bytes(b"")  # an empty newest file, as after a power loss

    def load(p):
        data = p.read_bytes()
        if not data:
            raise ValueError("empty")
        return data

    assert store.load_latest(load) == (2, b"ok2")
    assert [p.name for p in store.prune()] == ["step_00000001.bin"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "step_00000002.bin", "step_00000003.bin"]


def test_run_loop_cadence_and_early_stop():
    seen = []
    last = run_loop(start=0, stop=10, step=lambda n: {"step": n}, evaluate=lambda n: {"eval": True}, eval_every=4,
                    checkpoint=seen.append, ckpt_every=3, should_stop=lambda r: r["step"] == 7)
    assert last == {"step": 7}
    assert seen == [3, 6, 7]  # the cadence, plus the early stop
    recs = []
    run_loop(start=0, stop=5, step=lambda n: {"step": n}, evaluate=lambda n: {"eval": True}, eval_every=2,
             on_record=recs.append)
    assert [("eval" in r) for r in recs] == [False, True, False, True, True]  # every 2nd and the last


TINY = dict(corpus="demo", preset="tiny", batch=4, seq_len=32, lr=3e-3, warmup=3, eval_every=4, ckpt_every=2,
            runtime="eager", steps=8)


def test_lm_resume_skips_damaged_newest_checkpoint_and_prunes(tmp_path, caplog):
    full = train(LMTrainConfig(**TINY), tmp_path / "full", progress=False)
    run = tmp_path / "cut"
    with pytest.raises(RuntimeError):
        train(LMTrainConfig(**TINY), run, progress=False,
              on_step=lambda r: (_ for _ in ()).throw(RuntimeError("stop")) if r["step"] == 6 else None)
    steps = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert steps == ["step_00000002.safetensors", "step_00000004.safetensors", "step_00000006.safetensors"]
    latest_checkpoint(run)[1].write_bytes(b"")  # the newest checkpoint is torn
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"step": 7, "lo')  # and so is the metrics log
    with caplog.at_level(logging.WARNING):
        resumed = train(LMTrainConfig(**TINY), run, resume=True, progress=False)
    assert "falling back to the previous one" in caplog.text
    assert resumed.manifest["resumed_from"] == 4
    assert [m["loss"] for m in read_metrics(run)] == [m["loss"] for m in read_metrics(tmp_path / "full")]
    assert full.val_loss == resumed.val_loss
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert names == ["step_00000004.safetensors", "step_00000006.safetensors", "step_00000008.safetensors"]
    assert json.loads((run / "run.json").read_text())["config"]["keep_checkpoints"] == 3
    torch.testing.assert_close(*(torch.tensor([m["loss"] for m in read_metrics(r)]) for r in (run, tmp_path / "full")))
