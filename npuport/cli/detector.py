"""npuport detector train | eval | build-demo | make-data."""

from __future__ import annotations

import json
import os

from .common import add_init_flag, csv_list, positive_int, progress


def register(sub) -> None:
    det = sub.add_parser("detector", help="persona-deviation detector: train, eval, build-demo, make-data")
    dsub = det.add_subparsers(dest="detector_command", metavar="SUBCOMMAND")
    dsub.required = True
    t = _register_train(dsub)
    _add_accelerator_flags(t)
    _add_qat_flags(t)
    _register_others(dsub)
    det.set_defaults(func=run)


def _register_train(dsub):
    from ..models.presets import PRESETS

    t = dsub.add_parser("train", help="fine-tune a detector (AdamW, warmup+decay, early stopping on val F1)")
    t.add_argument("--data", required=True, help="training JSONL/CSV {persona, user?, reply, label}")
    t.add_argument("--val", help="validation JSONL/CSV (early stopping and threshold choice)")
    g = t.add_mutually_exclusive_group(required=True)
    g.add_argument("--init", help="start from this model directory (detector or HF encoder, with tokenizer)")
    g.add_argument("--preset", choices=PRESETS.names(), help="random-init architecture (needs --tokenizer)")
    t.add_argument("--tokenizer", help="directory with tokenizer files, for --preset")
    t.add_argument("-o", "--out", required=True, help="run directory: model/, checkpoint/, metrics.jsonl")
    t.add_argument("--epochs", type=positive_int, help="default 6 (with --qat: 2)")
    t.add_argument("--lr", type=float, help="peak learning rate, default 5e-4 (with --qat: 2e-5)")
    t.add_argument("--batch", type=positive_int, help="default 32 (with --qat: 16)")
    t.add_argument("--max-len", type=positive_int, help="default 256 (with --qat: 128, the one length QAT trains at)")
    t.add_argument("--patience", type=positive_int, default=2, help="epochs without val-F1 gain before stopping")
    t.add_argument("--train-top-layers", type=int, metavar="N",
                   help="freeze the embeddings and all but the top N encoder layers (for a pretrained --init)")
    t.add_argument("--head-lr", type=float, help="learning rate of the new head (default: --lr)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--resume", action="store_true", help="continue the run in OUT from its last checkpoint")
    return t


def _add_accelerator_flags(t) -> None:
    a = t.add_argument_group("training on an accelerator (the step captured as static graphs, one per length bucket)")
    a.add_argument("--runtime", "--backend", dest="runtime", metavar="RUNTIME",
                   help="run the training step on this runtime (onnxruntime, openvino, iree, qnn, ...: `npuport "
                        "doctor` lists them); `eager` runs the same static schedule in PyTorch, the control run. "
                        "Default: the eager trainer (dynamic shapes, dropout on)")
    a.add_argument("--buckets", type=csv_list("buckets", int), help="training lengths, e.g. 32,64,128 (default 32/64/128/256 up "
                                                         "to --max-len)")
    a.add_argument("--gather-free", action="store_true",
                   help="embedding lookup as a one-hot MatMul inside the graph (NPUs without Gather)")
    a.add_argument("--precision", choices=("fp32", "bf16", "fp16"),
                   help="bf16: mixed precision (bf16 gradient graphs, fp32 weights and AdamW) on runtimes that offer "
                        "it: eager, openvino (`lm train --precision` says more). Default: the runtime's own (fp32; qnn: "
                        "fp16)")
    a.add_argument("--threads", type=positive_int, help="runtime threads (default: all cores)")


