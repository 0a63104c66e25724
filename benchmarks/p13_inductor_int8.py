"""P13: is there an int8 path past 2x eager on AVX2 kernels? PyTorch's own x86 one, measured beside eager.

The ≥ 2x AVX2 goal for mmBERT-small at 1 x 512 was missed by ONNX Runtime (1.63x) and OpenVINO (below its fp32) in
`p11_int8.py --parts speed_avx2cap`. This script measures the third engine that ships int8 kernels for x86: PT2E
quantisation with torchao's X86InductorQuantizer (static int8 activations, per-channel int8 weights: oneDNN's
`qlinear` kernels) compiled by Inductor with freezing, which also fuses the float work between the GEMMs (RoPE,
GeGLU, LayerNorm, Quantize / Dequantize) that ONNX Runtime runs op by op. Paths, interleaved in one process
(medians):
  eager               the Hugging Face model, fp32 (what every ratio divides)
  inductor-int8       npuport's static graph (dense attention), quantised, torch.compile (Inductor, freezing on)
  inductor-int8-band  the same with the sliding-window layers in 64-token blocks, each block one SDPA batch entry
                      (the `--attention banded` layout; npuport's banded form as matmuls ran slower under Inductor)
  inductor-int8-mm    dense, with attention as two matmuls and a softmax (Hugging Face's eager attention, additive
                      masks) instead of the fused SDPA kernel: what ONNX Runtime's graph runs, whose attention cost
                      less than Inductor's SDPA on AVX2 kernels (the profiles)
and Inductor's profile of the dense int8 graphs: its int8 GEMMs, attention, and the generated kernels.

Two parts, one JSON (results/p13_inductor_int8.json): `native` (this machine's kernels) and `avx2cap` (a child
process that sees an AVX2 machine's CPUID: benchmarks/cpuid_avx2.c, as in p11_int8.py). Random init, calibrated on
random tokens: speed only (decisions were not measured; the path is no faster than ONNX Runtime's on AVX2).

    python benchmarks/p13_inductor_int8.py [--parts native,avx2cap] [--runs 15]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
from common import CPUID_AVX2, RESULTS, cpuid_avx2_env, cpuid_seen, meta, write_result

RESULT = RESULTS / "p13_inductor_int8.json"
PARTS = ("native", "avx2cap")


def _block_sdpa(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """npuport's banded attention (static/banded.py) with each 64-token block's attention one SDPA batch entry, so
    Inductor calls its fused CPU attention kernel on (B, H x T/b, b, 3b) instead of matmuls on a 5-D layout."""
    import torch
    import torch.nn.functional as F

    from npuport.static import banded

    if not (isinstance(attention_mask, torch.Tensor) and attention_mask.dim() == 5):
        return _DENSE(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    _, H, T, D = query.shape
    b, nb = attention_mask.shape[-2], attention_mask.shape[2]
    Tp = nb * b
    if Tp != T:
        query, key, value = (F.pad(t, (0, 0, 0, Tp - T)) for t in (query, key, value))
    q = query.reshape(-1, H * nb, b, D)
    k = banded._windows(key, b).reshape(-1, H * nb, 3 * b, D)
    v = banded._windows(value, b).reshape(-1, H * nb, 3 * b, D)
    m = attention_mask.expand(-1, H, -1, -1, -1).reshape(-1, H * nb, b, 3 * b)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=D ** -0.5 if scaling is None else scaling)
    return out.reshape(-1, H, Tp, D)[:, :, :T].transpose(1, 2).contiguous(), None


_DENSE = None


def _quantised(model, ids, mask, attention: str, calib: int = 4, matmul_attention: bool = False):
    """PT2E int8 (X86InductorQuantizer defaults), calibrated on random-token rows, compiled by Inductor.
    matmul_attention: attention as Hugging Face's eager matmul + softmax (with additive masks) instead of SDPA."""
    import torch
    import torch._inductor.config as inductor_config
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as xiq

    from npuport.static.adapters import adapt

    static, _ = adapt(model, attention=attention)
    if matmul_attention:
        static.detector.backbone.set_attn_implementation("eager")
        static.additive_masks = True  # eager attention adds its mask to the scores
    gm = torch.export.export(static.eval(), (ids, mask), strict=False).module()
    quantizer = xiq.X86InductorQuantizer().set_global(xiq.get_default_x86_inductor_quantization_config())
    prepared = prepare_pt2e(gm, quantizer)
    g = np.random.default_rng(1)
    for _ in range(calib):
        prepared(torch.from_numpy(g.integers(10, model.config.vocab_size, tuple(ids.shape))), mask)
    inductor_config.freezing = True  # constant weights: oneDNN's prepacked int8 GEMMs
    t0 = time.perf_counter()
    fn = torch.compile(convert_pt2e(prepared))
    with torch.no_grad():
        out = fn(ids, mask)
    return fn, out, round(time.perf_counter() - t0, 1)


