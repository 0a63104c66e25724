"""Buckets planned from data (`--buckets auto`) on the demo detector's own splits: for K = 1..4, the planned lengths
and the padded tokens they compute against padding every row to the longest (K = 1) and to the report's 512; then
`port --buckets auto` (ONNX Runtime) on the test split, `verify --eval-data` on test_family, and the throughput of the
planned buckets against the hand-picked demo buckets (32, 64, 128) and pad-to-max on the test split's rows,
interleaved in one process (medians).

    python benchmarks/plan_buckets.py [--init minilm] [--runs 5]
"""

import argparse
import shutil
import tempfile
import time

import numpy as np
from common import meta, write_result

from npuport.api import ModelSource, PortConfig, VerifyConfig, plan_buckets_for, port, verify
from npuport.artifact import load_session
from npuport.detector.data import encode, load_examples
from npuport.detector.demo import DemoBuildConfig, build_demo
from npuport.models.detector import load_tokenizer
from npuport.router import BucketRouter
from npuport.runtimes import ShapeSpec
from npuport.ui import Progress


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--init", default="minilm")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    prog = Progress()
    root = build_demo(DemoBuildConfig(init=args.init), prog, show_bar=False)  # cached after the first build
    model, data = root / "model", root / "data"
    plans = {split: {k: plan_buckets_for(str(data / f"{split}.jsonl"), str(model), max_buckets=k) for k in (1, 2, 3, 4)}
             for split in ("test", "test_family", "val")}
    tmp = tempfile.mkdtemp(prefix="npuport-plan-")
    try:
        auto = port(PortConfig(source=ModelSource(model_dir=str(model)), out=f"{tmp}/auto", runtimes=("onnxruntime",),
                               shapes=ShapeSpec(), auto_buckets=3, eval_data=str(data / "test.jsonl"),
                               capture_methods=("trace",)), prog)
        checked = verify(VerifyConfig(path=f"{tmp}/auto", eval_data=str(data / "test_family.jsonl")), prog)
        planned = tuple(auto["bucket_plan"]["buckets"])
        shapes = {"planned (auto, K=3)": planned, "hand-picked demo": (32, 64, 128), "pad to max": (planned[-1],)}
        for name, buckets in shapes.items():
            if name != "planned (auto, K=3)":
                port(PortConfig(source=ModelSource(model_dir=str(model)), out=f"{tmp}/{len(buckets)}-{buckets[-1]}",
                                runtimes=("onnxruntime",), shapes=ShapeSpec(buckets=buckets), capture_methods=("trace",),
                                bench_runs=1), prog)
        tok = load_tokenizer(model)
        rows = encode(tok, load_examples(data / "test.jsonl"), planned[-1])
        sessions = {name: load_session(f"{tmp}/auto/onnxruntime-fp32" if name.startswith("planned")
                                       else f"{tmp}/{len(b)}-{b[-1]}/onnxruntime-fp32")[1] for name, b in shapes.items()}
        times = {name: [] for name in sessions}
        for _ in range(args.runs):  # interleaved: machine drift hits every path alike
            for name, session in sessions.items():
                router = BucketRouter(session.shapes, tok.pad_token_id)
                t0 = time.perf_counter()
                router.run(session, rows)
                times[name].append(time.perf_counter() - t0)
        throughput = {name: {"rows_per_s": round(len(rows) / float(np.median(t)), 1), "median_s": round(float(np.median(t)), 3),
                             "buckets": list(shapes[name])} for name, t in times.items()}
        for s in sessions.values():
            s.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    write_result("plan_buckets", {**meta("plan_buckets.py"), "init": args.init, "plans": plans,
                                  "auto_port": {"bucket_plan": auto["bucket_plan"], "pass": auto["pass"]},
                                  "verify_test_family": {"pass": checked["pass"]}, "throughput_test_split": throughput,
                                  "runs": args.runs, "rows": len(rows)})


if __name__ == "__main__":
    main()
