"""P13 #1: mixed 8/16-bit integer recipes on the NPUs that install here, judged on the target's own execution.

The demo detector (`npuport demo`'s model; --init picks which) through `npuport port` as a user runs it, one recipe
per run, each calibrated on rows of the demo *validation* split and judged on rows of the *test* split and of the
held-out template family (never the calibration rows):

- qnn: fp16; int8 with every activation at 8 bits (`--int16 none`); int8 with qnn's default recipe (16-bit
  activations in the groups `QnnRuntime.default_int16` names); int16 (every activation at 16 bits); and
  `--keep-fp32 auto` from all-8-bit (sensitivity measured on the simulator; each round's decisions and cost).
  Executes in Qualcomm's x86 HTP simulator (bit-accurate; its milliseconds are simulation time, not the chip's).
- ethos-u (U55-128, one bucket 1 x 64: each Ethos-U compile of the demo detector takes minutes): int8 with every
  activation at 8 bits (`--int16 none`), int8 with the LayerNorm group at a16w8 (`--int16 layernorm`, ExecuTorch's
  per-module config), int16 (a16w8 everywhere), and `--keep-fp32 auto` from all-8-bit (groups moved to float on the
  host in the reference model's sensitivity order). Executes in the TOSA reference model on the .tosa handed to
  Vela (Vela's cycle estimate beside).

    python benchmarks/npu_mixed.py [--init me5-small] [--eval-rows 60] [--recipes qnn-fp16,qnn-int8-none,...]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
from pathlib import Path

from common import meta, write_result
from npu_port import port_cli

ETHOS_U_SHAPE = ["--device", "ethos-u55-128", "--seq-len", "64"]  # a recipe's own shape flags replace --buckets
# name -> (runtime, precision, extra port flags)
RECIPES = {
    "qnn-fp16": ("qnn", "fp16", []),
    "qnn-int8-none": ("qnn", "int8", ["--int16", "none"]),
    "qnn-int8-default": ("qnn", "int8", []),
    "qnn-int8-layernorm": ("qnn", "int8", ["--int16", "layernorm"]),
    "qnn-int8-layernorm-ffn_out": ("qnn", "int8", ["--int16", "layernorm,ffn_out"]),
    "qnn-int8-layernorm-ffn_out-gelu": ("qnn", "int8", ["--int16", "layernorm,ffn_out,gelu"]),
    "qnn-int16": ("qnn", "int16", []),
    "qnn-int8-auto": ("qnn", "int8", ["--int16", "none", "--keep-fp32", "auto", "--min-agreement", "1"]),
    "ethos-u-int8-none": ("ethos-u", "int8", ["--int16", "none", *ETHOS_U_SHAPE]),
    "ethos-u-int8-layernorm": ("ethos-u", "int8", ["--int16", "layernorm", *ETHOS_U_SHAPE]),
    "ethos-u-int16": ("ethos-u", "int16", ETHOS_U_SHAPE),
    # from all-8-bit, groups move to float on the host in the reference model's own sensitivity order
    "ethos-u-int8-auto": ("ethos-u", "int8", ["--int16", "none", "--keep-fp32", "auto", "--min-agreement", "1",
                                              *ETHOS_U_SHAPE]),
}


CALIB_ROWS = 64


def _rows(path: Path, n: int, seed: int) -> list[str]:
    lines = path.read_text().splitlines()
    random.Random(seed).shuffle(lines)
    return lines[:n]


def _summary(out: Path, runtime: str, precision: str) -> dict:
    report = json.loads((out / "report.json").read_text())
    b = report["backends"][runtime][precision]
    if b.get("refused"):
        return {"refused": b["reason"], "decision_agreement": b["decision_agreement"],
                "max_abs_logit_diff": b["max_abs_logit_diff"], "auto_keep": b.get("auto_keep")}
    m = json.loads((out / b["artifact"] / "manifest.json").read_text())
    rt = m["runtime"]["meta"]
    d = m["parity"]["data"]
    return {"executes": b["executes"], "decision_agreement": d["decision_agreement"], "n": d["n"],
            "max_abs_logit_diff": d["max_abs_logit_diff"], "max_abs_prob_diff": d["max_abs_prob_diff"],
            "probes_max_abs_logit_diff": m["parity"]["probes"]["max_abs_logit_diff"], "disk_mb": b["disk_mb"],
            "compile_seconds": b["compile_seconds"], "whole_graph_on_npu": rt.get("whole_graph_on_npu"),
            "quantization": rt.get("quantization"), "int16": rt.get("int16"), "int16_by_default": rt.get("int16_by_default"),
            "cost": rt.get("cost"), "auto_keep": rt.get("auto_keep"), "sensitivity": rt.get("sensitivity"),
            "host_ops": rt.get("host_ops")}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--init", default="me5-small", help="the demo detector's init (default me5-small, the demo's)")
    ap.add_argument("--eval-rows", type=int, default=60, help="rows of the test split (and as many of test_family)")
    ap.add_argument("--calib-rows", type=int, default=CALIB_ROWS,
                    help=f"validation rows to calibrate on (default {CALIB_ROWS}; 480: the whole split, as a user "
                         "passing val.jsonl; a recipe run at another count is stored under its own name)")
    ap.add_argument("--buckets", default="64,128")
    ap.add_argument("--recipes", default=",".join(RECIPES), help=f"comma-separated, of {', '.join(RECIPES)}")
    ap.add_argument("--merge", action="store_true", help="keep other recipes' results from the existing JSON")
    a = ap.parse_args()

    from npuport.detector.demo import DemoBuildConfig, build_demo
    from npuport.ui import Progress

    tmp = Path(tempfile.mkdtemp(prefix="npuport-mixed-"))
    demo = build_demo(DemoBuildConfig(init=a.init), Progress(enabled=True), show_bar=False)
    evalf, calibf = tmp / "eval.jsonl", tmp / "calib.jsonl"
    half = a.eval_rows // 2
    evalf.write_text("\n".join(_rows(demo / "data" / "test.jsonl", a.eval_rows - half, 0)
                               + _rows(demo / "data" / "test_family.jsonl", half, 0)) + "\n")
    calibf.write_text("\n".join(_rows(demo / "data" / "val.jsonl", a.calib_rows, 1)) + "\n")
    out = {**meta("npu_mixed.py"), "demo_init": a.init, "buckets": a.buckets, "eval_rows": a.eval_rows,
           "eval_split": f"{a.eval_rows - half} test + {half} test_family rows", "calibration_rows": CALIB_ROWS,
           "recipes": {}}
    from common import RESULTS

    old = RESULTS / "npu_mixed.json"
    if a.merge and old.exists():
        out["recipes"] = json.loads(old.read_text())["recipes"]
    for name in filter(None, a.recipes.split(",")):
        runtime, prec, extra = RECIPES[name]
        key = name if a.calib_rows == CALIB_ROWS else f"{name}, calibrated on {a.calib_rows} rows"
        d = tmp / name
        shape = [] if "--seq-len" in extra else ["--buckets", a.buckets]
        rc, tail, wall = port_cli(["port", str(demo / "model"), "-o", str(d), "--backend", runtime, "--precision", prec,
                                   *shape, "--eval-data", str(evalf), "--calibration-data", str(calibf),
                                   "--bench-runs", "1", *(extra if "--min-agreement" in extra else
                                                          [*extra, "--min-agreement", "0"])], 5400)
        out["recipes"][key] = {"flags": " ".join(["--precision", prec, *extra]), "wall_s": round(wall, 1),
                               "calibration_rows": a.calib_rows,
                               **(_summary(d, runtime, prec) if rc in (0, 1) else {"failed": tail})}
        print(key, json.dumps(out["recipes"][key])[:300], flush=True)
        write_result("npu_mixed", out)


if __name__ == "__main__":
    main()
