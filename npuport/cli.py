"""Thin CLI: parse flags -> a config dataclass -> one api function -> print. Exit codes: 0 ok, 1 a check failed
(parity, hashes), 2 bad input or environment (one-line message; --debug shows the traceback)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import traceback

from .errors import NpuportError

EPILOG = "Docs: README.md. Every compiled artifact carries its proof in manifest.json."


def _csv(kind: str, cast=str):
    def parse(text: str):
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"{kind}: empty list")
        try:
            return tuple(cast(t) for t in items)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{kind}: {text!r} is not a comma-separated list of {cast.__name__}") from None

    return parse


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"{v} must be positive")
    return v


def _add_source(p: argparse.ArgumentParser) -> None:
    from .models.detector import PRESETS

    p.add_argument("model_dir", nargs="?", help="HF model directory (config.json + model.safetensors [+ tokenizer])")
    p.add_argument("--preset", choices=PRESETS.names(), help="a named architecture instead of MODEL_DIR")
    p.add_argument("--random-init", action="store_true", help="build the preset with random weights (no download)")
    p.add_argument("--seed", type=int, default=0, help="seed for --random-init (default 0)")


def build_parser() -> argparse.ArgumentParser:
    from .backends import backend_names
    from .backends.base import PRECISIONS
    from .models.detector import PRESETS

    parser = argparse.ArgumentParser(
        prog="npuport",
        description="Port PyTorch transformer models to static-graph runtimes (NPUs, ONNX Runtime, OpenVINO, "
        "AOTInductor) and prove at every step that nothing changed.",
        epilog=EPILOG,
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress output")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    d = sub.add_parser("doctor", help="backends, versions, devices, and why any backend is unavailable")
    d.add_argument("--json", action="store_true", help="print JSON instead of a table")

    p = sub.add_parser("port", help="adapt, capture with proof, compile, verify parity, write artifacts + report",
                       description="Port a detector: adapt -> capture (+proof) -> compile per backend -> parity -> "
                       "report.json / report.md under OUT.", epilog=EPILOG)
    _add_source(p)
    p.add_argument("-o", "--out", required=True, help="output directory (one artifact per backend inside)")
    p.add_argument("--backend", type=_csv("backend"), default=("onnxruntime", "openvino", "inductor"),
                   help=f"comma-separated, from: {', '.join(backend_names())} (default onnxruntime,openvino,inductor)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--seq-len", type=_positive_int, help="one fixed sequence length (default 512)")
    g.add_argument("--buckets", type=_csv("buckets", int), help="sequence-length buckets, e.g. 64,128,256,512")
    p.add_argument("--batch", type=_csv("batch", int), default=(1,), help="compiled batch size(s), e.g. 1 or 1,4,8")
    p.add_argument("--precision", choices=PRECISIONS, default="fp32")
    p.add_argument("--device", default="cpu", help="target device of the backend (cpu, cuda, gpu, npu; see doctor)")
    p.add_argument("--eval-data", help="JSONL/CSV persona data for dataset parity (needs a tokenizer in MODEL_DIR)")
    p.add_argument("--bench-runs", type=_positive_int, default=5, help="timed runs for the p50 in the report")
    p.add_argument("--overwrite", action="store_true", help="replace an existing npuport output directory")

    bn = sub.add_parser("bench", help="latency p50/p90/p99/max/jitter/throughput per backend, interleaved with eager",
                        description="Benchmark compiled artifacts (or port a model first) side by side with eager "
                        "PyTorch and torch.compile, interleaved in one process so machine drift hits all paths alike.",
                        epilog=EPILOG)
    bn.add_argument("target", nargs="?", help="a `port` output / artifact directory, or a HF model directory")
    bn.add_argument("--preset", choices=PRESETS.names(), help="benchmark a preset architecture (with --random-init)")
    bn.add_argument("--random-init", action="store_true")
    bn.add_argument("--seed", type=int, default=0)
    bn.add_argument("--backend", type=_csv("backend"), help="backends to port to / to select from the artifacts")
    bn.add_argument("--vs", type=_csv("vs"), default=("eager",), help="comparison paths: eager, torch.compile (default eager)")
    g = bn.add_mutually_exclusive_group()
    g.add_argument("--seq-len", type=_positive_int)
    g.add_argument("--buckets", type=_csv("buckets", int))
    bn.add_argument("--batch", type=_csv("batch", int), default=(1,))
    bn.add_argument("--precision", choices=PRECISIONS, default="fp32")
    bn.add_argument("--runs", type=_positive_int, default=20)
    bn.add_argument("--warmup", type=int, default=2)
    bn.add_argument("--json", help="write results JSON here")
    bn.add_argument("--plot", help="latency distribution PNG (and *_vs_length.png with several buckets)")

    sv = sub.add_parser("serve", help="HTTP service on an artifact: /v1/detect, /healthz, /v1/model, /metrics, playground at /",
                        description="Serve a ported detector with length buckets and micro-batching. Binds to "
                        "127.0.0.1 unless told otherwise; the artifact is hash-checked before serving.", epilog=EPILOG)
    sv.add_argument("artifact_dir", help="a `port` output directory or one artifact directory")
    sv.add_argument("--backend", help="which artifact to serve when the directory holds several")
    sv.add_argument("--host", default="127.0.0.1")
    sv.add_argument("--port", type=int, default=8000)
    sv.add_argument("--max-batch", type=_positive_int, default=8, help="rows per runtime batch (default 8)")
    sv.add_argument("--max-wait-ms", type=float, default=5.0, help="how long a batch waits to fill (default 5)")
    sv.add_argument("--threshold", type=float, help="decision threshold (default: the model's, chosen on validation)")
    sv.add_argument("--api-key-file", help="require this key (X-API-Key or Authorization: Bearer) on /v1/*")
    sv.add_argument("--max-items", type=_positive_int, default=64, help="items per request (default 64)")
    g = sv.add_mutually_exclusive_group()
    g.add_argument("--truncate", choices=("head", "tail"), default="tail",
                   help="inputs longer than the largest bucket: drop the tail (default) or the head, flagged truncated")
    g.add_argument("--reject-long", action="store_true", help="answer 413 instead of truncating")

    dm = sub.add_parser("demo", help="the main job: build the demo detector, port it everywhere, prove, benchmark, report",
                        description="Build (or reuse) the demo persona-deviation detector, port it to every available "
                        "backend with length buckets, check parity on the demo test split, benchmark, and write "
                        "report.md / report.json / plots.", epilog=EPILOG)
    dm.add_argument("-o", "--out", default="npuport-demo", help="output directory (default ./npuport-demo)")
    dm.add_argument("--backend", type=_csv("backend"), help="backends (default: every available compiled backend)")
    dm.add_argument("--buckets", type=_csv("buckets", int), default=(32, 64, 128), help="sequence buckets (default 32,64,128)")
    dm.add_argument("--runs", type=_positive_int, default=30, help="timed runs per path and bucket (default 30)")
    dm.add_argument("--overwrite", action="store_true", help="replace an earlier demo output directory")

    det = sub.add_parser("detector", help="persona-deviation detector: train, eval, build-demo, make-data")
    dsub = det.add_subparsers(dest="detector_command", metavar="SUBCOMMAND")
    dsub.required = True
    t = dsub.add_parser("train", help="fine-tune a detector (AdamW, warmup+decay, early stopping on val F1)")
    t.add_argument("--data", required=True, help="training JSONL/CSV {persona, user?, reply, label}")
    t.add_argument("--val", help="validation JSONL/CSV (early stopping and threshold choice)")
    g = t.add_mutually_exclusive_group(required=True)
    g.add_argument("--init", help="start from this model directory (detector or HF encoder, with tokenizer)")
    g.add_argument("--preset", choices=PRESETS.names(), help="random-init architecture (needs --tokenizer)")
    t.add_argument("--tokenizer", help="directory with tokenizer files, for --preset")
    t.add_argument("-o", "--out", required=True, help="run directory: model/, checkpoint/, metrics.jsonl")
    t.add_argument("--epochs", type=_positive_int, default=6)
    t.add_argument("--lr", type=float, default=5e-4)
    t.add_argument("--batch", type=_positive_int, default=32)
    t.add_argument("--max-len", type=_positive_int, default=256)
    t.add_argument("--patience", type=_positive_int, default=2, help="epochs without val-F1 gain before stopping")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--resume", action="store_true", help="continue the run in OUT from its last checkpoint")
    e = dsub.add_parser("eval", help="accuracy, precision, recall, F1, ROC-AUC, ECE, confusion matrix, plots")
    e.add_argument("model_dir")
    e.add_argument("--data", required=True, help="labelled JSONL/CSV")
    e.add_argument("--json", help="write metrics JSON here")
    e.add_argument("--plots", help="directory for roc.png and reliability.png")
    e.add_argument("--threshold", type=float, help="decision threshold (default: chosen on validation)")
    b = dsub.add_parser("build-demo", help="train the small demo detector on the generated demo data (cached)")
    b.add_argument("-o", "--out", help="directory (default: the npuport cache, reused by `npuport demo`)")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--force", action="store_true", help="rebuild even when a finished build exists")
    mk = dsub.add_parser("make-data", help="write the seeded demo data set (train/val/test JSONL + stats.json)")
    mk.add_argument("-o", "--out", required=True)
    mk.add_argument("--seed", type=int, default=0)

    _lm_parser(sub)

    v = sub.add_parser("verify", help="re-check artifact hashes and parity; non-zero exit on failure")
    v.add_argument("path", help="an artifact directory or a `port` output directory")
    v.add_argument("--eval-data", help="JSONL/CSV persona data for dataset parity")
    v.add_argument("--json", help="also write the result to this JSON file")
    return parser


def _lm_parser(sub) -> None:
    from .models.lm import PRESETS as LM_PRESETS
    from .train.engines import TRAIN_BACKENDS
    from .train.step import FORMS

    lm = sub.add_parser("lm", help="train a char-level decoder LM on static-graph runtimes; compare, eval, sample",
                        description="Training on inference-only runtimes: the whole step (forward, backward, clipping, "
                        "AdamW) is one standard-ONNX graph. Train on eager for the control run, compare the two.")
    lsub = lm.add_subparsers(dest="lm_command", metavar="SUBCOMMAND")
    lsub.required = True
    t = lsub.add_parser("train", help="train from scratch (or --resume) on a backend; writes a run directory",
                        epilog="Example: npuport lm train --demo-corpus --preset small --backend onnxruntime -o runs/ort")
    src = t.add_mutually_exclusive_group(required=True)
    src.add_argument("--corpus", help="text, TinyStories (<|endoftext|>-separated) or JSONL {\"text\"} file")
    src.add_argument("--demo-corpus", action="store_true", help="the embedded stories (npuport/train/stories.txt)")
    t.add_argument("--corpus-format", default="auto", choices=("auto", "text", "tinystories", "jsonl"))
    t.add_argument("--preset", default="small", choices=sorted(LM_PRESETS))
    t.add_argument("--backend", default="onnxruntime", choices=TRAIN_BACKENDS.names(),
                   help="eager = PyTorch reference (the control run); default: onnxruntime")
    t.add_argument("--steps", type=_positive_int, default=500)
    t.add_argument("--batch", type=_positive_int, default=16)
    t.add_argument("--seq-len", type=_positive_int, default=128)
    t.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (warmup, then cosine to lr/10)")
    t.add_argument("--warmup", type=int, default=50)
    t.add_argument("--seed", type=int, default=0, help="init and data order; equal seeds give comparable runs")
    t.add_argument("--eval-every", type=_positive_int, default=50)
    t.add_argument("--ckpt-every", type=_positive_int, default=100)
    t.add_argument("--npu-friendly", action="store_true",
                   help="graph without Gather/Scatter: one-hot embedding and loss, RoPE rotation as a matmul")
    t.add_argument("--form", default="fused", choices=FORMS, help="one graph per step, or gradient + update graphs")
    t.add_argument("--threads", type=_positive_int, help="runtime threads (default: torch's)")
    t.add_argument("--resume", action="store_true", help="continue the run in -o from its last checkpoint")
    dp = t.add_argument_group("distributed (torch.distributed, gloo; also runs under torchrun across machines)")
    dp.add_argument("--workers", type=_positive_int, help="start N worker processes on this machine (elastic launch)")
    dp.add_argument("--sync", choices=("allreduce", "diloco"),
                    help="allreduce: gradients averaged every step; diloco: H local steps, then averaged pseudo-gradients")
    dp.add_argument("--inner-steps", type=_positive_int, default=10, help="DiLoCo H (default 10)")
    dp.add_argument("--outer-lr", type=float, default=0.7, help="DiLoCo outer Nesterov-SGD learning rate")
    dp.add_argument("--outer-momentum", type=float, default=0.9)
    dp.add_argument("--max-restarts", type=int, default=3, help="group restarts after a lost worker")
    t.add_argument("-o", "--out", required=True, help="run directory (new or empty, or an existing run with --resume)")
    c = lsub.add_parser("compare", help="loss-curve Pearson, max/mean |Δloss|, final |Δparam|, tokens/s ratio")
    c.add_argument("run_a", help="reference run (usually eager)")
    c.add_argument("run_b")
    c.add_argument("--json", help="write the figures to this JSON file")
    c.add_argument("--plot", help="write both loss curves and |Δloss| to this PNG")
    e = lsub.add_parser("eval", help="validation loss and bits per character of a run on a corpus")
    e.add_argument("run")
    e.add_argument("--corpus", required=True)
    e.add_argument("--corpus-format", default="auto", choices=("auto", "text", "tinystories", "jsonl"))
    e.add_argument("--json")
    sm = lsub.add_parser("sample", help="generate text from a run's last checkpoint")
    sm.add_argument("run")
    sm.add_argument("--prompt", default="Once upon a time")
    sm.add_argument("--tokens", type=_positive_int, default=300)
    sm.add_argument("--temperature", type=float, default=0.8)
    sm.add_argument("--top-k", type=_positive_int)
    sm.add_argument("--seed", type=int, default=0)
    sm.add_argument("--backend", default="eager", choices=("eager", "onnxruntime"))


def cmd_lm(args) -> int:
    from . import api

    sub = args.lm_command
    if sub == "train":
        from .train.loop import TrainConfig

        cfg = TrainConfig(corpus="demo" if args.demo_corpus else args.corpus, corpus_format=args.corpus_format,
                          preset=args.preset, backend=args.backend, steps=args.steps, batch=args.batch,
                          seq_len=args.seq_len, lr=args.lr, warmup=args.warmup, seed=args.seed,
                          eval_every=args.eval_every, ckpt_every=args.ckpt_every, npu_friendly=args.npu_friendly,
                          form=args.form, threads=args.threads)
        if args.workers or args.sync:
            from .train.distributed import DistConfig, in_torchrun, launch, worker

            dcfg = DistConfig(workers=args.workers or 1, sync=args.sync or "allreduce", inner_steps=args.inner_steps,
                              outer_lr=args.outer_lr, outer_momentum=args.outer_momentum, max_restarts=args.max_restarts)
            if in_torchrun():  # launched by torchrun: this process is one rank
                worker(cfg.to_json(), dcfg.to_json(), args.out, args.resume)
                return 0
            m = launch(cfg, dcfg, args.out, resume=args.resume)
            print(f"{dcfg.sync} × {dcfg.workers} workers ({args.backend}): {m['steps']} steps · loss {m['final_loss']:.4f} · "
                  f"val loss {m['val_loss']:.4f} · {m['bytes_sent_per_worker'] / 1e6:,.1f} MB sent per worker · "
                  f"{m['train_wall_s']} s · restarts {m['restarts']} · run: {args.out}")
            return 0
        r = api.lm_train(cfg, args.out, resume=args.resume, progress=not args.quiet)
        m = r.manifest
        val = f" · val loss {r.val_loss:.4f} ({m['val_bpc']:.3f} bpc)" if r.val_loss is not None else ""
        print(f"{args.backend}: {r.steps} steps · loss {r.final_loss:.4f}{val} · {r.tokens_per_s:,.0f} tokens/s · "
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
                            backend=args.backend, top_k=args.top_k))
        return 0
    raise AssertionError(sub)


def _progress(args):
    from .ui import Progress

    return Progress(enabled=not args.quiet)


def cmd_doctor(args) -> int:
    from .api import doctor

    info = doctor()
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    c = Console()
    m = info["machine"]
    c.print(f"npuport {info['npuport']} · torch {info['torch']} · transformers {info['transformers']}")
    c.print(f"{m['processor']} · {m['cpu_count']} CPUs · Python {m['python']}")
    t = Table(title="backends")
    for col in ("backend", "status", "versions", "devices: precisions", "note"):
        t.add_column(col)
    for name, b in info["backends"].items():
        devs = "; ".join(f"{d}: {','.join(p)}" for d, p in b.get("devices", {}).items())
        vers = ", ".join(f"{k} {v}" for k, v in b.get("versions", {}).items())
        status = "[green]available[/]" if b["available"] else "[red]unavailable[/]"
        t.add_row(name, status, vers, devs, b["description"] if b["available"] else b["reason"])
    c.print(t)
    return 0


def cmd_port(args) -> int:
    from .api import ModelSource, PortConfig, port
    from .backends.base import ShapeSpec

    buckets = args.buckets or ((args.seq_len,) if args.seq_len else (512,))
    cfg = PortConfig(
        source=ModelSource(model_dir=args.model_dir, preset=args.preset, random_init=args.random_init, seed=args.seed),
        out=args.out, backends=args.backend, shapes=ShapeSpec(batch_sizes=args.batch, buckets=buckets),
        precision=args.precision, device=args.device, eval_data=args.eval_data, bench_runs=args.bench_runs,
        overwrite=args.overwrite,
    )
    prog = _progress(args)
    with prog.live():
        report = port(cfg, prog)
    _print_port(report, args.out)
    return 0 if report["pass"] else 1


def _print_port(report: dict, out: str) -> None:
    from rich.console import Console
    from rich.table import Table

    c = Console()
    t = Table(title=f"capture proof (max |Δlogit| vs eager)")
    t.add_column("method")
    t.add_column("max abs diff")
    for m, p in report["capture"].items():
        t.add_row(m, p.get("error") or f"{p['max_abs_diff']:.2e}" + (" (exact)" if p["exact"] else ""))
    c.print(t)
    t = Table(title="backends")
    for col in ("backend", "precision", "max|Δlogit|", "max|Δprob|", "agreement", "p50 ms", "result"):
        t.add_column(col)
    for b, per in report["backends"].items():
        for prec, v in per.items():
            t.add_row(b, prec, f"{v['max_abs_logit_diff']:.2e}", f"{v['max_abs_prob_diff']:.2e}",
                      f"{v['decision_agreement']:.2%}", f"{v['p50_ms']:.1f}",
                      "[green]PASS[/]" if v["pass"] else "[red]FAIL[/]")
    c.print(t)
    c.print(f"wall {report['wall_seconds']} s · peak RSS {report['peak_rss_mb']:.0f} MB · disk {report['disk_mb']:.0f} MB")
    c.print(f"report: {os.path.join(out, 'report.md')}")


def cmd_verify(args) -> int:
    from .api import VerifyConfig, verify

    prog = _progress(args)
    with prog.live():
        res = verify(VerifyConfig(path=args.path, eval_data=args.eval_data), prog)
    if args.json:
        from pathlib import Path

        from .artifact import write_json_atomic

        write_json_atomic(Path(args.json), res)
    for name, r in res["artifacts"].items():
        status = "PASS" if r["pass"] else "FAIL"
        print(f"{name}: hashes ok · max|Δlogit| {r['max_abs_logit_diff']:.2e} · max|Δprob| {r['max_abs_prob_diff']:.2e}"
              f" · agreement {r['decision_agreement']:.2%} · {status}")
    return 0 if res["pass"] else 1


def cmd_bench(args) -> int:
    from pathlib import Path

    from .api import BenchConfig, ModelSource, bench
    from .artifact import MANIFEST
    from .backends.base import ShapeSpec

    buckets = args.buckets or ((args.seq_len,) if args.seq_len else (512,))
    target = Path(args.target) if args.target else None
    is_artifacts = target is not None and ((target / MANIFEST).is_file() or any(target.glob(f"*/{MANIFEST}")))
    source = None if is_artifacts else ModelSource(model_dir=args.target, preset=args.preset, random_init=args.random_init,
                                                   seed=args.seed)
    cfg = BenchConfig(artifact_dir=str(target) if is_artifacts else None, source=source, backends=args.backend, vs=args.vs,
                      shapes=ShapeSpec(batch_sizes=args.batch, buckets=buckets), precision=args.precision, runs=args.runs,
                      warmup=args.warmup, json_out=args.json, plot=args.plot)
    prog = _progress(args)
    with prog.live():
        r = bench(cfg, prog)
    from rich.console import Console
    from rich.table import Table

    for shape, res in r["per_shape"].items():
        t = Table(title=f"latency at {shape} (ms, {r['runs']} interleaved runs)")
        for col in ("path", "p50", "p90", "p99", "max", "mean", "stdev", "jitter p99/p50", "seq/s", "vs eager"):
            t.add_column(col)
        ref = res.get("eager", {}).get("p50_ms")
        for n, st in res.items():
            t.add_row(n, *(f"{st[k]:.2f}" for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms", "mean_ms", "stdev_ms")),
                      f"{st['jitter']:.3f}", f"{st['sequences_per_s']:.2f}", f"{ref / st['p50_ms']:.2f}×" if ref else "—")
        Console().print(t)
    print(f"best backend at {r['headline_shape']}: {r['best']}")
    return 0


def cmd_serve(args) -> int:
    from .serve.app import ServeConfig, serve

    serve(ServeConfig(artifact_dir=args.artifact_dir, backend=args.backend, host=args.host, port=args.port,
                      max_batch=args.max_batch, max_wait_ms=args.max_wait_ms, threshold=args.threshold,
                      api_key_file=args.api_key_file, max_items=args.max_items, truncate=args.truncate,
                      reject_long=args.reject_long))
    return 0


def cmd_demo(args) -> int:
    from .detector.demo import DemoConfig, run_demo

    prog = _progress(args)
    with prog.live():
        r = run_demo(DemoConfig(out=args.out, backends=args.backend, buckets=args.buckets, runs=args.runs,
                                overwrite=args.overwrite), prog, show_bar=not args.quiet)
    _print_demo(r, args.out)
    return 0 if r["pass"] else 1


def _print_demo(r: dict, out: str) -> None:
    from rich.console import Console
    from rich.table import Table

    c = Console()
    d = r["detector"]
    c.print(f"[bold]detector[/] on unseen personas: F1 {d['f1']:.4f} · accuracy {d['accuracy']:.4f} · "
            f"ROC-AUC {d['roc_auc']:.4f} · ECE {d['ece']:.4f}")
    pb = r["bench"]["per_bucket"]
    seqs = sorted(pb, key=int)
    t = Table(title="port: parity vs eager fp32 and latency (batch 1, p50 ms)")
    for col in ["backend", "max|Δlogit|", "agreement"] + [f"{s} tok" for s in seqs] + ["bucketed vs pad", "result"]:
        t.add_column(col)
    t.add_row("eager", "reference", "—", *[f"{pb[s]['eager']['p50_ms']:.2f}" for s in seqs], "—", "")
    for b, per in r["port"]["backends"].items():
        v = per["fp32"]
        mix = r["bench"]["length_mix"].get(b, {})
        t.add_row(b, f"{v['max_abs_logit_diff']:.1e}", f"{v['decision_agreement']:.2%}",
                  *[f"{pb[s][b]['p50_ms']:.2f}" if b in pb[s] else "—" for s in seqs],
                  f"{mix.get('speedup', float('nan')):.2f}×", "[green]PASS[/]" if v["pass"] else "[red]FAIL[/]")
    c.print(t)
    c.print(f"wall {r['wall_seconds']} s · report: {os.path.join(out, 'report.md')} · plots: {os.path.join(out, 'plots')}")


def cmd_detector(args) -> int:
    sub = args.detector_command
    prog = _progress(args)
    if sub == "train":
        from .detector.train import TrainConfig, train

        cfg = TrainConfig(data=args.data, val=args.val, init=args.init, preset=args.preset, tokenizer_dir=args.tokenizer,
                          out=args.out, epochs=args.epochs, lr=args.lr, batch=args.batch, max_len=args.max_len,
                          patience=args.patience, seed=args.seed, resume=args.resume)
        s = train(cfg, prog, show_bar=not args.quiet)
        print(f"best epoch {s['best_epoch']} · val F1 {s['best_val_f1']:.4f} · threshold {s['threshold']:.3f} · "
              f"{s['seconds']} s · model: {os.path.join(args.out, 'model')}")
        return 0
    if sub == "eval":
        from .detector.evaluate import EvalConfig, evaluate

        m = evaluate(EvalConfig(model_dir=args.model_dir, data=args.data, json_out=args.json, plots_dir=args.plots,
                                threshold=args.threshold))
        cm = m["confusion_matrix"]
        print(f"n {m['n']} · F1 {m['f1']:.4f} · accuracy {m['accuracy']:.4f} · precision {m['precision']:.4f} · "
              f"recall {m['recall']:.4f} · ROC-AUC {m['roc_auc']:.4f} · ECE {m['ece']:.4f} · threshold {m['threshold']:.3f}")
        print(f"confusion: TN {cm['tn']} FP {cm['fp']} FN {cm['fn']} TP {cm['tp']}")
        return 0
    if sub == "build-demo":
        from .detector.demo import DemoBuildConfig, build_demo

        with prog.live():
            root = build_demo(DemoBuildConfig(out=args.out, seed=args.seed, force=args.force), prog, show_bar=not args.quiet)
        b = json.loads((root / "build.json").read_text())
        print(f"demo detector: {root / 'model'} · val F1 {b['train']['best_val_f1']:.4f} · built in {b['seconds']} s")
        return 0
    if sub == "make-data":
        from .detector.generate import write_dataset

        stats = write_dataset(args.out, seed=args.seed)
        for k, v in stats["splits"].items():
            print(f"{k}: {v['rows']} rows, {v['personas']} personas, {v['deviation_fraction']:.0%} deviations, languages {v['languages']}")
        return 0
    raise AssertionError(sub)


COMMANDS = {"doctor": cmd_doctor, "port": cmd_port, "verify": cmd_verify, "bench": cmd_bench, "serve": cmd_serve, "demo": cmd_demo,
            "detector": cmd_detector, "lm": cmd_lm}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not args.debug:
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        return COMMANDS[args.command](args)
    except NpuportError as e:
        if args.debug:
            traceback.print_exc()
        print(f"npuport {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
