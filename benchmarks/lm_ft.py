"""P15: training that survives a lost worker on torchft, run as a user runs it (the CLI), with and without faults.

    python benchmarks/lm_ft.py [--corpus ../shared/data/tinystories_sample.txt]

Three workers (`--workers 3 --fault-tolerance torchft`), preset `small`, global batch 12 × 128, one runtime thread per
worker, all on loopback. For DiLoCo (H = 10) and all-reduce: a fault-free run, then the same run with worker 1
SIGKILLed at step 100 (its pid from OUT/workers.json). Recorded: exit code, final validation loss against the
fault-free run, the steps trained without the lost worker, how long the survivors stalled (the gap between their
committed steps around the kill), and how long the replacement took to rejoin (kill → its first committed step).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import HERE, meta, write_result

SHARED = HERE.parent.parent / "shared" / "data" / "tinystories_sample.txt"
KILL_AT = 100


def _cli(corpus: str, out: Path, sync: str, steps: int) -> list[str]:
    src = ["--demo-corpus"] if corpus == "demo" else ["--corpus", corpus]
    return [sys.executable, "-m", "npuport.cli", "-q", "lm", "train", *src, "--preset", "small", "--runtime",
            "onnxruntime", "--batch", "12", "--seq-len", "128", "--steps", str(steps), "--eval-every", "50",
            "--ckpt-every", "50", "--workers", "3", "--sync", sync, "--inner-steps", "10", "--fault-tolerance",
            "torchft", "-o", str(out)]


def _records(run: Path, slot: int) -> list[dict]:
    p = run / "workers" / f"rank_{slot}.jsonl"
    if not p.is_file():
        return []
    return [json.loads(x) for x in p.read_text().splitlines() if x.strip().endswith("}")]


def run_one(cmd: list[str], out: Path, kill_at: int | None) -> dict:
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed_at = None
    if kill_at is not None:
        while not _records(out, 0) or _records(out, 0)[-1]["step"] < kill_at:
            if p.poll() is not None:
                break
            time.sleep(0.05)
        pid = json.loads((out / "workers.json").read_text())["workers"]["1"]
        os.kill(pid, signal.SIGKILL)
        killed_at = time.time()
    stdout, stderr = p.communicate()
    r = {"exit_code": p.returncode, "wall_s": round(time.time() - t0, 1), "stderr_tail": stderr[-400:]}
    if p.returncode != 0:
        return r
    m = json.loads((out / "manifest.json").read_text())
    ms = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    r.update(val_loss=m["val_loss"], steps=[x["step"] for x in ms] == list(range(1, len(ms) + 1)),
             world_size=[x["world_size"] for x in ms], replacements=m["fault_tolerance"]["replacements"],
             val_curve=[(x["step"], x["val_loss"]) for x in ms if "val_loss" in x])
    if killed_at is not None:
        survivor = [x["t"] for x in _records(out, 0)]
        after = [t for t in survivor if t > killed_at]
        before = [t for t in survivor if t <= killed_at]
        r["survivor_stall_s"] = round(after[0] - before[-1], 2) if after and before else None
        typical = sorted(b - a for a, b in zip(survivor, survivor[1:]))
        r["typical_step_gap_s"] = round(typical[len(typical) // 2], 3) if typical else None
        back = [x["t"] for x in _records(out, 1) if x["t"] > killed_at]
        r["rejoin_s"] = round(back[0] - killed_at, 1) if back else None
        r["steps_without_worker"] = sum(1 for w in r["world_size"] if w < 3)
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=str(SHARED) if SHARED.exists() else "demo")
    ap.add_argument("--steps", type=int, default=400)
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="npuport-ft-"))
    out = {**meta("lm_ft.py"), "corpus": a.corpus, "preset": "small", "workers": 3, "global_batch": 12, "seq_len": 128,
           "steps": a.steps, "inner_steps": 10, "kill_at": KILL_AT, "runs": {}}
    for sync in ("diloco", "allreduce"):
        for fault in (False, True):
            name = f"{sync}-{'sigkill' if fault else 'fault-free'}"
            d = root / name
            r = run_one(_cli(a.corpus, d, sync, a.steps), d, KILL_AT if fault else None)
            out["runs"][name] = r
            print(name, {k: v for k, v in r.items() if k not in ("world_size", "val_curve", "stderr_tail")}, flush=True)
        ok, ko = out["runs"][f"{sync}-fault-free"], out["runs"][f"{sync}-sigkill"]
        if ok.get("val_loss") and ko.get("val_loss"):
            ko["val_gap_pct_vs_fault_free"] = round(100 * (ko["val_loss"] - ok["val_loss"]) / ok["val_loss"], 2)
    write_result("lm_ft", out)


if __name__ == "__main__":
    main()
