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

    v = sub.add_parser("verify", help="re-check artifact hashes and parity; non-zero exit on failure")
    v.add_argument("path", help="an artifact directory or a `port` output directory")
    v.add_argument("--eval-data", help="JSONL/CSV persona data for dataset parity")
    v.add_argument("--json", help="also write the result to this JSON file")
    return parser


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


COMMANDS = {"doctor": cmd_doctor, "port": cmd_port, "verify": cmd_verify}


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
