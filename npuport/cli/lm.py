"""npuport lm train | compare | eval | sample: the decoder LM trained on static-graph runtimes."""

from __future__ import annotations

import sys

from .common import add_runtime_flag, positive_int


def register(sub) -> None:
    from ..runtimes import REFERENCE
    from ..train.options import sample_runtimes

    lm = sub.add_parser("lm", help="train a char-level decoder LM on static-graph runtimes; compare, eval, sample",
                        description="Training on inference-only runtimes: the whole step (forward, backward, clipping, "
                        "AdamW) is one standard-ONNX graph. Train on eager for the control run, compare the two.")
    lsub = lm.add_subparsers(dest="lm_command", metavar="SUBCOMMAND")
    lsub.required = True
    _add_train(lsub)
    c = lsub.add_parser("compare", help="loss-curve Pearson, max/mean |Δloss|, final |Δparam|, tokens/s ratio")
    c.add_argument("run_a", help="reference run (usually eager)")
    c.add_argument("run_b")
    c.add_argument("--json", metavar="PATH", help="write the figures to this JSON file")
    c.add_argument("--plot", help="write both loss curves and |Δloss| to this PNG")
    e = lsub.add_parser("eval", help="validation loss and bits per character of a run on a corpus")
    e.add_argument("run")
    e.add_argument("--corpus", required=True)
    e.add_argument("--corpus-format", default="auto", choices=("auto", "text", "tinystories", "jsonl"))
    e.add_argument("--json", metavar="PATH")
    sm = lsub.add_parser("sample", help="generate text from a run's last checkpoint")
    sm.add_argument("run")
    sm.add_argument("--prompt", default="Once upon a time")
    sm.add_argument("--tokens", type=positive_int, default=300)
    sm.add_argument("--temperature", type=float, default=0.8)
    sm.add_argument("--top-k", type=positive_int)
    sm.add_argument("--seed", type=int, default=0)
    add_runtime_flag(sm, multiple=False, default=REFERENCE, choices=sample_runtimes(),
                     help=f"{REFERENCE}, or a runtime that runs the [1, seq_len] forward graph")
    lm.set_defaults(func=run)


