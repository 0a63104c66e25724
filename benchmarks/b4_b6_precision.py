"""B4 + B6: lower precision on the trained demo detector, where decisions mean something. fp16/bf16 on every
backend that offers them, and ONNX Runtime dynamic int8; drift vs eager fp32 (max |Δlogit|, max |Δprob|) and
decision agreement on the demo test split (unseen personas), p50 at the largest bucket. The int8 speed at
512 tokens on mmBERT-base is in B1.

    python benchmarks/b4_b6_precision.py
"""

import shutil
import tempfile
import time

from common import demo_build, meta, write_result

from npuport.api import ModelSource, PortConfig, port
from npuport.detector.demo import DemoBuildConfig, build_demo
from npuport.runtimes import ShapeSpec, get_runtime
from npuport.spec import QuantOptions
from npuport.ui import Progress

# These figures are ONNX Runtime's dynamic int8, measured not gated (static, calibrated int8: p11_int8.py)
DYNAMIC = QuantOptions(mode="dynamic", min_agreement=0)

PLAN = {"fp16": ("eager", "openvino", "inductor"), "bf16": ("eager", "openvino", "inductor"), "int8": ("onnxruntime",)}


def main():
    prog = Progress()
    root = build_demo(DemoBuildConfig(), prog, show_bar=False)
    tmp = tempfile.mkdtemp(prefix="npuport-b4-")
    t0 = time.perf_counter()
    out = {}
    try:
        for prec, backends in PLAN.items():
            names = tuple(b for b in backends if prec in get_runtime(b).precisions("cpu"))
            rep = port(PortConfig(source=ModelSource(model_dir=str(root / "model")), out=f"{tmp}/{prec}", runtimes=names,
                                  shapes=ShapeSpec(buckets=(32, 64, 128)), precision=prec, eval_data=str(root / "data" / "test.jsonl"),
                                  capture_methods=(), bench_runs=10, quant=DYNAMIC), prog)
            for b, v in rep["backends"].items():
                r = v[prec]
                out.setdefault(prec, {})[b] = {
                    "max_abs_logit_diff": r["max_abs_logit_diff"], "max_abs_prob_diff": r["max_abs_prob_diff"],
                    "decision_agreement_test_split": r["parity"]["data"]["decision_agreement"], "test_rows": r["parity"]["data"]["n"],
                    "p50_ms_at_128": r["p50_ms"], "execution_precision": r.get("execution_precision"), "pass": r["pass"]}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    write_result("b4_b6_precision", {**meta("b4_b6_precision.py"), "model": "demo detector", "demo": demo_build(root), "seconds": round(time.perf_counter() - t0, 1),
                                     "results": out})


if __name__ == "__main__":
    main()
