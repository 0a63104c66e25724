"""P13 #2: quantization-aware training for Ethos-U against post-training calibration, on the target's execution.

The demo detector (`npuport demo`'s model; --init) goes to an Ethos-U at int8, one bucket, batch 1, twice, as a user
runs it:

    PTQ  npuport port MODEL --backend ethos-u --seq-len L --calibration-data VAL --eval-data EVAL
    QAT  npuport detector train --init MODEL --data TRAIN --val VAL --qat ethos-u --max-len L
         npuport port QAT/model --backend ethos-u --seq-len L --eval-data EVAL     (the trained ranges, no calibration)

Both artifacts then run the JUDGE rows (TOSA reference model on the .tosa handed to Vela, host ops in PyTorch; the
two artifacts in two processes side by side), and their decisions are compared with the *original float
detector's* (before QAT), at its threshold, with F1 against the labels beside. JUDGE: rows of the test split and of
the held-out template family, half each, never trained or calibrated on; EVAL, the ports' own --eval-data (their
parity gate), is its first --eval-rows rows. VAL: rows of the validation split (calibration, and QAT's own
before/after figures); TRAIN: rows of the train split. Why 300 judge rows: at int8 the two graphs differ on a few
rows in ten, and 60 rows moved the comparison by several points from one sample to the next.

The PTQ port runs beside the QAT run (side by side on the two cores, so each one's wall time is under contention).

    python benchmarks/npu_qat.py [--init me5-small] [--seq-len 64] [--train-rows 640] [--epochs 2] [--lr 5e-5]
                                 [--judge-rows 300]
    python benchmarks/npu_qat.py --distill 0 --name npu_qat_labels      # QAT on the labels alone
    python benchmarks/npu_qat.py --int16 layernorm --name npu_qat_layernorm   # both with LayerNorm at a16w8
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from common import demo_build, meta, write_result
from npu_port import port_cli


def _rows(path: Path, n: int, seed: int) -> list[str]:
    lines = path.read_text().splitlines()
    random.Random(seed).shuffle(lines)
    return lines[:n]


def _figures(probs, ref, labels, thr) -> dict:
    from npuport.detector.metrics import classification_metrics

    m = classification_metrics(labels, probs, thr)
    return {"decisions_kept_vs_float": round(float(np.mean((probs >= thr) == (ref >= thr))), 4),
            "f1": round(m["f1"], 4), "max_abs_prob_diff_vs_float": round(float(np.abs(probs - ref).max()), 4)}


def _served(artifact: str, rows) -> np.ndarray:
    """P(class 1) of the artifact as served, parity failure or not (that failure is what is measured here)."""
    import torch

    from npuport.serve.engine import Engine

    engine = Engine(artifact, "ethos-u", allow_unverified=True, require_tokenizer=False)
    try:
        return torch.softmax(torch.from_numpy(engine.infer(rows)[0]).float(), -1)[:, 1].numpy()
    finally:
        engine.session.close()


def _wall(out: Path) -> float:
    return json.loads((out / "report.json").read_text())["wall_seconds"]


def _artifact(out: Path) -> dict:
    report = json.loads((out / "report.json").read_text())
    b = report["backends"]["ethos-u"]["int8"]
    m = json.loads((out / b["artifact"] / "manifest.json").read_text())
    rt = m["runtime"]["meta"]
    (shape,) = rt["shapes"].values()
    return {"calibration": rt["calibration"], "cycles": shape["cycles"],
            "estimated_ms": shape["estimated_ms"], "proof": shape["proof"], "compile_seconds": b["compile_seconds"],
            "port_parity_data": m["parity"]["data"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--init", default="me5-small", help="the demo detector's init (default me5-small, the demo's)")
    ap.add_argument("--device", default="ethos-u55-128")
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--eval-rows", type=int, default=60, help="the ports' --eval-data: rows of test and test_family")
    ap.add_argument("--judge-rows", type=int, default=300, help="rows of test and test_family (half each) both "
                    "artifacts are judged on; the first --eval-rows of each half are the ports' own")
    ap.add_argument("--calib-rows", type=int, default=64)
    ap.add_argument("--train-rows", type=int, default=640)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--distill", type=float, default=1.0, help="QAT's weight on the float detector's answers "
                    "(`--qat-distill`; 0: the labels only)")
    ap.add_argument("--int16", default="", metavar="GROUPS",
                    help="groups at 16-bit activations in both runs (PTQ: `port --int16`, QAT: `--qat-int16`)")
    ap.add_argument("--name", default="npu_qat", help="results/NAME.json")
    ap.add_argument("--work", help="work directory, kept (default: a new temporary one); its finished steps are reused")
    a = ap.parse_args()

    import torch

    from npuport.detector.data import encode, load_examples
    from npuport.detector.demo import DemoBuildConfig, build_demo
    from npuport.models.detector import load_detector, load_tokenizer
    from npuport.ui import Progress

    tmp = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="npuport-qat-"))
    tmp.mkdir(parents=True, exist_ok=True)
    demo = build_demo(DemoBuildConfig(init=a.init), Progress(enabled=True), show_bar=False)
    evalf, calibf, trainf = tmp / "eval.jsonl", tmp / "calib.jsonl", tmp / "train.jsonl"
    judgef = tmp / "judge.jsonl"
    half, jhalf = a.eval_rows // 2, a.judge_rows // 2
    evalf.write_text("\n".join(_rows(demo / "data" / "test.jsonl", a.eval_rows - half, 0)
                               + _rows(demo / "data" / "test_family.jsonl", half, 0)) + "\n")
    judgef.write_text("\n".join(_rows(demo / "data" / "test.jsonl", a.judge_rows - jhalf, 0)
                                + _rows(demo / "data" / "test_family.jsonl", jhalf, 0)) + "\n")
    calibf.write_text("\n".join(_rows(demo / "data" / "val.jsonl", a.calib_rows, 1)) + "\n")
    trainf.write_text("\n".join(_rows(demo / "data" / "train.jsonl", a.train_rows, 2)) + "\n")
    common = ["--backend", "ethos-u", "--device", a.device, "--precision", "int8", "--seq-len", str(a.seq_len),
              "--eval-data", str(evalf),
              "--bench-runs", "1", "--min-agreement", "0"]
    ptq_int16 = ["--int16", a.int16] if a.int16 else []  # a QAT port takes its groups from qat.json
    out = {**meta("npu_qat.py"), "demo_init": a.init, "demo": demo_build(demo), "device": a.device, "shape": f"1x{a.seq_len}",
           "eval_split": f"{a.judge_rows - jhalf} test + {jhalf} test_family rows",
           "port_eval_split": f"{a.eval_rows - half} test + {half} test_family rows (the first of the judged ones)",
           "calibration_rows": a.calib_rows,
           "qat": {"train_rows": a.train_rows, "epochs": a.epochs, "lr": a.lr, "batch": a.batch,
                   "distill": a.distill}, "int16": [g for g in a.int16.split(",") if g], "runs": {}}

    # The PTQ port runs beside the QAT run (two cores, two mostly single-threaded jobs): wall times are side by side.
    # With --work, a step whose output is there already (a run that stopped later) is not run again.
    ptq = None
    if not (tmp / "ptq" / "report.json").exists():
        ptq = subprocess.Popen([sys.executable, "-m", "npuport.cli", "-q", "port", str(demo / "model"), "-o",
                                str(tmp / "ptq"), *common, *ptq_int16, "--calibration-data", str(calibf)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if not (tmp / "qat" / "model" / "qat.json").exists():
        rc, tail, _ = port_cli(["detector", "train", "--init", str(demo / "model"), "--data", str(trainf), "--val",
                                str(calibf), "--qat", "ethos-u", "--qat-device", a.device, "--max-len",
                                str(a.seq_len), "--batch", str(a.batch), "--epochs", str(a.epochs), "--lr", str(a.lr),
                                "--qat-distill", str(a.distill), *(["--qat-int16", a.int16] if a.int16 else []),
                                "-o", str(tmp / "qat")], 5400)
        if rc != 0:
            raise SystemExit(f"QAT failed: {tail}")
    info = json.loads((tmp / "qat" / "model" / "qat.json").read_text())
    if not (tmp / "qat_port" / "report.json").exists():
        rc, tail, _ = port_cli(["port", str(tmp / "qat" / "model"), "-o", str(tmp / "qat_port"), *common], 5400)
        if rc not in (0, 1):
            raise SystemExit(f"QAT port failed: {tail}")
    if ptq is not None:
        err = ptq.communicate(timeout=5400)[1]
        if ptq.returncode not in (0, 1):
            raise SystemExit(f"PTQ port failed: {err[-1500:]}")
    out["runs"]["ptq"] = {"port_wall_s": _wall(tmp / "ptq"), **_artifact(tmp / "ptq"),
                          "reused_from_work": ptq is None}  # a --work run's port (PTQ: no QAT code involved)
    out["runs"]["qat"] = {"train_wall_s": info["seconds"], "port_wall_s": _wall(tmp / "qat_port"),
                          "steps": info["steps"], "loss_first": info["loss_first"], "loss_last": info["loss_last"],
                          "on_val": {k: info[k] for k in ("float", "fake_quant_before", "fake_quant_after")},
                          **_artifact(tmp / "qat_port")}

    # every decision against the original float detector's, on rows neither run trained or calibrated on
    model, tok = load_detector(demo / "model"), load_tokenizer(demo / "model")
    examples = load_examples(judgef, require_label=True)
    rows = encode(tok, examples, a.seq_len)
    labels = np.array([e.label for e in examples])
    thr = model.spec.threshold
    model.eval()
    with torch.no_grad():
        ref = np.concatenate([torch.softmax(model(torch.from_numpy(r[None]), torch.ones(1, len(r), dtype=torch.long))
                                            .float(), -1)[:, 1].numpy() for r in rows])
    out["float"] = _figures(ref, ref, labels, thr)
    # the two artifacts side by side (one process each: the reference model runs one row at a time on one core)
    t0 = time.perf_counter()
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        served = dict(zip(("ptq", "qat"), pool.map(_served, [str(tmp / "ptq"), str(tmp / "qat_port")],
                                                   [rows, rows])))
    out["judge_wall_s"] = round(time.perf_counter() - t0, 1)
    for name, probs in served.items():
        run = out["runs"][name]
        run["on_eval"] = _figures(probs, ref, labels, thr)
        print(name, json.dumps(run)[:400], flush=True)
    write_result(a.name, out)


if __name__ == "__main__":
    main()
