"""P13: where the HTP's int8 error comes from — MatMul weights per tensor or per output channel, nothing else quantised.

The demo detector's ONNX graph (ONNX Runtime fp32 artifact, one bucket of 128) runs in float on the CPU with only its
MatMul weights replaced by their 8-bit values: per tensor (asymmetric QUInt8, one scale per [K, N] matrix: what ONNX
Runtime's QNN config makes of them) or per output channel (symmetric int8, one scale per column: qnn's recipe now).
Activations stay float, so every flipped decision is the weights' alone. Judged against eager fp32 on every row of the
demo's unseen splits (test, test_family). No NPU executes here: it isolates one error source in plain float arithmetic.

    python benchmarks/qnn_weights.py
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from common import meta, write_result

SPLITS = ("test", "test_family")


def fake_quant(w, per_channel: bool):
    """w [K, N] through 8-bit codes and back, as the quantiser stores it."""
    import numpy as np

    if per_channel:  # symmetric int8, one scale per output column
        s = np.abs(w).max(axis=0, keepdims=True) / 127.0
        s = np.where(s == 0, 1.0, s)
        return (np.clip(np.round(w / s), -127, 127) * s).astype(w.dtype)
    lo, hi = min(float(w.min()), 0.0), max(float(w.max()), 0.0)  # asymmetric uint8 over the whole matrix, 0 exact
    s = (hi - lo) / 255.0 or 1.0
    zp = round(-lo / s)
    return ((np.clip(np.round(w / s) + zp, 0, 255) - zp) * s).astype(w.dtype)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--init", default="me5-small", help="the demo detector's init (default me5-small, the demo's)")
    a = ap.parse_args()

    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper

    from npuport import api
    from npuport.config import ModelSource, PortConfig
    from npuport.detector.demo import DemoBuildConfig, build_demo
    from npuport.manifest import Manifest
    from npuport.router import BucketRouter
    from npuport.runtimes import ShapeSpec
    from npuport.runtimes._quantize import matmul_weights
    from npuport.ui import Progress

    demo = build_demo(DemoBuildConfig(init=a.init), Progress(enabled=True), show_bar=False)
    tmp = Path(tempfile.mkdtemp(prefix="npuport-qnn-weights-"))
    api.port(PortConfig(source=ModelSource(model_dir=str(demo / "model")), out=str(tmp / "o"),
                        runtimes=("onnxruntime",), shapes=ShapeSpec(batch_sizes=(1,), buckets=(128,)), bench_runs=1))
    art = tmp / "o" / "onnxruntime-fp32"
    manifest = Manifest.read(art)
    base = onnx.load(str(art / "model.onnx"), load_external_data=True)
    weights = set(matmul_weights(art / "model.onnx"))
    router = BucketRouter([(1, 128)], manifest.pad_token_id)
    variants = {"float": None, "per-tensor": False, "per-channel": True}
    sessions = {}
    for name, per_channel in variants.items():
        m = onnx.ModelProto()
        m.CopyFrom(base)
        if per_channel is not None:
            for t in m.graph.initializer:
                if t.name in weights:
                    t.CopyFrom(numpy_helper.from_array(fake_quant(numpy_helper.to_array(t), per_channel), t.name))
        path = tmp / f"{name}.onnx"
        onnx.save(m, str(path), save_as_external_data=True, location=f"{name}.data")
        sessions[name] = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])

    out = {"matmul_weights": len(weights), "bucket": 128, "splits": {}}
    for split in SPLITS:
        t0 = time.perf_counter()
        rows, ref = api._data_reference(manifest, art, str(demo / "data" / f"{split}.jsonl"), Progress(enabled=False))
        want = manifest.task.decisions(ref).reshape(len(ref), -1)
        res = {}
        for name, sess in sessions.items():
            got = np.concatenate([sess.run(None, router.pack([r], 128, 1))[0] for r in rows])
            flips = np.flatnonzero((manifest.task.decisions(got).reshape(len(ref), -1) != want).any(axis=1))
            res[name] = {"rows": len(rows), "flipped": len(flips), "decision_agreement": 1 - len(flips) / len(rows),
                         "max_abs_logit_diff": float(np.abs(got - ref).max()), "flipped_lines": flips.tolist()}
            print(split, name, {k: v for k, v in res[name].items() if k != "flipped_lines"}, flush=True)
        out["splits"][split] = {"variants": res, "wall_s": round(time.perf_counter() - t0, 1)}
    write_result("qnn_weights", {**meta("qnn_weights.py"), "demo_init": a.init, **out})


if __name__ == "__main__":
    main()
