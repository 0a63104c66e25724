"""P6: data-parallel training at equal total tokens — one worker, all-reduce with N = 2 and 4, DiLoCo N = 4 with
H = 10 and 50 — final validation loss, bytes each worker sent, wall time, and one loss-curve plot.

    python benchmarks/lm_distributed.py [--corpus ../shared/data/tinystories_sample.txt] [--steps 300]

Every configuration trains the same model (preset `small`, same seed) on the same global batches (batch 16 × 128
characters per step; each worker takes an equal shard), one runtime thread per worker. This machine has 2 cores,
so 4 workers share 2 cores: the wall times show the cost of running the protocol, not a speed-up. The point is
correctness (all-reduce matches one worker) and communication (DiLoCo sends H times less).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from common import HERE, meta, write_result

SHARED = HERE.parent.parent / "shared" / "data" / "tinystories_sample.txt"
CONFIGS = {
    "single": dict(workers=1, sync="allreduce"),
    "allreduce-2": dict(workers=2, sync="allreduce"),
    "allreduce-4": dict(workers=4, sync="allreduce"),
    "diloco-4-h10": dict(workers=4, sync="diloco", inner_steps=10),
    "diloco-4-h50": dict(workers=4, sync="diloco", inner_steps=50),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=str(SHARED) if SHARED.exists() else "demo")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--preset", default="small")
    ap.add_argument("--backend", default="onnxruntime")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--keep", help="keep the run directories here")
    a = ap.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from npuport.train.distributed import DistConfig, launch
    from npuport.train.loop import LMTrainConfig, read_metrics

    root = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="npuport-lm-dist-"))
    root.mkdir(parents=True, exist_ok=True)
    cfg = LMTrainConfig(corpus=a.corpus, preset=a.preset, runtime=a.backend, steps=a.steps, batch=16, seq_len=128,
                      eval_every=50, ckpt_every=50)
    out = {**meta("lm_distributed.py"), "corpus": a.corpus, "preset": a.preset, "backend": a.backend, "steps": a.steps,
           "global_batch": cfg.batch, "seq_len": cfg.seq_len, "tokens_total": a.steps * cfg.batch * cfg.seq_len,
           "note": "2 CPU cores: N workers share them, so no speed-up can show here; see correctness and bytes.",
           "runs": {}}
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name in a.configs.split(","):
        run = root / name
        shutil.rmtree(run, ignore_errors=True)
        t0 = time.perf_counter()
        m = launch(cfg, DistConfig(**CONFIGS[name]), run)
        wall = time.perf_counter() - t0
        ms = read_metrics(run)
        out["runs"][name] = {**CONFIGS[name], "final_loss": m["final_loss"], "val_loss": m["val_loss"],
                             "val_bpc": m["val_bpc"], "bytes_sent_per_worker": m["bytes_sent_per_worker"],
                             "param_bytes": m["param_bytes"], "wall_s": round(wall, 1), "train_wall_s": m["train_wall_s"],
                             "val_curve": [(x["step"], x["val_loss"]) for x in ms if "val_loss" in x]}
        ax.plot([x["step"] for x in ms], [x["loss"] for x in ms], lw=0.9, label=name)
        print(f"{name}: val {m['val_loss']:.4f} · {m['bytes_sent_per_worker'] / 1e6:.1f} MB/worker · {wall:.0f} s", flush=True)
    runs = out["runs"]
    if "allreduce-4" in runs:
        ar = runs["allreduce-4"]
        for name, r in runs.items():
            if name.startswith("diloco"):
                r["val_loss_gap_vs_allreduce_4"] = r["val_loss"] - ar["val_loss"]
                r["communication_reduction_vs_allreduce_4"] = ar["bytes_sent_per_worker"] / r["bytes_sent_per_worker"]
    ax.set_xlabel("step (equal tokens per step for every configuration)")
    ax.set_ylabel("training loss (mean over workers)")
    ax.set_title(f"Data-parallel training, preset {a.preset}, {a.steps} steps")
    ax.legend()
    fig.tight_layout()
    (HERE / "results").mkdir(exist_ok=True)
    fig.savefig(HERE / "results" / "lm_distributed.png", dpi=100)
    out["plot"] = "results/lm_distributed.png"
    write_result("lm_distributed", out)


if __name__ == "__main__":
    main()
