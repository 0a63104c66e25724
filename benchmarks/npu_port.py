"""P9 #5: the detector on both NPUs that install here, with the same proofs as every runtime.

- Qualcomm HTP (`qnn`): fp16 and calibrated int8 QDQ; offline context binaries, executed in Qualcomm's x86 HTP
  simulator (a functional check: its milliseconds are simulation time, not the chip's).
- Arm Ethos-U55-128 (`ethos-u`): PT2E int8, TOSA -> Vela; executed by the TOSA reference model on the exact .tosa
  partitions handed to Vela. Speed = Vela's cycle estimate per bucket at the target's clock (an estimate, no board).

Models: the demo detector (all-MiniLM-L6-v2 fine-tuned, `npuport demo`'s model) at buckets 64 and 128, calibrated on
the demo *validation* split and judged on rows of the *test* split (never the same rows); and mmBERT-small (random
init, 140M parameters, 256k vocabulary) at 1 x 128, each target in its own process with a time limit, so a target
that cannot take it is reported with what failed and why.

    python benchmarks/npu_port.py [--eval-rows 40] [--mmbert-timeout 900]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import HERE, meta, write_result

TARGETS = "qnn-fp16,qnn-int8,qnn-int16,ethos-u-int8"


def rows(src: Path, n: int, seed: int) -> str:
    lines = src.read_text().splitlines()
    random.Random(seed).shuffle(lines)
    return "\n".join(lines[:n]) + "\n"


def summarise(out: Path, runtime: str, precision: str) -> dict:
    report = json.loads((out / "report.json").read_text())
    b = report["backends"][runtime][precision]
    m = json.loads((out / b["artifact"] / "manifest.json").read_text())
    meta_ = m["runtime"]["meta"]
    res = {"pass": b["pass"], "executes": b["executes"], "compile_seconds": b["compile_seconds"],
           "disk_mb": b["disk_mb"], "simulated_p50_ms": b["p50_ms"], "parity": b["parity"],
           "whole_graph_on_npu": meta_.get("whole_graph_on_npu"), "calibration": meta_.get("calibration"),
           "rope_layout": meta_.get("rope_layout"),
           "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    if runtime == "qnn":
        res["host_ops"] = meta_["host_ops"]
    else:
        res["per_bucket"] = {s: {"cycles": v["cycles"], "estimated_ms": v["estimated_ms"], "partitions": v["partitions"],
                                 "clock_mhz": v["vela"][0]["clock_mhz"], "host_ops": v["host_ops"], "proof": v["proof"],
                                 "sram_kib": max(x["sram_kib"] for x in v["vela"]),
                                 "flash_kib": sum(x["off_chip_flash_kib"] for x in v["vela"]),
                                 "top_ops": max(v["vela"], key=lambda x: x["cycles"])["top_ops"][:6],
                                 "compile_s": v.get("compile_s")}
                             for s, v in meta_["shapes"].items()}
    return res


def port_cli(args: list[str], timeout: int) -> tuple[int | None, str, float]:
    t0 = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-m", "npuport.cli", "-q", *args], capture_output=True, text=True,
                           timeout=timeout)
        return p.returncode, (p.stderr or p.stdout)[-1500:], time.perf_counter() - t0
    except subprocess.TimeoutExpired:
        return None, f"did not finish within {timeout} s", time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--eval-rows", type=int, default=40)
    ap.add_argument("--calib-rows", type=int, default=64)
    ap.add_argument("--buckets", default="64,128")
    ap.add_argument("--mmbert-timeout", type=int, default=900)
    ap.add_argument("--skip-mmbert", action="store_true")
    ap.add_argument("--mmbert-targets", default="qnn-fp16,ethos-u-int8,ethos-u-int8@ethos-u85-256",
                    help="runtime-precision pairs, each optionally @DEVICE (default: the runtime's own device)")
    ap.add_argument("--mmbert-check-only", action="store_true",
                    help="with --merge: do not retry a port that failed before; run `npuport check` on it")
    ap.add_argument("--targets", default=TARGETS, help=f"runtime-precision pairs (default {TARGETS})")
    ap.add_argument("--merge", action="store_true", help="update these targets in the existing results JSON")
    a = ap.parse_args()

    from npuport.detector.demo import DemoBuildConfig, build_demo
    from npuport.ui import Progress

    tmp = Path(tempfile.mkdtemp(prefix="npuport-npu-"))
    targets = [t for t in a.targets.split(",") if t]
    if targets:  # the demo is built (or taken from the cache) only when a detector target is asked for
        demo = build_demo(DemoBuildConfig(init="minilm"), Progress(enabled=True), show_bar=False)
        evalf, calibf = tmp / "eval.jsonl", tmp / "calib.jsonl"
        evalf.write_text(rows(demo / "data" / "test.jsonl", a.eval_rows, 0))
        calibf.write_text(rows(demo / "data" / "val.jsonl", a.calib_rows, 1))
    out = {**meta("npu_port.py"), "demo_model": "demo detector v2 (all-MiniLM-L6-v2 init)", "buckets": a.buckets,
           "eval_rows": a.eval_rows, "calibration_rows": a.calib_rows, "detector": {}, "mmbert_small": {}}
    old = HERE / "results" / "npu_port.json"
    if a.merge and old.exists():
        prev = json.loads(old.read_text())
        out["detector"], out["mmbert_small"] = prev["detector"], prev.get("mmbert_small", {})
    for pair in targets:
        runtime, prec = pair.rsplit("-", 1)
        d = tmp / f"demo-{runtime}-{prec}"
        rc, tail, wall = port_cli([
            "port", str(demo / "model"), "-o", str(d), "--backend", runtime, "--precision", prec, "--buckets", a.buckets,
            "--eval-data", str(evalf), "--calibration-data", str(calibf), "--bench-runs", "3",
            "--min-agreement", "0"], 3600)  # measured here: an artifact below the bar is kept to report its figures
        key = f"{runtime}-{prec}"
        out["detector"][key] = {"wall_s": round(wall, 1), **(summarise(d, runtime, prec) if rc in (0, 1) else
                                                             {"failed": tail})}
        print(key, json.dumps(out["detector"][key])[:400], flush=True)
        write_result("npu_port", out)
    if not a.skip_mmbert:
        for target in filter(None, a.mmbert_targets.split(",")):
            pair, _, device = target.partition("@")
            runtime, prec = pair.rsplit("-", 1)
            d = tmp / f"mmbert-{runtime}-{device or 'default'}"
            on = ["--device", device] if device else []
            prev = out["mmbert_small"].get(target, {})
            if a.mmbert_check_only and "failed" in prev:  # keep the earlier port attempt, add the pre-flight
                rc, tail, wall = None, prev["failed"], prev["wall_s"]
            else:
                rc, tail, wall = port_cli(["port", "--preset", "mmbert-small", "--random-init", "-o", str(d),
                                           "--backend", runtime, "--precision", prec, "--seq-len", "128", *on,
                                           "--bench-runs", "1", "--min-agreement", "0"], a.mmbert_timeout)
            out["mmbert_small"][target] = ({"wall_s": round(wall, 1), **summarise(d, runtime, prec)}
                                                        if rc in (0, 1) else {"wall_s": round(wall, 1), "failed": tail})
            if rc not in (0, 1):  # what the target's partitioner says, from `npuport check` (no lowering, no Vela)
                cj = tmp / f"check-{runtime}.json"
                rc2, tail2, wall2 = port_cli(["check", "--preset", "mmbert-small", "--random-init", "--seq-len", "128",
                                              "--backend", runtime, "--precision", prec, *on, "--json", str(cj)],
                                             a.mmbert_timeout)
                t = json.loads(cj.read_text())["targets"][runtime] if cj.exists() else {"verdict": tail2}
                out["mmbert_small"][target]["check"] = {
                    "wall_s": round(wall2, 1), "verdict": t["verdict"], "partitions": t.get("partitions"),
                    "host_ops": t.get("host_ops", {}), "rejected": t.get("rejected", [])[:10]}
            print(target, json.dumps(out["mmbert_small"][target])[:400], flush=True)
            write_result("npu_port", out)


if __name__ == "__main__":
    main()
