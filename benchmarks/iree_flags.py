"""IREE compile flags for the captured LM training step, measured side by side: default llvm-cpu codegen, data
tiling, micro-kernels. One `small` fused step graph, each variant compiled once, then timed interleaved.

    python benchmarks/iree_flags.py [--preset small] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from common import meta, write_result

VARIANTS = {
    "default": [],
    "data-tiling": ["--iree-opt-data-tiling"],
    "data-tiling+ukernels": ["--iree-opt-data-tiling", "--iree-llvmcpu-enable-ukernels=all"],
    "ukernels": ["--iree-llvmcpu-enable-ukernels=all"],
}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="small")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()

    import iree.compiler as ic
    import numpy as np
    import torch

    from npuport.models.lm import build_lm, preset_config
    from npuport.runtimes import iree as iree_rt
    from npuport.train.capture import export_step_onnx
    from npuport.train.step import OptimConfig, StepFunctions

    work = Path(tempfile.mkdtemp(prefix="npuport-iree-flags-"))
    model = build_lm(preset_config(a.preset, 64, max_seq_len=a.seq_len), seed=0)
    fns = StepFunctions(model, OptimConfig())
    onnx_path = work / "fused.onnx"
    export_step_onnx(fns, "fused", a.batch, a.seq_len, onnx_path)
    mlir = work / "fused.mlir"
    iree_rt._import_onnx(onnx_path, mlir, data_dir=work, params=None, save_params=False)
    args = [np.asarray(t.numpy(), order="C") for t in fns.example_args("fused", a.batch, a.seq_len)]
    args[-2] = np.random.default_rng(0).integers(0, 64, args[-2].shape).astype(np.int64)
    args[-1] = np.random.default_rng(1).integers(0, 64, args[-1].shape).astype(np.int64)
    fns_by_name, out = {}, {**meta("iree_flags.py"), "preset": a.preset, "batch": a.batch, "seq_len": a.seq_len,
                            "variants": {}}
    base = iree_rt.TARGET
    for name, flags in VARIANTS.items():
        vmfb = work / f"{name}.vmfb"
        t0 = time.perf_counter()
        try:
            ic.compile_file(str(mlir), output_file=str(vmfb), extra_args=[*base, *flags])
        except ic.CompilerToolError as e:
            out["variants"][name] = {"flags": flags, "error": str(e).splitlines()[0][:200]}
            continue
        out["variants"][name] = {"flags": flags, "compile_s": round(time.perf_counter() - t0, 1)}
        _, fns_by_name[name] = iree_rt._load_module(iree_rt._Device.get(None), vmfb, None)
        fns_by_name[name](*args)  # warm-up
    times = {n: [] for n in fns_by_name}
    for _ in range(a.rounds):
        for n, fn in fns_by_name.items():
            t0 = time.perf_counter()
            fn(*args)
            times[n].append(time.perf_counter() - t0)
    ref = statistics.median(times["default"]) if "default" in times else None
    for n, ts in times.items():
        med = statistics.median(ts)
        out["variants"][n].update(step_ms_median=round(med * 1e3, 1), vs_default=round(ref / med, 3) if ref else None)
        print(f"{n}: {med * 1e3:.1f} ms" + (f" ({ref / med:.2f}× default)" if ref else ""))
    out["torch_threads"] = torch.get_num_threads()
    write_result("iree_flags", out)


if __name__ == "__main__":
    main()
