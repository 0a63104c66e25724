"""Training tokens/s of the captured step vs eager PyTorch, interleaved in one process at equal thread count.

    python benchmarks/lm_throughput.py [--preset small] [--rounds 7] [--steps-per-round 6] [--threads 2]
    python benchmarks/lm_throughput.py --preset vkore-46m --backends onnxruntime,eager --rounds 3 --name lm_vkore46m
    python benchmarks/lm_throughput.py --name lm_throughput_avx512   (the same on a machine with AVX-512)

`NAME-bf16` rows train in bf16 mixed precision (`lm train --precision bf16`): not the same arithmetic as eager fp32,
so they are reported beside the fp32 rows, with eager's own bf16 autocast as their peer; their loss curves against
the fp32 control are benchmarks/lm_control.py --runs eager,openvino-bf16,eager-bf16 --name lm_control_bf16.

Every runner is built first (graph export and compilation are reported separately as setup time); then rounds
visit the runners in turn, each round timing `--steps-per-round` consecutive steps per runner, so machine noise
lands on all of them alike. Reported: median step time over rounds -> tokens/s, ratio to eager, peak RSS, and
for ONNX Runtime an op-type profile of one step (where the time goes).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import time
from pathlib import Path

from common import HERE, meta, run_name, write_result

SHARED = HERE.parent.parent / "shared" / "data" / "tinystories_sample.txt"


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def matmul_gflops(m: int, k: int, n: int, threads: int, reps: int = 30) -> float:
    """Eager PyTorch's fp32 GEMM rate at the step's largest matmul (tokens x d_model x ffn_hidden): what bounds the
    step on this machine, recorded so results from machines with different vector units can be read side by side."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(m, k), torch.randn(k, n)
    for _ in range(3):
        a @ b
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    return round(2 * m * k * n * reps / (time.perf_counter() - t0) / 1e9, 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=str(SHARED) if SHARED.exists() else "demo")
    ap.add_argument("--preset", default="small")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--backends", default="eager,onnxruntime,onnxruntime-npu,openvino,iree,inductor,eager-bf16,openvino-bf16",
                    help="runtimes to time; NAME-npu = the gather-free graph on NAME; NAME-bf16 = bf16 mixed precision "
                    "(bf16 gradients, fp32 master weights and AdamW: `lm train --precision bf16`)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps-per-round", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--name", default="lm_throughput")
    a = ap.parse_args()

    import torch

    from npuport.machine import peak_rss_mb
    from npuport.models.lm import build_lm, count_parameters, preset_config
    from npuport.runtimes.onnxruntime import op_profile
    from npuport.train.loop import LMTrainConfig, load_corpus
    from npuport.train.select import open_step_runner
    from npuport.train.step import OptimConfig

    torch.set_num_threads(a.threads)
    corpus = load_corpus(LMTrainConfig(corpus=a.corpus, seq_len=a.seq_len, batch=a.batch))
    from npuport.train.data import Batches

    batches = Batches(corpus.train, a.batch, a.seq_len, seed=0)
    mcfg = preset_config(a.preset, corpus.vocab.size, max_seq_len=a.seq_len)
    work = Path(tempfile.mkdtemp(prefix="npuport-lm-tput-"))
    out = {**meta("lm_throughput.py"), "preset": a.preset, "batch": a.batch, "seq_len": a.seq_len, "threads": a.threads,
           "rounds": a.rounds, "steps_per_round": a.steps_per_round, "corpus": a.corpus, "backends": {}}
    runners = {}
    for name in a.backends.split(","):
        backend, precision, npu, _ = run_name(name)
        gc.collect()
        before = rss_mb()
        t0 = time.perf_counter()
        model = build_lm(mcfg, seed=0)
        runners[name] = open_step_runner(backend, model, OptimConfig(), batch=a.batch, seq_len=a.seq_len,
                                         gather_free=npu, workdir=work / name, threads=a.threads, precision=precision)
        out["backends"][name] = {"setup_s": round(time.perf_counter() - t0, 1), "rss_added_mb": round(rss_mb() - before, 1),
                                 "precision": runners[name].precision, "form": runners[name].info["form"]}
        ran = {g.get("executes_in") for g in runners[name].info.get("graphs", {}).values()} - {None}
        if ran:  # what the runtime computed in (OpenVINO stays in f32 on a CPU without bf16)
            out["backends"][name]["executes_in"] = sorted(ran)
        out["n_params"] = count_parameters(model)
        print(f"{name}: ready in {out['backends'][name]['setup_s']} s", flush=True)

    times = {n: [] for n in runners}
    step = {n: 0 for n in runners}
    for rnd in range(a.rounds + 1):  # round 0 warms every runner up and is discarded
        for name, r in runners.items():
            t0 = time.perf_counter()
            for _ in range(a.steps_per_round):
                step[name] += 1
                x, y = batches.get(step[name])
                r.step(step[name], 1e-3, x, y)
            dt = (time.perf_counter() - t0) / a.steps_per_round
            if rnd:
                times[name].append(dt)
        print(f"round {rnd}: " + "  ".join(f"{n} {times[n][-1] * 1e3:.0f} ms" for n in runners if times[n]), flush=True)
    tokens = a.batch * a.seq_len
    eager_med = statistics.median(times["eager"]) if "eager" in times else None
    for name, ts in times.items():
        med = statistics.median(ts)
        b = out["backends"][name]
        b.update({"step_ms_median": round(med * 1e3, 2), "step_ms_all": [round(t * 1e3, 2) for t in ts],
                  "tokens_per_s": round(tokens / med, 1)})
        if eager_med:
            b["vs_eager"] = round(eager_med / med, 3)
        print(f"{name}: {b['tokens_per_s']:,.0f} tokens/s" + (f" = {b['vs_eager']:.2f}× eager" if eager_med else ""))
    out["peak_rss_mb"] = peak_rss_mb()
    out["torch_matmul_gflops"] = matmul_gflops(a.batch * a.seq_len, mcfg.d_model, mcfg.ffn_hidden, a.threads)
    if "onnxruntime" in runners:
        import numpy as np

        r = runners["onnxruntime"]
        x, y = batches.get(1)
        ins = r.executors["fused"].input_names
        vals = [*r.cur, np.asarray(1.0, np.float32), np.asarray(1e-3, np.float32), x, y]
        feeds = dict(zip(ins, vals))
        out["onnxruntime_profile"] = op_profile(r.workdir / r.graphs["fused"]["file"], feeds, a.threads)
    write_result(a.name, out)


if __name__ == "__main__":
    main()