def _profile(fn, ids, mask, calls: int = 3) -> dict:
    """ms per call by what runs: oneDNN's int8 GEMMs, attention, and the rest (Inductor's generated kernels)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            fn(ids, mask)
    ev = {e.key: e.self_cpu_time_total / 1e3 / calls for e in prof.key_averages()}
    total = sum(ev.values())
    gemm = sum(v for k, v in ev.items() if "qlinear" in k)
    attention = sum(v for k, v in ev.items() if "scaled_dot_product" in k or k == "aten::bmm")
    return {"total_ms": round(total, 1), "int8_gemm_ms": round(gemm, 1), "attention_ms": round(attention, 1),
            "other_ms": round(total - gemm - attention, 1)}


def part(runs: int) -> dict:
    import torch

    from npuport.config import ModelSource
    from npuport.latency import random_feeds
    from npuport.static import banded

    global _DENSE
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    _DENSE = sdpa_attention_forward
    banded.banded_attention = _block_sdpa  # what the adapter's banded.register() installs: SDPA per block
    model = ModelSource(preset="mmbert-small", random_init=True).load().eval()
    feeds = random_feeds(model, 1, 512)
    ids, mask = torch.from_numpy(feeds["input_ids"]), torch.from_numpy(feeds["attention_mask"])
    with torch.no_grad():
        ref = model(ids, mask)
    paths, facts = {"eager": model}, {}
    for name, attention, mm in (("inductor-int8", "dense", False), ("inductor-int8-band", "banded", False),
                                ("inductor-int8-mm", "dense", True)):
        paths[name], out, compile_s = _quantised(model, ids, mask, attention, matmul_attention=mm)
        facts[name] = {"compile_s": compile_s, "max_abs_logit_diff_vs_eager": float((out - ref).abs().max())}
    samples = {n: [] for n in paths}
    with torch.no_grad():
        for r in range(runs + 2):  # round robin: drift hits every path alike; the first two rounds warm up
            for n, fn in paths.items():
                t0 = time.perf_counter()
                fn(ids, mask)
                if r >= 2:
                    samples[n].append((time.perf_counter() - t0) * 1e3)
    p50 = {n: round(statistics.median(v), 1) for n, v in samples.items()}
    return {"preset": "mmbert-small", "shape": "1x512", "runs": runs, "p50_ms": p50,
            "ratio_vs_eager": {n: round(p50["eager"] / v, 2) for n, v in p50.items()}, "paths": facts,
            "profile_int8_dense": _profile(paths["inductor-int8"], ids, mask),
            "profile_int8_mm": _profile(paths["inductor-int8-mm"], ids, mask)}


def _in_avx2_child() -> bool:
    return any(p.endswith("cpuid_avx2.so") for p in os.environ.get("LD_PRELOAD", "").split())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}; the others "
                    "are kept from the last result")
    ap.add_argument("--runs", type=int, default=15, help="timed rounds (every path once per round)")
    args = ap.parse_args()
    parts = [p for p in args.parts.split(",") if p]
    if not parts or set(parts) - set(PARTS):
        ap.error(f"--parts: choose from {', '.join(PARTS)}")
    if _in_avx2_child():  # the capped child: measure, print the part as JSON for the parent
        if cpuid_seen()["torch"] != "AVX2":
            raise SystemExit(f"the AVX2 CPUID did not take (PyTorch sees {cpuid_seen()['torch']})")
        seen = cpuid_seen()
        print("PART " + json.dumps({**part(args.runs), "isa_cap": CPUID_AVX2, "cpuid_seen": seen}), flush=True)
        return
    previous = json.loads(RESULT.read_text()) if RESULT.exists() else {}
    res = {p: previous[p] for p in PARTS if p in previous and p not in parts}
    for p in parts:
        head = meta("p13_inductor_int8.py")
        t0 = time.perf_counter()
        if p == "native":
            body = part(args.runs)
        else:
            work = tempfile.mkdtemp(prefix="npuport-cpuid-")
            try:
                env = {**os.environ, **cpuid_avx2_env(work), "TORCHINDUCTOR_CACHE_DIR": f"{work}/inductor"}
                out = subprocess.run([sys.executable, __file__, "--runs", str(args.runs)], env=env, text=True,
                                     stdout=subprocess.PIPE, check=True).stdout
            finally:
                shutil.rmtree(work, ignore_errors=True)
            body = json.loads(next(ln[5:] for ln in out.splitlines() if ln.startswith("PART ")))
        res[p] = {"date": head["date"], "machine": head["machine"], "versions": head["versions"],
                  "seconds": round(time.perf_counter() - t0, 1), **body}
        print(f"{p}: {res[p]['p50_ms']} ms, x eager {res[p]['ratio_vs_eager']}", flush=True)
    write_result("p13_inductor_int8", {**meta("p13_inductor_int8.py"), **res})


if __name__ == "__main__":
    main()
