"""npuport check: NPU pre-flight — what each target places on its accelerator, before any long compile."""

from __future__ import annotations

import json

from .common import EPILOG, add_runtime_flag, add_source, progress


def register(sub) -> None:
    from ..runtimes import runtime_names
    from ..spec import PRECISIONS

    p = sub.add_parser("check", help="NPU pre-flight: ops on the NPU, host fallbacks and rejections per target",
                       description="Capture the model as `port` would, then ask each target's partitioner which ops "
                       "it places on the NPU, which fall back to the host and why, in seconds rather than a full "
                       "compile. Also lists what the adapter changed so the model captures at all.", epilog=EPILOG)
    add_source(p)
    targets = runtime_names(partitions=True)
    add_runtime_flag(p, default=tuple(targets), help=f"targets, comma-separated (default {','.join(targets)}: the NPU "
                                                     "targets that partition a graph between accelerator and host)")
    from .port import _add_shapes

    _add_shapes(p)
    p.add_argument("--precision", choices=PRECISIONS, help="default: each target's own (qnn fp16, ethos-u int8)")
    p.add_argument("--device", help="target device, e.g. ethos-u85-256 (default: each target's own; see doctor)")
    p.add_argument("--json", nargs="?", const="-", metavar="PATH", help="write the findings as JSON (stdout with no PATH)")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..api import ModelSource
    from ..fsio import write_json_atomic
    from ..preflight import CheckConfig, check
    from ..spec import ShapeSpec

    buckets = args.buckets or ((args.seq_len,) if args.seq_len else (128,))
    cfg = CheckConfig(
        source=ModelSource(model_dir=args.model_dir, preset=args.preset, random_init=args.random_init, seed=args.seed,
                           new_head=args.new_head),
        targets=args.runtime, shapes=ShapeSpec(batch_sizes=args.batch_sizes, buckets=buckets),
        precision=args.precision, device=args.device)
    prog = progress(args)
    with prog.live():
        res = check(cfg, prog)
    if args.json == "-":
        print(json.dumps(res, indent=2))
    else:
        if args.json:
            write_json_atomic(args.json, res)
        _print(res)
    ok = res["capture"]["ok"] and not any(t.get("failed") for t in res["targets"].values())
    return 0 if ok else 1


def _print(res: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    c = Console()
    if not res["capture"]["ok"]:
        c.print(f"[red]capture failed[/]: {res['capture']['error']}")
        return
    c.print(f"{res['model_type']} · {res['parameters'] / 1e6:.1f}M parameters · adapter {res['capture']['adapter']}")
    for a in res["capture"]["actions"]:
        mark = "changed" if a["changed"] else "checked"
        c.print(f"  adapter ({mark}): {a['action']}" + (f"  [dim]— guards against: {a['fixes']}[/]" if "fixes" in a else ""))
    for name, t in res["targets"].items():
        colour = "red" if t.get("failed") else "green" if t["verdict"].startswith("whole") else "yellow"
        c.print(f"\n[bold]{name}[/] ({t['device']}, {t['precision']}, executes here: {t['executes']}, "
                f"{t['seconds']} s): [{colour}]{t['verdict']}[/]")
        table = Table(show_edge=False)
        for col in ("op", "on", "count"):
            table.add_column(col)
        for op, n in t["host_ops"].items():
            table.add_row(op, "[yellow]host[/]", str(n))
        for op, n in t["npu_ops"].items():
            if "quantize" not in op and "dim_order" not in op:  # every int8 op has its q/dq pair: noise in a table
                table.add_row(op, "NPU", str(n))
        if t["host_ops"] or t["npu_ops"]:
            c.print(table)
        for r in t["rejected"]:
            c.print(f"  rejected {r['op']}: {r['reason']}")