def _add_qat_flags(t) -> None:
    q = t.add_argument_group("quantization-aware training for an integer NPU (fine-tunes a trained detector, --init)")
    q.add_argument("--qat", metavar="TARGET", help="train through TARGET's own quantizer (fake-quant: ethos-u); `port` "
                   "then uses the ranges it learned instead of calibrating. The model goes to OUT/model")
    q.add_argument("--qat-device", metavar="DEVICE", help="the target's device, e.g. ethos-u85-256 (default: the "
                   "runtime's own, `npuport doctor` lists them)")
    q.add_argument("--qat-precision", choices=("int8", "int16"), default="int8",
                   help="int8, or int16 (16-bit activations, 8-bit weights)")
    q.add_argument("--qat-int16", type=csv_list("qat-int16"), default=[], metavar="GROUPS",
                   help="at --qat-precision int8: these quantisation groups at 16-bit activations (8-bit weights), as "
                        "`port --int16` sets them, e.g. layernorm; `port` then quantises them the same way")
    q.add_argument("--qat-batch-sizes", type=csv_list("qat-batch-sizes", int), default=[1],
                   help="the batch sizes you will port (`port --batch-sizes`): each gets its ranges (default 1)")
    q.add_argument("--qat-distill", type=float, default=1.0, metavar="W",
                   help="weight of the float detector's own answers in the loss, the rest on the labels (default 1: "
                        "keep the float detector's decisions)")
    q.add_argument("--overwrite", action="store_true", help="with --qat: replace OUT when it is an earlier npuport output")


def _register_others(dsub) -> None:
    """eval, build-demo, make-data."""
    e = dsub.add_parser("eval", help="accuracy, precision, recall, F1, ROC-AUC, ECE, confusion matrix, plots")
    e.add_argument("model_dir")
    e.add_argument("--data", required=True, help="labelled JSONL/CSV")
    e.add_argument("--json", help="write metrics JSON here")
    e.add_argument("--plots", help="directory for roc.png and reliability.png")
    e.add_argument("--threshold", type=float, help="decision threshold (default: chosen on validation)")
    b = dsub.add_parser("build-demo", help="train the small demo detector on the generated demo data (cached)")
    b.add_argument("-o", "--out", help="directory (default: the npuport cache, reused by `npuport demo`)")
    b.add_argument("--seed", type=int, default=0)
    add_init_flag(b)
    b.add_argument("--epochs", type=positive_int, help="training epochs (default: the init's recipe)")
    b.add_argument("--force", action="store_true", help="rebuild even when a finished build exists")
    mk = dsub.add_parser("make-data", help="write the seeded demo data set (train/val/test JSONL + stats.json)")
    mk.add_argument("-o", "--out", required=True)
    mk.add_argument("--seed", type=int, default=0)


