"""P13: where the HTP's int8 error comes from — MatMul weights per tensor or per output channel, nothing else quantised.

The demo detector's ONNX graph (ONNX Runtime fp32 artifact, one bucket of 128) runs in float on the CPU with only its
MatMul weights replaced by their 8-bit values: per tensor (asymmetric QUInt8, one scale per [K, N] matrix: what ONNX
Runtime's QNN config makes of them) or per output channel (symmetric int8, one scale per column: qnn's recipe now).
Activations stay float, so every flipped decision is the weights' alone. Two more rows add the part of the embeddings
that qnn's int8 default keeps at 8 bits: the tables Gather reads (per tensor), then also the embedding activations
(per tensor, MinMax over the validation split), every one but the LayerNorm's input and output (16-bit there).
The last row is qnn's int8 default now: the embedding activations at 16 bits (here: float) but those that carry the
vocabulary table's type (`table_activations`), which stay 8-bit. Judged against eager fp32 on every row of the
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


def embedding_tensors(model) -> tuple[list[str], list[str]]:
    """(the float tables the embeddings group gathers from, its float activations that stay 8-bit in qnn's int8
    recipe: every one but a LayerNorm's input and output, which the layernorm group raises to 16 bits)."""
    import onnx

    from npuport.runtimes._quantize import group_of

    inferred = onnx.shape_inference.infer_shapes(model)
    floats = {v.name for v in (*inferred.graph.value_info, *inferred.graph.output)
              if v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}
    inits = {i.name for i in model.graph.initializer if i.data_type == onnx.TensorProto.FLOAT}
    to_ln = {t for n in model.graph.node if n.op_type == "LayerNormalization" for t in (n.input[0], *n.output)}
    emb = [n for n in model.graph.node if group_of(n) == "embeddings"]
    tables = sorted({n.input[0] for n in emb if n.op_type == "Gather" and n.input[0] in inits})
    acts = sorted({o for n in emb for o in n.output if o in floats and o not in to_ln})
    return tables, acts


def fake_quant_activations(model, ranges: dict[str, tuple[float, float]]):
    """Insert QuantizeLinear -> DequantizeLinear (asymmetric uint8, MinMax ranges) after each named tensor."""
    import numpy as np
    from onnx import helper, numpy_helper

    for t, (lo, hi) in ranges.items():
        lo, hi = min(lo, 0.0), max(hi, 0.0)
        s = (hi - lo) / 255.0 or 1.0
        zp = int(np.clip(round(-lo / s), 0, 255))
        for n in model.graph.node:
            for i, x in enumerate(n.input):
                if x == t:
                    n.input[i] = f"{t}__fq"
        model.graph.initializer.extend([numpy_helper.from_array(np.array(s, np.float32), f"{t}__s"),
                                        numpy_helper.from_array(np.array(zp, np.uint8), f"{t}__zp")])
        model.graph.node.extend([helper.make_node("QuantizeLinear", [t, f"{t}__s", f"{t}__zp"], [f"{t}__q"]),
                                 helper.make_node("DequantizeLinear", [f"{t}__q", f"{t}__s", f"{t}__zp"],
                                                  [f"{t}__fq"])])
    return model


def embedding_ranges(base, acts: list[str], demo, manifest, art, router, tmp) -> dict[str, tuple[float, float]]:
    """MinMax of each embedding activation over the validation split, as the port calibrates."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    from npuport import api
    from npuport.ui import Progress

    m = onnx.ModelProto()
    m.CopyFrom(base)
    m.graph.output.extend([onnx.helper.make_tensor_value_info(t, onnx.TensorProto.FLOAT, None) for t in acts])
    path = tmp / "ranges.onnx"
    onnx.save(m, str(path), save_as_external_data=True, location="ranges.data")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rows, _ = api._data_reference(manifest, art, str(demo / "data" / "val.jsonl"), Progress(enabled=False))
    lo, hi = {t: np.inf for t in acts}, {t: -np.inf for t in acts}
    for r in rows:
        for t, v in zip(acts, sess.run(acts, router.pack([r], 128, 1))):
            lo[t], hi[t] = min(lo[t], float(v.min())), max(hi[t], float(v.max()))
    return {t: (lo[t], hi[t]) for t in acts}


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
    from npuport.runtimes._quantize import matmul_weights, table_activations
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
    tables, acts = embedding_tensors(base)
    ranges = embedding_ranges(base, acts, demo, manifest, art, router, tmp)
    carried = [t for t in acts if t in table_activations(art / "model.onnx")]
    # name -> (MatMul weights per channel?, embedding tables 8-bit?, the embedding activations at 8 bits)
    variants = {"float": (None, False, ()), "per-tensor": (False, False, ()), "per-channel": (True, False, ()),
                "per-channel + embedding tables": (True, True, ()),
                "per-channel + embeddings (tables and activations)": (True, True, acts),
                "per-channel + embedding tables and their carriers (qnn's recipe)": (True, True, carried)}
    sessions = {}
    for name, (per_channel, tab, act) in variants.items():
        m = onnx.ModelProto()
        m.CopyFrom(base)
        for t in m.graph.initializer:
            if (per_channel is not None and t.name in weights) or (tab and t.name in tables):
                t.CopyFrom(numpy_helper.from_array(fake_quant(numpy_helper.to_array(t), bool(per_channel)
                                                              and t.name in weights), t.name))
        if act:
            fake_quant_activations(m, {t: ranges[t] for t in act})
        path = tmp / f"{name}.onnx"
        onnx.save(m, str(path), save_as_external_data=True, location=f"{name}.data")
        sessions[name] = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])

    out = {"matmul_weights": len(weights), "embedding_tables": tables, "embedding_activations": acts,
           "table_carriers": carried, "bucket": 128,
           "embedding_calibration": "MinMax over the validation split (what the port calibrates on)", "splits": {}}
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
