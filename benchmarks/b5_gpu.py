"""B5 (needs a CUDA GPU; run when a device is lent): B1 on CUDA - eager PyTorch, torch.compile with CUDA graphs
(mode="reduce-overhead"), ONNX Runtime CUDA and TensorRT execution providers. One prepared script that fits in a
few minutes; it skips (and records why) any path whose runtime is missing.

    python benchmarks/b5_gpu.py [--preset mmbert-base] [--seq-len 512] [--runs 50]
    # on a fresh GPU machine first: pip install -e . onnxruntime-gpu
"""

import argparse
import tempfile
import time

import numpy as np
import torch
from common import meta, write_result

from npuport.bench import summarize
from npuport.models.detector import build_preset
from npuport.static.adapters import adapt


def timed(fn, runs, warmup=5):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) * 1e3)
    return summarize(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="mmbert-base")
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--runs", type=int, default=50)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("B5 needs a CUDA device (torch.cuda.is_available() is False)")
    results, skipped = {}, {}
    model = build_preset(args.preset).cuda().eval()
    ids = torch.randint(10, model.config.vocab_size, (1, args.seq_len), device="cuda")
    mask = torch.ones_like(ids)
    with torch.no_grad():
        ref = model(ids, mask).float().cpu().numpy()
        results["eager"] = timed(lambda: model(ids, mask), args.runs)
        for prec, dt in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
            m = build_preset(args.preset).to("cuda", dt).eval()
            results[f"eager-{prec}"] = timed(lambda: m(ids, mask), args.runs)
            results[f"eager-{prec}"]["max_abs_logit_diff"] = float(np.abs(m(ids, mask).float().cpu().numpy() - ref).max())
            del m
        static, _ = adapt(model)
        compiled = torch.compile(static, mode="reduce-overhead")
        results["torch.compile-cudagraphs"] = timed(lambda: compiled(ids, mask), args.runs)
    try:
        import onnxruntime as ort

        from npuport.static.capture import export_onnx
        from npuport.runtimes import Graph, ShapeSpec, get_runtime

        path = export_onnx(static.cpu(), (ids.cpu(), mask.cpu()), ShapeSpec(buckets=(args.seq_len,)), __import__("pathlib").Path(tempfile.mkdtemp()))
        feeds = {"input_ids": ids.cpu().numpy(), "attention_mask": mask.cpu().numpy()}
        for name, provider in (("onnxruntime-cuda", "CUDAExecutionProvider"), ("onnxruntime-tensorrt", "TensorrtExecutionProvider")):
            if provider not in ort.get_available_providers():
                skipped[name] = f"{provider} not available in onnxruntime {ort.__version__}"
                continue
            ex = get_runtime("onnxruntime").open_graph(Graph(onnx=path, workdir=path.parent, name="b5"),
                                                         device=name.split("-")[1])
            got = ex.run(feeds)[0]
            results[name] = timed(lambda: ex.run(feeds), args.runs)
            results[name]["max_abs_logit_diff"] = float(np.abs(got - ref).max())
    except ImportError as e:
        skipped["onnxruntime"] = str(e)
    write_result("b5_gpu", {**meta("b5_gpu.py"), "device": torch.cuda.get_device_name(), "preset": args.preset,
                            "seq_len": args.seq_len, "results": results, "skipped": skipped})


if __name__ == "__main__":
    main()