def _add_train(lsub) -> None:
    from ..models.presets import LM_PRESETS
    from ..runtimes import REFERENCE, default_train_runtime
    from ..spec import TRAIN_PRECISIONS
    from ..train.options import FAULT_TOLERANCE, FORMS, OUTER_DTYPES, training_runtimes

    t = lsub.add_parser("train", help="train from scratch (or --resume) on a runtime; writes a run directory",
                        epilog="Example: npuport lm train --demo-corpus --preset small --runtime onnxruntime -o runs/ort")
    src = t.add_mutually_exclusive_group(required=True)
    src.add_argument("--corpus", help="text, TinyStories (<|endoftext|>-separated) or JSONL {\"text\"} file")
    src.add_argument("--demo-corpus", action="store_true", help="the embedded stories (npuport/train/stories.txt)")
    t.add_argument("--corpus-format", default="auto", choices=("auto", "text", "tinystories", "jsonl"))
    t.add_argument("--preset", default="small", choices=sorted(LM_PRESETS))
    default = default_train_runtime()
    add_runtime_flag(t, multiple=False, default=default, choices=training_runtimes(),
                     help=f"runtime that runs the step; {REFERENCE} = PyTorch reference (the control run); "
                          f"default: {default}")
    t.add_argument("--steps", type=positive_int, default=500)
    t.add_argument("--batch", type=positive_int, default=16)
    t.add_argument("--seq-len", type=positive_int, default=128)
    t.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (warmup, then cosine to lr/10)")
    t.add_argument("--warmup-steps", type=int, default=50, help="linear learning-rate warmup steps (default 50)")
    t.add_argument("--seed", type=int, default=0, help="init and data order; equal seeds give comparable runs")
    t.add_argument("--eval-every", type=positive_int, default=50)
    t.add_argument("--ckpt-every", type=positive_int, default=100, metavar="N",
                   help="commit a checkpoint every N steps (DiLoCo: N rounded up to whole outer steps); default 100")
    t.add_argument("--npu-friendly", action="store_true",
                   help="graph without Gather/Scatter: one-hot embedding and loss, RoPE rotation as a matmul")
    t.add_argument("--form", default="fused", choices=FORMS, help="one graph per step, or gradient + update graphs")
    t.add_argument("--precision", choices=TRAIN_PRECISIONS,
                   help="bf16: mixed precision (the gradient graph in bf16, fp32 master weights and AdamW; split form); "
                   "runtimes: eager (autocast), openvino (fast where the CPU has AVX512-BF16 or AMX). Default: the "
                   "runtime's own (fp32; qnn: fp16 with loss scaling; `npuport doctor` lists them)")
    t.add_argument("--threads", type=positive_int, help="runtime threads (default: torch's)")
    t.add_argument("--keep-checkpoints", type=positive_int, default=3,
                   help="keep the last K checkpoints, delete older ones (default 3)")
    t.add_argument("--resume", action="store_true", help="continue the run in -o from its last checkpoint")
    t.add_argument("--init-from", metavar="RUN[@STEP]",
                   help="start from a finished run's parameters (its last checkpoint, or STEP's); optimizer state, "
                   "schedule and data order start fresh; same --preset, --seq-len and characters (DiLoCo's warm start)")
    dp = t.add_argument_group("distributed (torch.distributed, gloo; also runs under torchrun across machines)")
    dp.add_argument("--workers", type=positive_int, help="start N worker processes on this machine (elastic launch)")
    dp.add_argument("--sync", choices=("allreduce", "diloco"),
                    help="allreduce: gradients averaged every step; diloco: H local steps, then averaged pseudo-gradients")
    dp.add_argument("--inner-steps", type=positive_int, default=10, help="DiLoCo H (default 10)")
    dp.add_argument("--outer-lr", type=float, default=0.7, help="DiLoCo outer Nesterov-SGD learning rate")
    dp.add_argument("--outer-momentum", type=float, default=0.9)
    dp.add_argument("--fragments", type=positive_int, default=1,
                    help="Streaming DiLoCo: sync the parameters in K fragments, one every H/K steps (default 1)")
    dp.add_argument("--outer-dtype", choices=OUTER_DTYPES, default="fp32",
                    help="what DiLoCo's pseudo-gradients travel as: fp32, bf16 (half the bytes) or int8 (a quarter, "
                    "per-block scales)")
    dp.add_argument("--fault-tolerance", choices=FAULT_TOLERANCE,
                    help="torchft: a lost or hung worker does not stop the others; a replacement heals from a live "
                    "peer (pip install 'npuport[torchft]')")
    dp.add_argument("--ft-timeout", type=float, default=30.0,
                    help="with --fault-tolerance: seconds before a collective with a silent peer fails the step")
    dp.add_argument("--max-restarts", type=int, default=3,
                    help="group restarts after a lost worker (with --fault-tolerance: replacements started)")
    t.add_argument("-o", "--out", required=True, help="run directory (new or empty, or an existing run with --resume)")

