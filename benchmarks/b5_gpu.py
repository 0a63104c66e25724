"""B5 (needs a CUDA GPU; run when a device is lent): B1 on CUDA - eager PyTorch fp32/fp16/bf16, torch.compile with
CUDA graphs (mode="reduce-overhead"), ONNX Runtime CUDA and TensorRT execution providers, each with its parity to
eager fp32. One prepared script that fits in a few minutes; it skips (and records why) any path whose runtime is
missing.

    python benchmarks/b5_gpu.py [--preset mmbert-base] [--seq-len 512] [--buckets 64,128,256] [--runs 50] [--out DIR]
    # on a fresh GPU machine first: pip install -e . onnxruntime-gpu
    python benchmarks/b5_gpu.py --cpu-check   # the same paths on the CPU, tiny model: proves the script before
                                              # device minutes are spent (writes nothing under results/)
"""

import argparse
import json
import shutil
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


PRECISIONS = (("fp16", torch.float16), ("bf16", torch.bfloat16))


def measure(preset: str, seq_len: int, runs: int, device: str, buckets: tuple[int, ...], save, batch: int = 1) -> dict:
    """{"results": {path: latency summary + max_abs_logit_diff vs eager fp32}, "skipped": {path: why},
    "buckets": {length: {path: ...}}}; `save(partial)` is called after each stage, so a run cut short keeps
    what it measured."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    out = {"results": {}, "skipped": {}, "buckets": {}}
    cuda = device == "cuda"
    mode = "reduce-overhead" if cuda else None  # CUDA graphs on the GPU; none to capture on the CPU check
    tag = "torch.compile" + ("-cudagraphs" if cuda else "")
    model = build_preset(preset).to(device).eval()
    static, _ = adapt(model)
    # the same seed builds the same weights; cast, then adapted like the fp32 model
    low = {p: adapt(build_preset(preset).to(device, dt).eval())[0] for p, dt in PRECISIONS}
    compiled = {None: torch.compile(static, mode=mode, dynamic=False),
                **{p: torch.compile(m, mode=mode, dynamic=False) for p, m in low.items()}}

    def record(table, name, fn, ref):
        got = fn().float().cpu().numpy()
        table[name] = {**timed(fn, runs, sync), "max_abs_logit_diff": float(np.abs(got - ref).max())}
        print(f"{seq_len if table is out['results'] else '':>4} {name:32s} p50 {table[name]['p50_ms']:8.3f} ms  "
              f"max|Δ| {table[name]['max_abs_logit_diff']:.2e}", flush=True)

    def inputs(length):
        ids = torch.randint(10, model.config.vocab_size, (batch, length), device=device,
                            generator=torch.Generator(device).manual_seed(length))
        return ids, torch.ones_like(ids)

    with torch.no_grad():
        ids, mask = inputs(seq_len)
        ref = model(ids, mask).float().cpu().numpy()
        res = out["results"]
        record(res, "eager", lambda: model(ids, mask), ref)
        for p, m in low.items():
            record(res, f"eager-{p}", lambda m=m: m(ids, mask), ref)
        save(out)
        for p, fn in compiled.items():
            record(res, tag + (f"-{p}" if p else ""), lambda fn=fn: fn(ids, mask), ref)
            save(out)
        # bucketed shapes: what routing a request to the smallest compiled length buys on this device
        for length in buckets:
            b_ids, b_mask = inputs(length)
            b_ref = model(b_ids, b_mask).float().cpu().numpy()
            table = out["buckets"][str(length)] = {}
            record(table, "eager", lambda: model(b_ids, b_mask), b_ref)
            record(table, "eager-bf16", lambda: low["bf16"](b_ids, b_mask), b_ref)
            record(table, tag + "-bf16", lambda: compiled["bf16"](b_ids, b_mask), b_ref)
            save(out)
    try:
        import onnxruntime as ort

        from npuport.runtimes import Graph, ShapeSpec, get_runtime
        from npuport.static.capture import export_onnx

        eps = (("cuda", "CUDAExecutionProvider"), ("tensorrt", "TensorrtExecutionProvider")) if cuda else \
            (("cpu", "CPUExecutionProvider"),)
        missing = {f"onnxruntime-{dev}": f"{prov} not available in onnxruntime {ort.__version__} "
                   f"(providers: {', '.join(ort.get_available_providers())})"
                   for dev, prov in eps if prov not in ort.get_available_providers()}
        out["skipped"].update(missing)
        todo = [(dev, prov) for dev, prov in eps if f"onnxruntime-{dev}" not in missing]
        if todo:  # the export costs a minute at mmbert-base: only when a provider will run it
            path = export_onnx(static.cpu(), (ids.cpu(), mask.cpu()), ShapeSpec(buckets=(seq_len,)),
                               Path(tempfile.mkdtemp()))
            feeds = {"input_ids": ids.cpu().numpy(), "attention_mask": mask.cpu().numpy()}
            for dev, _ in todo:
                ex = get_runtime("onnxruntime").open_graph(Graph(onnx=path, workdir=path.parent, name="b5"), device=dev)
                record(out["results"], f"onnxruntime-{dev}", lambda ex=ex: torch.from_numpy(ex.run(feeds)[0]), ref)
    except ImportError as e:
        out["skipped"]["onnxruntime"] = str(e)
    save(out)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default=None, help="default mmbert-base (tiny-modernbert with --cpu-check)")
    ap.add_argument("--seq-len", type=int, default=None, help="default 512 (64 with --cpu-check)")
    ap.add_argument("--buckets", default=None, help="shorter lengths to time too, comma-separated "
                    "(default 64,128,256; 16,32 with --cpu-check)")
    ap.add_argument("--runs", type=int, default=None, help="default 50 (3 with --cpu-check)")
    ap.add_argument("--batch", type=int, default=1, help="sequences per call (default 1); N > 1 writes b5_gpu_bN.json")
    ap.add_argument("--out", help="also write the JSON here after every stage (a run cut short keeps what it measured)")
    ap.add_argument("--cpu-check", action="store_true", help="run every path on the CPU with a tiny model")
    args = ap.parse_args()
    check = args.cpu_check
    preset = args.preset or ("tiny-modernbert" if check else "mmbert-base")
    seq_len, runs = args.seq_len or (64 if check else 512), args.runs or (3 if check else 50)
    try:
        buckets = tuple(int(b) for b in (args.buckets or ("16,32" if check else "64,128,256")).split(",") if b)
    except ValueError:
        raise SystemExit(f"--buckets {args.buckets!r}: give whole lengths, comma-separated, e.g. --buckets 64,128,256")
    if any(not 0 < b < seq_len for b in buckets):
        raise SystemExit(f"--buckets {args.buckets}: each length must be between 1 and --seq-len ({seq_len}) - 1")
    if args.batch < 1:
        raise SystemExit(f"--batch {args.batch}: give a whole number of sequences >= 1, e.g. --batch 32")
    if not check and not torch.cuda.is_available():
        raise SystemExit("B5 needs a CUDA device (torch.cuda.is_available() is False); --cpu-check runs it on the CPU")
    head = {**meta("b5_gpu.py"), "device": "cpu (--cpu-check)" if check else torch.cuda.get_device_name(),
            "preset": preset, "seq_len": seq_len, "batch": args.batch, "runs": runs,
            "tf32_matmul": torch.backends.cuda.matmul.allow_tf32, "complete": False}

    def save(part, complete=False):
        res = part["results"]
        best = min(res, key=lambda n: res[n]["p50_ms"]) if res else None
        doc = {**head, **part, "complete": complete, "best": best,
               "best_p50_ms": res[best]["p50_ms"] if best else None}
        if check:
            if complete:
                print(json.dumps(doc["results"], indent=1)[:4000], "\nbuckets:", list(doc["buckets"]),
                      "\nskipped:", doc["skipped"])
            return
        path = write_result("b5_gpu" if args.batch == 1 else f"b5_gpu_b{args.batch}", doc)
        if args.out:
            shutil.copy(path, Path(args.out) / path.name)

    save(measure(preset, seq_len, runs, "cpu" if check else "cuda", buckets, save, args.batch), complete=True)


if __name__ == "__main__":
    main()
