"""npuport port | verify | bench: build artifacts with proof, re-check them, time them."""

from __future__ import annotations

import os
from pathlib import Path

from .common import EPILOG, add_runtime_flag, add_source, csv_list, positive_int, progress


def register(sub) -> None:
    _register_port(sub)
    _register_plan_buckets(sub)
    _register_verify(sub)
    _register_bench(sub)


def _register_port(sub) -> None:
    from ..runtimes import runtime_names
    from ..spec import ATTENTION_FORMS, PRECISIONS

    DEFAULT_PORT_RUNTIMES = tuple(runtime_names(default_port=True))  # = config.DEFAULT_PORT_RUNTIMES, without torch
    default = ",".join(DEFAULT_PORT_RUNTIMES)
    p = sub.add_parser("port", help="adapt, capture with proof, compile, verify parity, write artifacts + report",
                       description="Port a detector: adapt -> capture (+proof) -> compile per runtime -> parity -> "
                       "report.json / report.md under OUT.", epilog=EPILOG)
    add_source(p)
    p.add_argument("-o", "--out", required=True, help="output directory (one artifact per runtime inside)")
    add_runtime_flag(p, default=DEFAULT_PORT_RUNTIMES,
                     help=f"comma-separated, from: {', '.join(runtime_names(ports=True))} (default {default})")
    _add_shapes(p, auto=True)
    p.add_argument("--precision", choices=PRECISIONS,
                   help="default: fp32, or a runtime's own where it has no fp32 (qnn: fp16, ethos-u: int16); see doctor")
    p.add_argument("--device", help="target device (cpu, cuda, gpu, htp, npu; default: cpu, or a runtime's own device "
                   "where it has no CPU; see doctor)")
    p.add_argument("--eval-data", help="JSONL/CSV persona data for dataset parity (needs a tokenizer in MODEL_DIR)")
    _add_integer_flags(p)
    p.add_argument("--attention", choices=ATTENTION_FORMS, default="dense",
                   help="dense (default): adapted graph == HF model bit for bit; banded: sliding-window layers "
                        "(ModernBERT, mmBERT) compute only their band of scores at a compiled length above 3 "
                        "half-windows - less arithmetic, not bit-exact (the proof records how far from HF)")
    p.add_argument("--bench-runs", type=positive_int, default=5, help="timed runs for the p50 in the report")
    p.add_argument("--overwrite", action="store_true", help="replace an existing npuport output directory")
    p.set_defaults(func=run_port)


def _register_plan_buckets(sub) -> None:
    pb = sub.add_parser("plan-buckets", help="choose sequence buckets from your rows' token lengths (padding saved)",
                        description="Read DATA's token lengths with MODEL_DIR's tokenizer and choose at most --max "
                        "buckets that minimise padded tokens (what `port --buckets auto` does); prints the saving "
                        "against padding every row to the largest bucket.", epilog=EPILOG)
    pb.add_argument("data", metavar="DATA", help="JSONL/CSV rows: persona rows {persona, reply} or text rows {text}")
    pb.add_argument("--model", required=True, metavar="MODEL_DIR", help="model directory whose tokenizer and positions "
                    "to plan for")
    pb.add_argument("--max", type=positive_int, default=4, metavar="K", help="at most K buckets (default 4)")
    add_runtime_flag(pb, help="also hold to these runtimes' bucket budgets (comma-separated)")
    pb.add_argument("--align", type=positive_int, default=8, help="bucket lengths are multiples of this (default 8)")
    pb.add_argument("--json", metavar="PATH", help="also write the plan to this JSON file")
    pb.set_defaults(func=run_plan_buckets)


def _register_verify(sub) -> None:
    v = sub.add_parser("verify", help="re-check artifact hashes and parity; non-zero exit on failure")
    v.add_argument("path", help="an artifact directory or a `port` output directory")
    v.add_argument("--eval-data", help="JSONL/CSV persona data for dataset parity")
    v.add_argument("--json", metavar="PATH", help="also write the result to this JSON file")
    v.add_argument("--key", metavar="PUBKEY", help="also require a valid signature under this public key")
    v.set_defaults(func=run_verify)


