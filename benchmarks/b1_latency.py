"""B1 + B6: mmBERT-base architecture (published config, random init), batch 1 x 512 tokens. Eager PyTorch (the HF
model as a user runs it), torch.compile, every npuport fp32 backend and the ONNX Runtime int8 artifact, all timed
interleaved in one process; p50/p99/max and ratios to eager.

    python benchmarks/b1_latency.py [--runs 12] [--seq-len 512] [--preset mmbert-base]
"""

import argparse
import shutil
import tempfile
import time

from common import meta, write_result

from npuport.api import BenchConfig, ModelSource, PortConfig, bench, port
from npuport.runtimes import ShapeSpec, get_runtime
from npuport.spec import QuantOptions
from npuport.ui import Progress

# These figures are ONNX Runtime's dynamic int8, measured not gated (static, calibrated int8: p11_int8.py)
DYNAMIC = QuantOptions(mode="dynamic", min_agreement=0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="mmbert-base")
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--runs", type=int, default=12)
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile (slow to compile on 2 cores)")
    ap.add_argument("--runtimes", default=None,
                    help="fp32 runtimes to port and time (default: onnxruntime, openvino, inductor, and iree when installed)")
    args = ap.parse_args()
    prog = Progress()
    src = ModelSource(preset=args.preset, random_init=True)
    shapes = ShapeSpec(buckets=(args.seq_len,))
    tmp = tempfile.mkdtemp(prefix="npuport-b1-")
    t0 = time.perf_counter()
    runtimes = tuple(args.runtimes.split(",")) if args.runtimes else (
        "onnxruntime", "openvino", "inductor", *(("iree",) if get_runtime("iree").available()[0] else ()))
    try:
        fp32 = port(PortConfig(source=src, out=f"{tmp}/art", runtimes=runtimes, shapes=shapes,
                               capture_methods=("trace",), bench_runs=1), prog)
        int8 = port(PortConfig(source=src, out=f"{tmp}/int8", runtimes=("onnxruntime",), shapes=shapes, precision="int8",
                               capture_methods=(), bench_runs=1, quant=DYNAMIC), prog)
        shutil.move(f"{tmp}/int8/onnxruntime-int8", f"{tmp}/art/onnxruntime-int8")
        vs = ("eager",) if args.no_compile else ("eager", "torch.compile")
        res = bench(BenchConfig(artifact_dir=f"{tmp}/art", vs=vs, runs=args.runs, warmup=2), prog)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    write_result(f"b1_latency_{args.preset.replace('-', '_')}_{args.seq_len}", {
        **meta("b1_latency.py"), "preset": args.preset, "seq_len": args.seq_len, "seconds": round(time.perf_counter() - t0, 1),
        "bench": res, "parity": {"fp32": {b: v["fp32"] for b, v in fp32["backends"].items()},
                                 "int8": int8["backends"]["onnxruntime"]["int8"]},
        "peers": "timed by benchmarks/b1_peers.py in their own environment (they pin transformers 4.x)",
    })


if __name__ == "__main__":
    main()