def run(args) -> int:
    sub = args.detector_command
    if sub == "train" and not args.qat and (args.overwrite or args.qat_int16):
        from ..errors import ConfigError

        if args.qat_int16:
            raise ConfigError("--qat-int16 sets the 16-bit groups of quantization-aware training: add --qat TARGET "
                              "(and --init a trained detector), or drop --qat-int16")
        raise ConfigError("--overwrite replaces a QAT run's OUT (with --qat); a plain training run continues with "
                          "--resume, or goes to another -o")
    prog = progress(args)
    if sub == "train" and args.qat:
        return _qat(args, prog)
    if sub == "train":
        from ..detector.config import DetectorTrainConfig
        from ..detector.train import train
        from ..machine import bound_heap

        bound_heap()

        cfg = DetectorTrainConfig(data=args.data, val=args.val, init=args.init, preset=args.preset, tokenizer_dir=args.tokenizer,
                          out=args.out, epochs=args.epochs or 6, lr=args.lr or 5e-4, batch=args.batch or 32,
                          max_len=args.max_len or 256,
                          patience=args.patience, seed=args.seed, resume=args.resume,
                          train_top_layers=args.train_top_layers, head_lr=args.head_lr, runtime=args.runtime,
                          buckets=args.buckets, gather_free=args.gather_free, precision=args.precision,
                          threads=args.threads)
        s = train(cfg, prog, show_bar=not args.quiet)
        print(f"best epoch {s['best_epoch']} · val F1 {s['best_val_f1']:.4f} · threshold {s['threshold']:.3f} · "
              f"{s['seconds']} s · model: {os.path.join(args.out, 'model')}")
        return 0
    if sub == "eval":
        from ..detector.evaluate import EvalConfig, evaluate

        m = evaluate(EvalConfig(model_dir=args.model_dir, data=args.data, json_out=args.json, plots_dir=args.plots,
                                threshold=args.threshold))
        cm = m["confusion_matrix"]
        print(f"n {m['n']} · F1 {m['f1']:.4f} · accuracy {m['accuracy']:.4f} · precision {m['precision']:.4f} · "
              f"recall {m['recall']:.4f} · ROC-AUC {m['roc_auc']:.4f} · ECE {m['ece']:.4f} · threshold {m['threshold']:.3f}")
        print(f"confusion: TN {cm['tn']} FP {cm['fp']} FN {cm['fn']} TP {cm['tp']}")
        return 0
    if sub == "build-demo":
        from ..detector.demo import DemoBuildConfig, build_demo
        from ..machine import bound_heap

        bound_heap()

        with prog.live():
            root = build_demo(DemoBuildConfig(out=args.out, seed=args.seed, init=args.init, epochs=args.epochs,
                                              force=args.force), prog, show_bar=not args.quiet)
        b = json.loads((root / "build.json").read_text())
        print(f"demo detector: {root / 'model'} · val F1 {b['train']['best_val_f1']:.4f} · built in {b['seconds']} s")
        return 0
    if sub == "make-data":
        from ..detector.generate import write_dataset

        stats = write_dataset(args.out, seed=args.seed)
        for k, v in stats["splits"].items():
            print(f"{k}: {v['rows']} rows, {v['personas']} personas, {v['deviation_fraction']:.0%} deviations, languages {v['languages']}")
        return 0
    raise AssertionError(sub)


QAT_ONLY_WITHOUT = {"preset": "--preset", "runtime": "--runtime", "resume": "--resume", "buckets": "--buckets",
                    "train_top_layers": "--train-top-layers", "head_lr": "--head-lr", "gather_free": "--gather-free",
                    "precision": "--precision"}


def _qat(args, prog) -> int:
    from ..detector.qat import QatConfig, qat_train
    from ..errors import ConfigError

    given = [flag for k, flag in QAT_ONLY_WITHOUT.items() if getattr(args, k) not in (None, False)]
    if given:
        raise ConfigError(f"--qat fine-tunes a trained detector (--init DIR) through the target's quantizer; "
                          f"{', '.join(given)} belong to plain training: drop them (--qat-precision sets int8/int16)")
    cfg = QatConfig(data=args.data, val=args.val, init=args.init, out=args.out, target=args.qat, device=args.qat_device,
                    precision=args.qat_precision, epochs=args.epochs or 2, lr=args.lr or 2e-5, batch=args.batch or 16,
                    max_len=args.max_len or 128, batch_sizes=tuple(args.qat_batch_sizes), seed=args.seed,
                    overwrite=args.overwrite, distill=args.qat_distill, int16=tuple(args.qat_int16))
    with prog.live():
        info = qat_train(cfg, prog, show_bar=not args.quiet)
    b, a, f = info["fake_quant_before"], info["fake_quant_after"], info["float"]
    print(f"QAT for {info['target']} {info['device']} {info['precision']}: {info['steps']} steps in {info['seconds']} s "
          f"· decisions kept vs float {b['decisions_kept_vs_float']:.1%} -> {a['decisions_kept_vs_float']:.1%} · F1 "
          f"float {f['f1']:.4f}, fake-quant {b['f1']:.4f} -> {a['f1']:.4f} ({info['eval_on']}) · model: "
          f"{os.path.join(args.out, 'model')} (port it with --backend {info['target']} --device {info['device']}"
          f"{' --precision int16' if info['precision'] == 'int16' else ''})")
    return 0