def _register_bench(sub) -> None:
    from ..models.presets import PRESETS
    from ..runtimes import REFERENCE
    from ..spec import PRECISIONS

    bn = sub.add_parser("bench", help="latency p50/p90/p99/max/jitter/throughput per runtime, interleaved with eager",
                        description="Benchmark compiled artifacts (or port a model first) side by side with eager "
                        "PyTorch and torch.compile, interleaved in one process so machine drift hits all paths alike.",
                        epilog=EPILOG)
    bn.add_argument("target", nargs="?", help="a `port` output / artifact directory, or a HF model directory")
    bn.add_argument("--preset", choices=PRESETS.names(), help="benchmark a preset architecture (with --random-init)")
    bn.add_argument("--random-init", action="store_true")
    bn.add_argument("--new-head", action="store_true", help="TARGET is a plain backbone: benchmark it with a new random head")
    bn.add_argument("--seed", type=int, default=0)
    add_runtime_flag(bn, help="runtimes to port to / to select from the artifacts")
    bn.add_argument("--vs", type=csv_list("vs"), default=(REFERENCE,),
                    help=f"comparison paths: {REFERENCE}, torch.compile (default {REFERENCE})")
    _add_shapes(bn)
    bn.add_argument("--precision", choices=PRECISIONS, default="fp32")
    bn.add_argument("--eval-data", help="when bench ports a model first: JSONL/CSV rows its parity (and an integer "
                    "precision's decision check) runs on (needs a tokenizer in MODEL_DIR)")
    _add_integer_flags(bn)
    bn.add_argument("--runs", type=positive_int, default=20, help="timed runs per path and shape (default 20)")
    bn.add_argument("--warmup", type=int, default=2, help="untimed runs per path before timing (default 2)")
    bn.add_argument("--json", metavar="PATH", help="write results JSON here")
    bn.add_argument("--plot", metavar="PATH", help="latency distribution PNG (and *_vs_length.png with several buckets)")
    bn.set_defaults(func=run_bench)


def _add_integer_flags(p) -> None:
    """What port takes for integer precisions; bench takes it too, for the model it ports before timing."""
    from ..runtimes import get_runtime, runtime_names
    from ..spec import CALIBRATION_METHODS, NAMED_GROUPS, ROLE_GROUPS

    keep_defaults = "; ".join(f"{n} {','.join(get_runtime(n).default_keep)}"
                              for n in runtime_names(measures_sensitivity=True, mixes_int16=False))
    calibrating = ", ".join(n for n in runtime_names() if len(get_runtime(n).calibration_methods) > 1)
    dynamic = ", ".join(runtime_names(quantizes_dynamic=True))
    q = p.add_argument_group("integer precisions (int8, int16): calibration and the bar an artifact must clear")
    q.add_argument("--calibration-data", metavar="FILE", help="rows (same format as --eval-data) that calibrate "
                   "static int8/int16 quantisation; default: --eval-data")
    q.add_argument("--calibration-method", choices=CALIBRATION_METHODS, default="minmax",
                   help=f"how activation ranges are set from the calibration rows ({calibrating}; default minmax)")
    smoothing = ", ".join(f"{n} {get_runtime(n).smooth_quant:g}" for n in runtime_names()
                          if get_runtime(n).smooth_quant is not None)
    q.add_argument("--smooth-quant", type=_alpha, default=None, metavar="ALPHA",
                   help=f"static int8 ({smoothing}): SmoothQuant strength in [0, 1] (moves activation outliers into "
                        "the per-channel weights before quantising; exact in float); off: none. Default: each "
                        "runtime's recipe (recorded in the manifest)")
    q.add_argument("--quantization", choices=("static", "dynamic"), default="static",
                   help=f"int8: static QDQ calibrated on your rows (default) or dynamic (weights only: {dynamic})")
    q.add_argument("--keep-fp32", type=csv_list("keep-fp32"), default=None, metavar="GROUPS",
                   help=f"leave these in float: {', '.join(NAMED_GROUPS)}, layer.N (ffn_out: every layer's FFN "
                        "down-projection, where transformer activations carry outliers) (comma-separated); auto: "
                        "measure each group's cost and keep the costliest in float, one at a time, until "
                        "--min-agreement holds (on integer NPUs: raises them to 16-bit, see --int16); none: quantise "
                        f"every group. Default: {keep_defaults} (static int8/int16; on integer "
                        "NPUs a group named here runs in float on the host CPU)")
    per_token = runtime_names(quantizes_per_token=True)
    q.add_argument("--per-token", type=csv_list("per-token"), default=None, metavar="GROUPS",
                   help=f"static int8 ({', '.join(per_token)}): these groups get int8 weights and quantise their "
                        "input per token at run time (outlier channels cost them less than a calibrated per-tensor "
                        "range); none: every group calibrated per tensor. Default: " + "; ".join(
                            f"{n} {','.join(get_runtime(n).default_per_token) or 'none'}" for n in per_token)
                        + ". A group also in --keep-fp32 stays in float")
    mixing = ", ".join(runtime_names(mixes_int16=True))
    q.add_argument("--int16", type=csv_list("int16"), default=None, metavar="GROUPS",
                   help=f"integer NPUs ({mixing}): run these groups with 16-bit activations, weights still 8-bit: "
                        f"{', '.join(NAMED_GROUPS + ROLE_GROUPS)}, layer.N (comma-separated); none: every group at "
                        "8 bits. Default: each NPU's recipe (recorded in the manifest); there --keep-fp32 auto raises "
                        "the costliest groups to 16-bit until --min-agreement holds")
    q.add_argument("--sensitivity", action="store_true",
                   help="quantise each group alone and record what it costs (report.md): which to keep in fp32")
    q.add_argument("--min-agreement", type=float, default=0.995, metavar="SHARE",
                   help="refuse an integer artifact whose decisions on --eval-data agree with fp32 on fewer rows "
                        "than this share (default 0.995; 0 turns the check off)")