def run(args) -> int:
    from .. import api

    sub = args.lm_command
    if sub == "train":
        from ..train.loop import LMTrainConfig

        cfg = LMTrainConfig(corpus="demo" if args.demo_corpus else args.corpus, corpus_format=args.corpus_format,
                          preset=args.preset, runtime=args.runtime, steps=args.steps, batch=args.batch,
                          seq_len=args.seq_len, lr=args.lr, warmup=args.warmup_steps, seed=args.seed,
                          eval_every=args.eval_every, ckpt_every=args.ckpt_every, npu_friendly=args.npu_friendly,
                          form=args.form, precision=args.precision, threads=args.threads,
                          keep_checkpoints=args.keep_checkpoints, init_from=args.init_from)
        if args.workers or args.sync or args.fault_tolerance:
            from ..errors import ConfigError
            from ..train.distributed import DistConfig, in_torchrun, launch, worker

            dcfg = DistConfig(workers=args.workers or 1, sync=args.sync or "allreduce", inner_steps=args.inner_steps,
                              outer_lr=args.outer_lr, outer_momentum=args.outer_momentum, max_restarts=args.max_restarts,
                              fragments=args.fragments, outer_dtype=args.outer_dtype,
                              fault_tolerance=args.fault_tolerance, ft_timeout=args.ft_timeout)
            if in_torchrun():  # launched by torchrun: this process is one rank
                if dcfg.fault_tolerance:
                    raise ConfigError("--fault-tolerance starts its own workers: run it without torchrun")
                worker(cfg.to_json(), dcfg.to_json(), args.out, args.resume)
                return 0
            if dcfg.fault_tolerance:
                from ..train.ft import launch_ft

                m = launch_ft(cfg, dcfg, args.out, resume=args.resume)
                ft = m["fault_tolerance"]
                extra = f"replacements {ft['replacements']} · steps below {dcfg.workers} workers {ft['steps_below_full']}"
            else:
                m = launch(cfg, dcfg, args.out, resume=args.resume)
                extra = f"restarts {m['restarts']}"
            val = f"val loss {m['val_loss']:.4f} · " if m["val_loss"] is not None else ""
            print(f"{dcfg.sync} × {dcfg.workers} workers ({args.runtime}): {m['steps']} steps · loss {m['final_loss']:.4f} · "
                  f"{val}{m['bytes_sent_per_worker'] / 1e6:,.1f} MB sent per worker · {m['train_wall_s']} s · {extra} · "
                  f"run: {args.out}")
            return 0
        r = api.lm_train(cfg, args.out, resume=args.resume, progress=not args.quiet)
        m = r.manifest
        val = f" · val loss {r.val_loss:.4f} ({m['val_bpc']:.3f} bpc)" if r.val_loss is not None else ""
        print(f"{args.runtime}: {r.steps} steps · loss {r.final_loss:.4f}{val} · {r.tokens_per_s:,.0f} tokens/s · "
              f"{m['n_params']:,} params · run: {args.out}")
        return 0
    if sub == "compare":
        r = api.lm_compare(args.run_a, args.run_b, json_out=args.json, plot=args.plot)
        extra = f" · final max|Δparam| {r['final_max_abs_param_diff']:.2e}" if "final_max_abs_param_diff" in r else ""
        print(f"{r['backend_b']} vs {r['backend_a']}: {r['steps_compared']} steps · Pearson {r['pearson']:.6f} · "
              f"max|Δloss| {r['max_abs_loss_diff']:.2e} · mean|Δloss| {r['mean_abs_loss_diff']:.2e} · final loss "
              f"{r['final_loss_a']:.4f} / {r['final_loss_b']:.4f}{extra} · tokens/s {r['tokens_per_s_ratio']:.2f}×")
        if r["config_differs"]:
            print(f"note: the runs differ in {', '.join(r['config_differs'])}; curves are not expected to match",
                  file=sys.stderr)
        return 0
    if sub == "eval":
        r = api.lm_eval(args.run, args.corpus, corpus_format=args.corpus_format, json_out=args.json)
        unk = f" · {r['unknown_characters']} characters outside the vocabulary" if r["unknown_characters"] else ""
        print(f"step {r['step']} · val loss {r['val_loss']:.4f} · {r['bpc']:.4f} bpc · "
              f"{r['tokens_evaluated']:,} tokens{unk}")
        return 0
    if sub == "sample":
        print(api.lm_sample(args.run, args.prompt, tokens=args.tokens, temperature=args.temperature, seed=args.seed,
                            runtime=args.runtime, top_k=args.top_k))
        return 0
    raise AssertionError(sub)
