"""P13 #3: where an Ethos-U port's time goes (calibration, PT2E, TOSA lowering, Vela, the reference-model check).

`npuport port` of a model for one Ethos-U target and one bucket, run once under cProfile in this process, as a user
runs it; the cumulative time of each stage and of the ExecuTorch Arm passes that take longest. What executes: the
compile is real (ExecuTorch's Arm backend, Vela); the check runs on the TOSA reference model.

    python benchmarks/ethosu_profile.py [--model DIR | --init minilm] [--bucket 64] [--target ethos-u55-128]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import tempfile
import time
from pathlib import Path

from common import meta, write_result

# (label, file suffix, function) of the stages, outermost first; cumulative seconds of each
STAGES = [
    ("port, end to end", "npuport/cli/__init__.py", "main"),
    ("capture and proofs (adapter, trace, export, ONNX)", "npuport/porting.py", "capture_and_prove"),
    ("ethos-u compile (all below)", "npuport/runtimes/ethosu.py", "compile"),
    ("  PT2E quantisation (export, prepare, calibrate, convert)", "npuport/runtimes/ethosu.py", "_quantize"),
    ("    prepare_pt2e", "quantize_pt2e.py", "prepare_pt2e"),
    ("    convert_pt2e", "quantize_pt2e.py", "convert_pt2e"),
    ("  to_edge_transform_and_lower (edge passes, partitioning, TOSA lowering, Vela)", "exir/program/_program.py",
     "to_edge_transform_and_lower"),
    ("    Arm backend preprocess (TOSA lowering passes + Vela)", "backends/arm/ethosu/backend.py", "preprocess"),
    ("      Vela", "backends/arm/arm_vela.py", "vela_compile"),
    ("    torch.fx Interpreter runs (every pass retraces the graph)", "torch/fx/interpreter.py", "run"),
    ("  to_executorch (memory planning, .pte)", "exir/program/_program.py", "to_executorch"),
    ("check on the TOSA reference model (probes, eval rows)", "npuport/porting.py", "_check_one"),
]


def _rows(path: Path, n: int, seed: int) -> str:
    lines = path.read_text().splitlines()
    random.Random(seed).shuffle(lines)
    return "\n".join(lines[:n]) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="a detector directory (default: the demo detector built with --init)")
    ap.add_argument("--init", default="minilm", help="demo detector init when --model is not given (default minilm)")
    ap.add_argument("--bucket", type=int, default=64)
    ap.add_argument("--target", default="ethos-u55-128")
    ap.add_argument("--eval-rows", type=int, default=20)
    ap.add_argument("--name", default="ethosu_profile", help="results/NAME.json")
    a = ap.parse_args()

    from npuport.cli import main as cli
    from npuport.detector.demo import DemoBuildConfig, build_demo
    from npuport.ui import Progress

    tmp = Path(tempfile.mkdtemp(prefix="npuport-eu-prof-"))
    args = ["-q", "port", "-o", str(tmp / "out"), "--backend", "ethos-u", "--device", a.target, "--precision", "int8",
            "--buckets",
            str(a.bucket), "--bench-runs", "1", "--min-agreement", "0"]
    if a.model:
        model = a.model
    else:
        demo = build_demo(DemoBuildConfig(init=a.init), Progress(enabled=True), show_bar=False)
        model = str(demo / "model")
        (tmp / "eval.jsonl").write_text(_rows(demo / "data" / "test.jsonl", a.eval_rows, 0))
        (tmp / "calib.jsonl").write_text(_rows(demo / "data" / "val.jsonl", 64, 1))
        args += ["--eval-data", str(tmp / "eval.jsonl"), "--calibration-data", str(tmp / "calib.jsonl")]
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    rc = cli([*args, model])
    prof.disable()
    wall = time.perf_counter() - t0
    stats = pstats.Stats(prof).stats
    stages = {}
    for label, suffix, fn in STAGES:
        hits = [(v[3], v[1]) for (f, _, name), v in stats.items() if name == fn and f.endswith(suffix)]
        if hits:
            ct, calls = max(hits)
            stages[label] = {"seconds": round(ct, 1), "calls": calls}
    passes = {}
    for (f, _, name), v in stats.items():
        if name == "call" and "/backends/arm/_passes/" in f:
            passes[Path(f).stem] = round(passes.get(Path(f).stem, 0) + v[3], 2)
    top = dict(sorted(passes.items(), key=lambda kv: -kv[1])[:15])
    out = {**meta("ethosu_profile.py"), "model": model if a.model else f"demo detector ({a.init} init)",
           "target": a.target, "shape": f"1x{a.bucket}", "exit_code": rc, "wall_s": round(wall, 1), "stages": stages,
           "arm_passes_counted": len(passes), "arm_pass_seconds_top": top}
    for k, v in stages.items():
        print(f"{v['seconds']:8.1f} s  {v['calls']:4d}x  {k}")
    write_result(a.name, out)


if __name__ == "__main__":
    main()