def _quant(args):
    from ..spec import QuantOptions

    return QuantOptions(method=args.calibration_method, mode=args.quantization, keep_fp32=args.keep_fp32,
                        sensitivity=args.sensitivity, min_agreement=args.min_agreement, int16=args.int16,
                        smooth_quant=args.smooth_quant, per_token=args.per_token)


def _alpha(text: str) -> float:
    import argparse

    if text.strip().lower() == "off":
        return -1.0
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number between 0 and 1 (e.g. 0.5), or off") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text}: give a number between 0 and 1 (e.g. 0.5), or off")
    return value


def _buckets(text: str):
    return "auto" if text.strip().lower() == "auto" else csv_list("buckets", int)(text)


def _add_shapes(p, auto: bool = False) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--seq-len", type=positive_int, help="one fixed sequence length (default 512)")
    g.add_argument("--buckets", type=_buckets if auto else csv_list("buckets", int),
                   help="sequence-length buckets, e.g. 64,128,256,512" + (
                       "; auto: plan them from the token lengths of --eval-data (or --calibration-data) to minimise "
                       "padded tokens (at most --max-buckets, and what each runtime can compile)" if auto else ""))
    if auto:
        p.add_argument("--max-buckets", type=positive_int, default=4, metavar="K",
                       help="--buckets auto: plan at most K buckets (default 4)")
    p.add_argument("--batch-sizes", type=csv_list("batch sizes", int), default=(1,),
                   help="compiled batch size(s), e.g. 1 or 1,4,8 (default 1)")


def _shapes(args):
    from ..spec import ShapeSpec

    buckets = args.buckets if args.buckets and args.buckets != "auto" else ((args.seq_len,) if args.seq_len else (512,))
    return ShapeSpec(batch_sizes=args.batch_sizes, buckets=buckets)


def run_port(args) -> int:
    from ..api import ModelSource, PortConfig, port

    cfg = PortConfig(
        source=ModelSource(model_dir=args.model_dir, preset=args.preset, random_init=args.random_init, seed=args.seed,
                           new_head=args.new_head),
        out=args.out, runtimes=args.runtime, shapes=_shapes(args), precision=args.precision, device=args.device,
        auto_buckets=args.max_buckets if args.buckets == "auto" else None,
        eval_data=args.eval_data, calibration_data=args.calibration_data, bench_runs=args.bench_runs,
        overwrite=args.overwrite, attention=args.attention,
        quant=_quant(args),
    )
    prog = progress(args)
    with prog.live():
        report = port(cfg, prog)
    _print_port(report, args.out)
    return 0 if report["pass"] else 1


def _print_port(report: dict, out: str) -> None:
    from rich.console import Console
    from rich.table import Table

    c = Console()
    t = Table(title="capture proof (max |Δlogit| vs eager)")
    t.add_column("method")
    t.add_column("max abs diff")
    for m, p in report["capture"].items():
        t.add_row(m, p.get("error") or f"{p['max_abs_diff']:.2e}" + (" (exact)" if p["exact"] else ""))
    c.print(t)
    t = Table(title="runtimes")
    refused = []
    for col in ("runtime", "here it", "precision", "max|Δlogit|", "max|Δprob|", "agreement", "p50 ms", "result"):
        t.add_column(col)
    for b, per in report["backends"].items():
        for prec, v in per.items():
            if v.get("refused"):
                t.add_row(b, "", prec, f"{v['max_abs_logit_diff']:.2e}", "", f"{v['decision_agreement']:.2%}", "",
                          "[red]REFUSED[/]")
                refused.append(f"[red]{b} {prec} refused[/]: {v['reason']}")
                continue
            t.add_row(b, v.get("executes", ""), prec, f"{v['max_abs_logit_diff']:.2e}", f"{v['max_abs_prob_diff']:.2e}",
                      f"{v['decision_agreement']:.2%}", f"{v['p50_ms']:.1f}",
                      "[green]PASS[/]" if v["pass"] else "[red]FAIL[/]")
    c.print(t)
    for line in refused:
        c.print(line)
    c.print(f"wall {report['wall_seconds']} s · peak RSS {report['peak_rss_mb']:.0f} MB · disk {report['disk_mb']:.0f} MB")
    c.print(f"report: {os.path.join(out, 'report.md')}")


