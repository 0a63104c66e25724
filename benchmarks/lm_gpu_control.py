"""The field report's setup: the control run on a GPU (eager PyTorch, fp32, TF32 off) against the static-graph
step on ONNX Runtime (CPU), same init, data and schedule. Run on a lent GPU machine (see README, benchmarks/NOTES.md).

    python benchmarks/lm_gpu_control.py --corpus tinystories_sample.txt [--out DIR]

Part 1: preset `small`, 500 steps, lr 1e-3. Part 2: `vkore-46m` (46.8M parameters), 100 steps, batch 16 × 128.
Each part trains `eager-cuda` and `onnxruntime` (all CPU cores) and compares them with `npuport lm compare`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from common import meta, write_result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", help="also copy the JSON here")
    ap.add_argument("--parts", default="small,vkore-46m")
    a = ap.parse_args()

    import torch

    from npuport import api
    from npuport.train.loop import LMTrainConfig

    threads = os.cpu_count()
    parts = {"small": dict(preset="small", steps=500, batch=16, seq_len=128, lr=1e-3, warmup=50),
             "vkore-46m": dict(preset="vkore-46m", steps=100, batch=16, seq_len=128, lr=1e-3, warmup=20)}
    root = Path(tempfile.mkdtemp(prefix="npuport-gpu-control-"))
    out = {**meta("lm_gpu_control.py"), "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
           "cpu_threads_for_onnxruntime": threads, "corpus": a.corpus, "parts": {}}
    for part in a.parts.split(","):
        p = parts[part]
        res = {"config": p, "runs": {}}
        for backend in ("eager-cuda", "onnxruntime"):
            run = root / part / backend
            shutil.rmtree(run, ignore_errors=True)
            cfg = LMTrainConfig(corpus=a.corpus, runtime=backend, eval_every=50, ckpt_every=p["steps"], threads=threads, **p)
            t0 = time.perf_counter()
            r = api.lm_train(cfg, run, progress=True)
            res["runs"][backend] = {"final_loss": r.final_loss, "val_loss": r.val_loss, "tokens_per_s": r.tokens_per_s,
                                    "wall_s": round(time.perf_counter() - t0, 1), "setup_s": r.manifest["setup_s"],
                                    "peak_rss_mb": r.manifest["peak_rss_mb"], "n_params": r.manifest["n_params"]}
            print(part, backend, res["runs"][backend], flush=True)
        res["compare"] = api.lm_compare(root / part / "eager-cuda", root / part / "onnxruntime")
        print(part, {k: res["compare"][k] for k in ("pearson", "max_abs_loss_diff", "tokens_per_s_ratio")}, flush=True)
        out["parts"][part] = res
    path = write_result("lm_gpu_control", out)
    if a.out:
        shutil.copy(path, Path(a.out) / path.name)


if __name__ == "__main__":
    main()
