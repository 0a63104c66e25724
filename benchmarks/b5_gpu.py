"""B5 (needs a CUDA GPU; run when a device is lent): B1 on CUDA - eager PyTorch fp32/fp16/bf16, torch.compile with
CUDA graphs (mode="reduce-overhead"), ONNX Runtime CUDA and TensorRT execution providers, each with its parity to
eager fp32. One prepared script that fits in a few minutes; it skips (and records why) any path whose runtime is
missing.

    python benchmarks/b5_gpu.py [--preset mmbert-base] [--seq-len 512] [--runs 50]
    # on a fresh GPU machine first: pip install -e . onnxruntime-gpu
    python benchmarks/b5_gpu.py --cpu-check   # the same paths on the CPU, tiny model: proves the script before
                                              # device minutes are spent (writes nothing under results/)
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from common import meta, write_result

from npuport.bench import summarize
from npuport.models.detector import build_preset
from npuport.static.adapters import adapt


def timed(fn, runs, sync, warmup=5):
    for _ in range(warmup):
        fn()
    sync()
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        sync()
        out.append((time.perf_counter() - t0) * 1e3)
    return summarize(out)


def measure(preset: str, seq_len: int, runs: int, device: str) -> tuple[dict, dict]:
    """{path: latency summary + max_abs_logit_diff vs eager fp32}, {path: why it was skipped}."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    results, skipped = {}, {}
    model = build_preset(preset).to(device).eval()
    ids = torch.randint(10, model.config.vocab_size, (1, seq_len), device=device)
    mask = torch.ones_like(ids)

    def record(name, fn):
        got = fn().float().cpu().numpy()
        results[name] = {**timed(fn, runs, sync), "max_abs_logit_diff": float(np.abs(got - ref).max())}

    with torch.no_grad():
        ref = model(ids, mask).float().cpu().numpy()
        record("eager", lambda: model(ids, mask))
        for prec, dt in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
            low = build_preset(preset).to(device, dt).eval()  # same seed: the same weights, cast
            record(f"eager-{prec}", lambda low=low: low(ids, mask))
            del low
        static, _ = adapt(model)
        # CUDA graphs on the GPU; on the CPU check, the default mode (there are no CUDA graphs to capture)
        compiled = torch.compile(static, mode="reduce-overhead" if device == "cuda" else None)
        record("torch.compile" + ("-cudagraphs" if device == "cuda" else ""), lambda: compiled(ids, mask))
    try:
        import onnxruntime as ort

        from npuport.runtimes import Graph, ShapeSpec, get_runtime
        from npuport.static.capture import export_onnx

        path = export_onnx(static.cpu(), (ids.cpu(), mask.cpu()), ShapeSpec(buckets=(seq_len,)), Path(tempfile.mkdtemp()))
        feeds = {"input_ids": ids.cpu().numpy(), "attention_mask": mask.cpu().numpy()}
        eps = (("cuda", "CUDAExecutionProvider"), ("tensorrt", "TensorrtExecutionProvider")) if device == "cuda" else \
            (("cpu", "CPUExecutionProvider"),)
        for dev, provider in eps:
            name = f"onnxruntime-{dev}"
            if provider not in ort.get_available_providers():
                skipped[name] = f"{provider} not available in onnxruntime {ort.__version__}"
                continue
            ex = get_runtime("onnxruntime").open_graph(Graph(onnx=path, workdir=path.parent, name="b5"), device=dev)
            record(name, lambda ex=ex: torch.from_numpy(ex.run(feeds)[0]))
    except ImportError as e:
        skipped["onnxruntime"] = str(e)
    return results, skipped


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default=None, help="default mmbert-base (tiny-modernbert with --cpu-check)")
    ap.add_argument("--seq-len", type=int, default=None, help="default 512 (64 with --cpu-check)")
    ap.add_argument("--runs", type=int, default=None, help="default 50 (3 with --cpu-check)")
    ap.add_argument("--cpu-check", action="store_true", help="run every path on the CPU with a tiny model")
    args = ap.parse_args()
    check = args.cpu_check
    preset = args.preset or ("tiny-modernbert" if check else "mmbert-base")
    seq_len, runs = args.seq_len or (64 if check else 512), args.runs or (3 if check else 50)
    if not check and not torch.cuda.is_available():
        raise SystemExit("B5 needs a CUDA device (torch.cuda.is_available() is False); --cpu-check runs it on the CPU")
    results, skipped = measure(preset, seq_len, runs, "cpu" if check else "cuda")
    best = min(results, key=lambda n: results[n]["p50_ms"])
    out = {**meta("b5_gpu.py"), "device": "cpu (--cpu-check)" if check else torch.cuda.get_device_name(),
           "preset": preset, "seq_len": seq_len, "runs": runs, "results": results, "skipped": skipped,
           "best": best, "best_p50_ms": results[best]["p50_ms"]}
    if check:
        print(json.dumps({n: {"p50_ms": round(v["p50_ms"], 2), "max_abs_logit_diff": v["max_abs_logit_diff"]}
                          for n, v in results.items()}, indent=1), "\nskipped:", skipped)
    else:
        write_result("b5_gpu", out)


if __name__ == "__main__":
    main()
