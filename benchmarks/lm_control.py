"""P3 control run: the same LM (init, data, schedule) trained on eager PyTorch and on static-graph runtimes.

    python benchmarks/lm_control.py [--corpus ../shared/data/tinystories_sample.txt] [--steps 500]

Trains preset `small` on eager (the control), onnxruntime and openvino (fused step, standard graph) and
onnxruntime with the NPU-friendly (gather-free) graph; compares every run against eager with `npuport lm compare`
(Pearson, max |Δloss|, final |Δparam|) and writes one loss-curve plot. Tokens/s figures here come from runs made
one after another; the interleaved throughput comparison is benchmarks/lm_throughput.py.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from common import HERE, meta, run_name, save_plot, write_result

SHARED = HERE.parent.parent / "shared" / "data" / "tinystories_sample.txt"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=str(SHARED) if SHARED.exists() else "demo")
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--preset", default="small")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--runs", default="eager,onnxruntime,openvino,onnxruntime-npu,eager-jitter",
                    help="eager-jitter: eager from an init perturbed by 1e-7 relative (one ulp): the fp32 noise floor; "
                    "NAME-bf16: bf16 mixed precision (`lm train --precision bf16`)")
    ap.add_argument("--name", default="lm_control")
    ap.add_argument("--keep", help="keep the run directories here")
    ap.add_argument("--eval-every", type=int, default=50)
    a = ap.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from npuport import api
    from npuport.train.loop import LMTrainConfig, read_metrics

    root = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="npuport-lm-control-"))
    root.mkdir(parents=True, exist_ok=True)
    out = {**meta("lm_control.py"), "corpus": a.corpus, "preset": a.preset, "steps": a.steps, "batch": a.batch, "lr": a.lr,
           "seq_len": a.seq_len, "runs": {}, "compare": {}}
    names = a.runs.split(",")
    for name in names:
        backend, precision, npu, jittered = run_name(name)
        jitter = 1e-7 if jittered else 0.0
        cfg = LMTrainConfig(corpus=a.corpus, preset=a.preset, runtime=backend, steps=a.steps, batch=a.batch, lr=a.lr,
                          seq_len=a.seq_len, npu_friendly=npu, eval_every=a.eval_every, ckpt_every=a.steps, init_jitter=jitter,
                          precision=precision)
        run = root / name
        shutil.rmtree(run, ignore_errors=True)
        t0 = time.perf_counter()
        r = api.lm_train(cfg, run, progress=True)
        wall = time.perf_counter() - t0
        m = r.manifest
        out["runs"][name] = {
            "backend": backend, "npu_friendly": npu, "wall_s": round(wall, 1), "setup_s": m["setup_s"],
            "final_loss": r.final_loss, "val_loss": r.val_loss, "val_bpc": m["val_bpc"],
            "tokens_per_s_median": m["tokens_per_s_median"], "n_params": m["n_params"], "peak_rss_mb": m["peak_rss_mb"],
            "graphs": {k: {"op_types": g["op_types"], "gather_like_ops": g.get("gather_like_ops"),
                           "export_s": g["export_s"], **({"host_ops": g["host_ops"]} if "host_ops" in g else {})}
                       for k, g in m["backend"].get("graphs", {}).items()},
            **({"mixed_precision": m["backend"]["mixed_precision"]} if "mixed_precision" in m["backend"] else {}),
            "precision": m["backend"]["precision"],
            "executes_in": sorted({g["executes_in"] for g in m["backend"].get("graphs", {}).values() if "executes_in" in g}),
            "val_curve": [(x["step"], x["val_loss"]) for x in read_metrics(run) if "val_loss" in x],
        }
        print(f"{name}: loss {r.final_loss:.4f} val {r.val_loss:.4f} · {m['tokens_per_s_median']:.0f} tok/s · {wall:.0f} s")
    ref = names[0]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name in names:
        ms = read_metrics(root / name)
        ax.plot([x["step"] for x in ms], [x["loss"] for x in ms], lw=1.4 if name == ref else 0.9,
                ls="-" if name == ref else "--", label=name)
        if name != ref:
            c = api.lm_compare(root / ref, root / name)
            out["compare"][name] = c
            print(f"{name} vs {ref}: Pearson {c['pearson']:.6f} · max|Δloss| {c['max_abs_loss_diff']:.2e} · "
                  f"tokens/s {c['tokens_per_s_ratio']:.2f}×")
    out["plot"] = save_plot(fig, ax, a.name, "step", "training loss (nats/char)",
                            f"LM control run: preset {a.preset}, {a.steps} steps, lr {a.lr:g}, {Path(a.corpus).name}")
    write_result(a.name, out)


if __name__ == "__main__":
    main()
