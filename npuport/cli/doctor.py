"""npuport doctor: every registered runtime, usable here or why not, and what it can do."""

from __future__ import annotations

import json


def register(sub) -> None:
    d = sub.add_parser("doctor", help="runtimes, versions, devices, what executes where, and why one is unavailable")
    d.add_argument("--json", nargs="?", const="-", metavar="PATH",
                   help="write the facts as JSON to PATH (or stdout when PATH is omitted or -)")
    d.set_defaults(func=run)


def run(args) -> int:
    from ..api import doctor
    from ..fsio import write_json_atomic

    info = doctor()
    if args.json:
        if args.json == "-":
            print(json.dumps(info, indent=2))
        else:
            write_json_atomic(args.json, info)
        return 0
    from rich.console import Console
    from rich.table import Table

    c = Console()
    m = info["machine"]
    c.print(f"npuport {info['npuport']} · torch {info['torch']} · transformers {info['transformers']}")
    c.print(f"{m['processor']} · {m['cpu_count']} CPUs · CPU flags {' '.join(m['cpu_flags'])} · Python {m['python']}")
    t = Table(title="runtimes")
    for col in ("runtime", "status", "here it", "compiles from", "port", "train", "versions", "devices: precisions", "note"):
        t.add_column(col)
    for name, r in info["runtimes"].items():
        devs = "; ".join(f"{d}: {','.join(p)}" for d, p in r.get("devices", {}).items())
        vers = ", ".join(f"{k} {v}" for k, v in r.get("versions", {}).items())
        status = "[green]available[/]" if r["available"] else "[red]unavailable[/]"
        yes = lambda b: "yes" if b else "—"  # noqa: E731
        t.add_row(name, status, r["executes"], ",".join(r["compiles_from"]), yes(r["ports"]),
                  ",".join(r["train_precisions"]) if r["trains"] else ("QAT (detector train --qat)" if r["qat"]
                                                                       else "—"), vers, devs,
                  r["description"] if r["available"] else r["reason"])
    c.print(t)
    return 0
