"""P11: calibrated static int8 with decisions held, and the per-call overhead at short inputs.

Three parts, one run, one JSON (benchmarks/results/p11_int8.json):
  decisions  the demo detector (MiniLM init) at buckets 32/64/128, int8 on ONNX Runtime (static QDQ, MinMax and
             Percentile calibration; dynamic for reference) and OpenVINO (NNCF), calibrated on the demo validation
             split, judged on the test split (unseen personas) against eager fp32; per-group sensitivity for ORT.
  speed      mmBERT-base (random init) 1 x 512: eager fp32, ORT / OpenVINO fp32 and int8, interleaved in one process
             (npuport bench). A random-init model has no tokenizer, so its int8 is calibrated on random-token probes:
             this part measures speed only; decisions are the first part's.
  overhead   the demo detector at 64 tokens on ONNX Runtime: npuport's Session.run (and router + Session.run, the
             serving path) vs the raw onnxruntime call on the same session, interleaved, medians.

    python benchmarks/p11_int8.py [--runs 10] [--skip-speed]
"""

import argparse
import shutil
import statistics
import tempfile
import time

import numpy as np
from common import meta, write_result

from npuport.api import BenchConfig, ModelSource, PortConfig, bench, port
from npuport.detector.demo import DemoBuildConfig, build_demo
from npuport.runtimes import ShapeSpec
from npuport.spec import QuantOptions
from npuport.ui import Progress

GOAL_AGREEMENT = 0.995
MEASURE = dict(min_agreement=0)  # measured here, not gated: the refusal is port's job and is tested


def decisions(root, tmp, prog) -> dict:
    model, data = root / "model", root / "data"
    common = dict(source=ModelSource(model_dir=str(model)), shapes=ShapeSpec(buckets=(32, 64, 128)), precision="int8",
                  eval_data=str(data / "test.jsonl"), calibration_data=str(data / "val.jsonl"), capture_methods=(),
                  bench_runs=10)
    variants = {
        "onnxruntime static minmax": ("onnxruntime", QuantOptions(method="minmax", sensitivity=True, **MEASURE)),
        "onnxruntime static percentile": ("onnxruntime", QuantOptions(method="percentile", **MEASURE)),
        "onnxruntime dynamic": ("onnxruntime", QuantOptions(mode="dynamic", **MEASURE)),
        "openvino nncf": ("openvino", QuantOptions(**MEASURE)),
    }
    out = {}
    for i, (name, (backend, q)) in enumerate(variants.items()):
        t0 = time.perf_counter()
        rep = port(PortConfig(out=f"{tmp}/dec{i}", backends=(backend,), quant=q, **common), prog)
        r = rep["backends"][backend]["int8"]
        out[name] = {"runtime": backend, "quant": q.options(), "decision_agreement": r["parity"]["data"]["decision_agreement"],
                     "rows": r["parity"]["data"]["n"], "max_abs_logit_diff": r["parity"]["data"]["max_abs_logit_diff"],
                     "max_abs_prob_diff": r["parity"]["data"]["max_abs_prob_diff"], "p50_ms_at_128": r["p50_ms"],
                     "quantization": r.get("quant", {}).get("quantization"), "seconds": round(time.perf_counter() - t0, 1),
                     **({"sensitivity": r["quant"]["sensitivity"]} if r.get("quant", {}).get("sensitivity") else {})}
    return out


def speed(tmp, runs: int, prog) -> dict:
    src, shapes = ModelSource(preset="mmbert-base", random_init=True), ShapeSpec(buckets=(512,))
    art = f"{tmp}/speed"
    port(PortConfig(source=src, out=art, backends=("onnxruntime", "openvino"), shapes=shapes, capture_methods=(),
                    bench_runs=1), prog)
    port(PortConfig(source=src, out=f"{tmp}/speed8", backends=("onnxruntime", "openvino"), shapes=shapes,
                    precision="int8", capture_methods=(), bench_runs=1, quant=QuantOptions(**MEASURE)), prog)
    for d in ("onnxruntime-int8", "openvino-int8"):
        shutil.move(f"{tmp}/speed8/{d}", f"{art}/{d}")
    return bench(BenchConfig(artifact_dir=art, vs=("eager",), runs=runs, warmup=2), prog)


def overhead(root, tmp, prog, calls: int = 400, rounds: int = 5) -> dict:
    from npuport.artifact import load_session
    from npuport.router import BucketRouter
    from npuport.runtimes.base import feeds_of

    port(PortConfig(source=ModelSource(model_dir=str(root / "model")), out=f"{tmp}/ovh", backends=("onnxruntime",),
                    shapes=ShapeSpec(buckets=(32, 64, 128)), capture_methods=(), bench_runs=1), prog)
    manifest, session = load_session(f"{tmp}/ovh/onnxruntime-fp32")
    router = BucketRouter(session.shapes, manifest.pad_token_id)
    row = np.arange(5, 5 + 57, dtype=np.int64)  # 57 tokens -> the 64 bucket
    ids = np.zeros((1, 64), np.int64)
    ids[0, :57] = row
    feeds = feeds_of(ids, (ids != 0).astype(np.int64))
    raw = session.sessions[(1, 64)]

    def t(fn):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - t0) / calls * 1e6

    paths = {"raw onnxruntime": lambda: raw.run(None, feeds), "npuport Session.run": lambda: session.run(feeds),
             "router + Session.run": lambda: session.run(router.pack([row], router.bucket_for(len(row)), 1))}
    for fn in paths.values():
        fn()
    samples = {n: [] for n in paths}
    for _ in range(rounds):  # interleaved rounds: drift hits every path alike
        for n, fn in paths.items():
            samples[n].append(t(fn))
    med = {n: statistics.median(v) for n, v in samples.items()}
    base = med["raw onnxruntime"]
    return {"shape": [1, 64], "calls_per_round": calls, "rounds": rounds, "median_us": med,
            "overhead_vs_raw": {n: v / base - 1 for n, v in med.items() if n != "raw onnxruntime"}}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10, help="timed runs per path in the speed part")
    ap.add_argument("--skip-speed", action="store_true", help="skip mmBERT-base 1 x 512 (minutes)")
    args = ap.parse_args()
    prog = Progress()
    root = build_demo(DemoBuildConfig(), prog, show_bar=False)
    tmp = tempfile.mkdtemp(prefix="npuport-p11-")
    t0 = time.perf_counter()
    try:
        res = {"decisions": decisions(root, tmp, prog), "overhead": overhead(root, tmp, prog)}
        if not args.skip_speed:
            res["speed"] = speed(tmp, args.runs, prog)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    write_result("p11_int8", {**meta("p11_int8.py"), "seconds": round(time.perf_counter() - t0, 1),
                              "goal_agreement": GOAL_AGREEMENT, "model": "demo detector (decisions, overhead); "
                              "mmBERT-base random init (speed)", **res})


if __name__ == "__main__":
    main()