def run_plan_buckets(args) -> int:
    from ..api import plan_buckets_for
    from ..fsio import write_json_atomic

    plan = plan_buckets_for(args.data, args.model, max_buckets=args.max, runtimes=args.runtime or (), align=args.align)
    if args.json:
        write_json_atomic(Path(args.json), plan)
    print(f"buckets: {','.join(map(str, plan['buckets']))}")
    print(f"{plan['rows']} rows, {plan['real_tokens']:,} real tokens; planned buckets compute {plan['padded_tokens']:,} "
          f"padded tokens, padding every row to {plan['buckets'][-1]} computes {plan['pad_to_max_tokens']:,} "
          f"({plan['saving_vs_pad_to_max']:.1%} saved)")
    for b, n in plan["rows_per_bucket"].items():
        print(f"  {b:>6}: {n} rows")
    if plan["truncated_rows"]:
        print(f"{plan['truncated_rows']} rows are longer than the model's {plan['buckets'][-1]} positions (truncated)")
    print(f"use: npuport port {args.model} -o OUT --buckets {','.join(map(str, plan['buckets']))}")
    return 0


def run_verify(args) -> int:
    from ..api import VerifyConfig, verify
    from ..fsio import write_json_atomic
    from ..verifying import CHANGED_ROWS_SHOWN

    prog = progress(args)
    with prog.live():
        res = verify(VerifyConfig(path=args.path, eval_data=args.eval_data, public_key=args.key), prog)
    if args.json:
        write_json_atomic(Path(args.json), res)
    for name, r in res["artifacts"].items():
        status = "PASS" if r["pass"] else "FAIL"
        signed = " · signature ok" if args.key else ""
        print(f"{name}: hashes ok{signed} · max|Δlogit| {r['max_abs_logit_diff']:.2e} · max|Δprob| {r['max_abs_prob_diff']:.2e}"
              f" · agreement {r['decision_agreement']:.2%}{_psnr_top1(r)} · {status}")
        changed = r["parity"].get("data", {}).get("changed_rows")
        if changed:
            print(f"  decisions changed on rows {', '.join(map(str, changed))} of --eval-data (0-based"
                  f"{', the first ' + str(len(changed)) if len(changed) == CHANGED_ROWS_SHOWN else ''})")
    return 0 if res["pass"] else 1


def _psnr_top1(r: dict) -> str:
    psnr = "∞" if r.get("psnr_db") is None and r["max_abs_logit_diff"] == 0 else r.get("psnr_db")
    top1 = r.get("top1_agreement")
    return ((f" · PSNR {psnr} dB" if psnr is not None else "")
            + (f" · top-1 {top1:.2%}" if top1 is not None else ""))


def run_bench(args) -> int:
    from ..api import BenchConfig, ModelSource, bench
    from ..manifest import MANIFEST
    from ..runtimes import REFERENCE

    target = Path(args.target) if args.target else None
    is_artifacts = target is not None and ((target / MANIFEST).is_file() or any(target.glob(f"*/{MANIFEST}")))
    source = None if is_artifacts else ModelSource(model_dir=args.target, preset=args.preset, random_init=args.random_init,
                                                   seed=args.seed, new_head=args.new_head)
    cfg = BenchConfig(artifact_dir=str(target) if is_artifacts else None, source=source, runtimes=args.runtime, vs=args.vs,
                      shapes=_shapes(args), precision=args.precision, runs=args.runs, warmup=args.warmup,
                      json_out=args.json, plot=args.plot, eval_data=args.eval_data,
                      calibration_data=args.calibration_data, quant=_quant(args))
    prog = progress(args)
    with prog.live():
        r = bench(cfg, prog)
    from rich.console import Console
    from rich.table import Table

    for shape, res in r["per_shape"].items():
        t = Table(title=f"latency at {shape} (ms, {r['runs']} interleaved runs)")
        for col in ("path", "p50", "p90", "p99", "max", "mean", "stdev", "jitter p99/p50", "seq/s", "vs eager"):
            t.add_column(col)
        ref = res.get(REFERENCE, {}).get("p50_ms")
        for n, st in res.items():
            t.add_row(n, *(f"{st[k]:.2f}" for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms", "mean_ms", "stdev_ms")),
                      f"{st['jitter']:.3f}", f"{st['sequences_per_s']:.2f}", f"{ref / st['p50_ms']:.2f}×" if ref else "—")
        Console().print(t)
    print(f"best runtime at {r['headline_shape']}: {r['best']}")
    return 0
