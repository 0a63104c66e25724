"""B2: length buckets vs padding everything to 512 (the field report's approach), mmBERT-base architecture.
The mix: the demo test split's real token lengths (persona + user + reply, demo tokenizer) for half the rows and
log-uniform 16-512 for the other half (long conversations), seeded. Throughput, mean and p99 per-row latency,
and decision agreement between the two (must be 100%).

    python benchmarks/b2_buckets.py [--rows 48] [--backends onnxruntime,openvino]
"""

import argparse
import shutil
import tempfile
import time

import numpy as np
from common import meta, write_result

from npuport.api import ModelSource, PortConfig, port
from npuport.artifact import load_session
from npuport.bench import summarize
from npuport.parity import softmax_dev
from npuport.router import BucketRouter
from npuport.runtimes import ShapeSpec
from npuport.ui import Progress

BUCKETS = (64, 128, 256, 512)


def length_mix(n: int, seed: int = 0) -> list[int]:
    rng = np.random.default_rng(seed)
    demo = []
    try:
        from npuport.detector.data import encode, load_examples
        from npuport.detector.demo import demo_model_dir
        from npuport.models.detector import load_tokenizer

        root = demo_model_dir()
        tok = load_tokenizer(root / "model")
        demo = [len(r) for r in encode(tok, load_examples(root / "data" / "test.jsonl"), 512, context_tokens=None)]
    except Exception as e:  # the demo model is optional here: say so and use the synthetic half only
        print(f"demo data unavailable ({type(e).__name__}); using log-uniform lengths only")
    half = n // 2 if demo else 0
    picked = list(rng.choice(demo, half)) if demo else []
    picked += [int(round(x)) for x in np.exp(rng.uniform(np.log(16), np.log(512), n - half))]
    return [int(min(512, max(16, x))) for x in picked]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="mmbert-base")
    ap.add_argument("--rows", type=int, default=48)
    ap.add_argument("--backends", default="onnxruntime,openvino")
    args = ap.parse_args()
    prog = Progress()
    tmp = tempfile.mkdtemp(prefix="npuport-b2-")
    lengths = length_mix(args.rows)
    out = {}
    t0 = time.perf_counter()
    try:
        rep = port(PortConfig(source=ModelSource(preset=args.preset, random_init=True), out=f"{tmp}/art",
                              runtimes=tuple(args.backends.split(",")), shapes=ShapeSpec(buckets=BUCKETS),
                              capture_methods=("trace",), bench_runs=1), prog)
        g = np.random.default_rng(1)
        rows = [np.concatenate([[2], g.integers(10, 256000, n - 2), [1]]).astype(np.int64) for n in lengths]
        for name in args.backends.split(","):
            manifest, sess = load_session(f"{tmp}/art/{name}-fp32")
            res, probs = {}, {}
            for mode, shapes in (("buckets", sess.shapes), ("pad_to_512", [(1, 512)])):
                router = BucketRouter(shapes, manifest.pad_token_id)
                per_row, logits = [], []
                prog(f"{name}: {mode}, {len(rows)} rows")
                router.run(sess, rows[:2])  # warm-up
                t_all = time.perf_counter()
                for r in rows:
                    t1 = time.perf_counter()
                    logits.append(router.run(sess, [r]).logits[0])
                    per_row.append((time.perf_counter() - t1) * 1e3)
                total = time.perf_counter() - t_all
                probs[mode] = softmax_dev(np.stack(logits))
                res[mode] = {"rows_per_s": len(rows) / total, **summarize(per_row)}
            res["throughput_ratio"] = res["buckets"]["rows_per_s"] / res["pad_to_512"]["rows_per_s"]
            res["decision_agreement"] = float(np.mean((probs["buckets"] >= 0.5) == (probs["pad_to_512"] >= 0.5)))
            res["max_abs_prob_diff"] = float(np.abs(probs["buckets"] - probs["pad_to_512"]).max())
            out[name] = res
            sess.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    write_result("b2_buckets", {**meta("b2_buckets.py"), "preset": args.preset, "buckets": list(BUCKETS),
                                "lengths": {"n": len(lengths), "p50": float(np.median(lengths)), "p90": float(np.percentile(lengths, 90)),
                                            "max": max(lengths), "mean": float(np.mean(lengths))},
                                "seconds": round(time.perf_counter() - t0, 1), "results": out,
                                "parity": {b: v["fp32"]["max_abs_logit_diff"] for b, v in rep["backends"].items()}})


if __name__ == "__main__":
    main()
