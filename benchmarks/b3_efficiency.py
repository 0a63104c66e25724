"""B3: efficiency. Analytic FLOPs of one mmBERT-base forward (dense-masked attention, as compiled) divided by each
path's p50 from the B1 results, against this machine's measured fp32 GEMM peak (torch.matmul, all threads).

    python benchmarks/b3_efficiency.py   # needs results/b1_latency_mmbert_base_512.json
"""

import json
import time

import torch
from common import RESULTS, meta, write_result

from npuport.models.detector import PRESETS


def forward_flops(cfg: dict, seq: int, batch: int = 1) -> float:
    """2 * multiply-adds: QKV, attention scores and mix (every layer dense over T x T: the masks, not the shapes,
    make attention local), output projection, GeGLU MLP (Wi -> 2I, Wo), and the 2-logit head."""
    h, i, n, T = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], seq
    per_layer = 2 * T * h * 3 * h + 2 * 2 * T * T * h + 2 * T * h * h + 2 * T * h * 2 * i + 2 * T * i * h
    return batch * (n * per_layer + 2 * h * 2)


def gemm_peak(n: int = 2048, reps: int = 10) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


def eager_profile(seq: int = 512) -> dict:
    """Where eager PyTorch spends its time at 1 x seq: share of self CPU time by op, top 8 (torch.profiler)."""
    from npuport.models.detector import build_preset

    model = build_preset("mmbert-base")
    ids = torch.randint(10, 256000, (1, seq))
    mask = torch.ones_like(ids)
    with torch.no_grad():
        model(ids, mask)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(2):
                model(ids, mask)
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    top = sorted(events, key=lambda e: -e.self_cpu_time_total)[:8]
    return {e.key: e.self_cpu_time_total / total for e in top}


def main():
    b1 = json.loads((RESULTS / "b1_latency_mmbert_base_512.json").read_text())
    flops = forward_flops(PRESETS.get("mmbert-base").config, 512)
    peak = gemm_peak()
    paths = {n: {"p50_ms": r["p50_ms"], "gflops_per_s": flops / (r["p50_ms"] / 1e3) / 1e9,
                 "fraction_of_gemm_peak": flops / (r["p50_ms"] / 1e3) / peak}
             for n, r in b1["bench"]["results"].items()}
    write_result("b3_efficiency", {**meta("b3_efficiency.py"), "gflop_per_forward": flops / 1e9, "gemm_peak_gflops": peak / 1e9,
                                   "gemm": "2048x2048 fp32 torch.matmul, best of 10", "threads": torch.get_num_threads(),
                                   "paths": paths, "b1_date": b1["date"], "eager_profile_self_cpu_share": eager_profile()})


if __name__ == "__main__":
    main()
