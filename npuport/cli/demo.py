"""npuport demo: the main job on an embedded default."""

from __future__ import annotations

import os

from .common import EPILOG, add_init_flag, add_runtime_flag, csv_list, positive_int, progress


def register(sub) -> None:
    dm = sub.add_parser("demo", help="the main job: build the demo detector, port it everywhere, prove, benchmark, report",
                        description="Build (or reuse) the demo persona-deviation detector, port it to every available "
                        "backend with length buckets, check parity on the demo test split, benchmark, and write "
                        "report.md / report.json / plots.", epilog=EPILOG)
    dm.add_argument("-o", "--out", default="npuport-demo", help="output directory (default ./npuport-demo)")
    add_runtime_flag(dm, help="runtimes (default: every available runtime that executes here, eager excepted)")
    dm.add_argument("--buckets", type=csv_list("buckets", int), default=(32, 64, 128), help="sequence buckets (default 32,64,128)")
    dm.add_argument("--runs", type=positive_int, default=30, help="timed runs per path and bucket (default 30)")
    add_init_flag(dm)
    dm.add_argument("--overwrite", action="store_true", help="replace an earlier demo output directory")

    dm.set_defaults(func=run)


def run(args) -> int:
    from ..detector.demo import DemoConfig, run_demo
    from ..machine import bound_heap

    bound_heap()

    prog = progress(args)
    with prog.live():
        r = run_demo(DemoConfig(out=args.out, runtimes=args.runtime, buckets=args.buckets, runs=args.runs,
                                init=args.init, overwrite=args.overwrite), prog, show_bar=not args.quiet)
    _print_demo(r, args.out)
    return 0 if r["pass"] else 1


def _print_demo(r: dict, out: str) -> None:
    from rich.console import Console
    from rich.table import Table

    from ..runtimes import REFERENCE

    c = Console()
    d = r["detector"]
    c.print(f"[bold]detector[/] ({r.get('init', 'scratch')} init) on unseen personas: F1 {d['f1']:.4f} · accuracy "
            f"{d['accuracy']:.4f} · ROC-AUC {d['roc_auc']:.4f} · ECE {d['ece']:.4f}")
    h = r.get("detector_held_out_family")
    if h:
        c.print(f"[bold]detector[/] on a held-out template family: F1 {h['f1']:.4f} · precision {h['precision']:.4f} · "
                f"recall {h['recall']:.4f} · ROC-AUC {h['roc_auc']:.4f}")
    pb = r["bench"]["per_bucket"]
    seqs = sorted(pb, key=int)
    t = Table(title="port: parity vs eager fp32 and latency (batch 1, p50 ms)")
    for col in ["backend", "max|Δlogit|", "agreement"] + [f"{s} tok" for s in seqs] + ["bucketed vs pad", "result"]:
        t.add_column(col)
    t.add_row(REFERENCE, "reference", "—", *[f"{pb[s][REFERENCE]['p50_ms']:.2f}" for s in seqs], "—", "")
    for b, per in r["port"]["backends"].items():
        v = per["fp32"]
        mix = r["bench"]["length_mix"].get(b, {})
        t.add_row(b, f"{v['max_abs_logit_diff']:.1e}", f"{v['decision_agreement']:.2%}",
                  *[f"{pb[s][b]['p50_ms']:.2f}" if b in pb[s] else "—" for s in seqs],
                  f"{mix.get('speedup', float('nan')):.2f}×", "[green]PASS[/]" if v["pass"] else "[red]FAIL[/]")
    c.print(t)
    c.print(f"wall {r['wall_seconds']} s · peak RSS {r['peak_rss_mb']:.0f} MB · disk {r['disk_mb']:.0f} MB · report: {os.path.join(out, 'report.md')} · plots: {os.path.join(out, 'plots')}")
