"""P13 done-when #1: each integer NPU's default recipe, ported and then verified on unseen splits (whole, or --rows).

As a new user runs it: `npuport port DEMO_MODEL --backend B [--precision P] --buckets 64,128 --calibration-data
val.jsonl --eval-data val.jsonl` (the target's default recipe; calibrated and gated on the demo's validation split), then
`npuport verify OUT --eval-data test.jsonl` and `npuport verify OUT --eval-data test_family.jsonl`: every row of the
test split and of the held-out template family, never used for calibration or gating. What executes where:
qnn in Qualcomm's x86 HTP simulator (bit-accurate), ethos-u in the TOSA reference model on the graph handed to Vela.

Each target is its own run (a run updates only its own entry of the JSON), so two targets can run side by side:

    python benchmarks/npu_verify.py --target qnn-int8
    python benchmarks/npu_verify.py --target ethos-u
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import RESULTS, demo_build, meta, write_result

# target -> port flags (none beyond the backend and the precision a user must name: each target's default recipe)
TARGETS = {
    "qnn-int8": ["--backend", "qnn", "--precision", "int8"],
    "ethos-u": ["--backend", "ethos-u"],
}
SPLITS = ("test", "test_family")


def _cli(args: list[str], timeout: int) -> tuple[int | None, str, float]:
    t0 = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-m", "npuport.cli", "-q", *args], capture_output=True, text=True,
                           timeout=timeout)
        return p.returncode, (p.stdout + p.stderr)[-1500:], time.perf_counter() - t0
    except subprocess.TimeoutExpired:
        return None, f"did not finish within {timeout} s", time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", required=True, choices=sorted(TARGETS))
    ap.add_argument("--init", default="me5-small", help="the demo detector's init (default me5-small, the demo's)")
    ap.add_argument("--gate-rows", type=int, default=60,
                    help="rows of val.jsonl `port` gates on (--eval-data; 0: all 480, tens of minutes on a simulator)")
    ap.add_argument("--rows", type=int, default=0, help="rows of each unseen split to verify on (0: all)")
    ap.add_argument("--buckets", default="64,128", help="port's buckets (default 64,128: the demo rows' lengths; "
                    "port's own default, one length of 512, takes an Ethos-U compile far past an hour here)")
    ap.add_argument("--port-dir", help="verify this finished port of the same target (a `port` output directory "
                    "this script made: its report.json) instead of porting again")
    ap.add_argument("--splits", default=",".join(SPLITS), help="unseen splits to verify on (default: both; a run "
                    "with one records only it, and its goal row says the other is missing)")
    ap.add_argument("--jobs", type=int, default=1, help="splits verified at once (2: both splits side by side, each "
                    "verify's s per row then counts the other's load)")
    ap.add_argument("--timeout", type=int, default=3 * 3600)
    ap.add_argument("--note", default="", help="what this run is (recorded in its entry and rendered under the table)")
    a = ap.parse_args()
    splits = [x for x in a.splits.split(",") if x]
    if not splits or set(splits) - set(SPLITS):
        ap.error(f"--splits {a.splits}: name one or both of {', '.join(SPLITS)}")

    from npuport.detector.demo import DemoBuildConfig, build_demo
    from npuport.ui import Progress

    demo = build_demo(DemoBuildConfig(init=a.init), Progress(enabled=True), show_bar=False)
    tmp = Path(tempfile.mkdtemp(prefix="npuport-verify-"))
    val = demo / "data" / "val.jsonl"
    gate = val
    if a.gate_rows:
        lines = val.read_text().splitlines()
        random.Random(1).shuffle(lines)
        gate = tmp / "gate.jsonl"
        gate.write_text("\n".join(lines[: a.gate_rows]) + "\n")
    out = Path(a.port_dir) if a.port_dir else tmp / "out"
    port_args = ["port", str(demo / "model"), "-o", str(out), *TARGETS[a.target], "--buckets", a.buckets,
                 "--calibration-data", str(val),
                 "--eval-data", str(gate)]
    if a.port_dir:  # reused: its own wall time and exit status from its report
        rc, tail, wall = 0, "", json.loads((out / "report.json").read_text())["wall_seconds"]
    else:
        rc, tail, wall = _cli(port_args, a.timeout)
    entry = {"port": " ".join(["npuport", *port_args[:1], "DEMO_MODEL", *port_args[2:]]).replace(str(tmp), "TMP")
             .replace(str(val), "val.jsonl"), "port_rc": rc, "port_wall_s": round(wall, 1), "gate_rows": a.gate_rows,
             "rows_per_split": a.rows or "all", "demo": demo_build(demo), **({"note": a.note} if a.note else {})}
    report = json.loads((out / "report.json").read_text()) if (out / "report.json").exists() else {"backends": {}}
    built = [(r, p, b) for r, by in report["backends"].items() for p, b in by.items() if b.get("artifact")]
    refused = [b for by in report["backends"].values() for b in by.values() if b.get("refused")]
    if not built:  # refused at the gate (exit 1: its reason and figures), or failed
        entry["failed"] = refused[0]["reason"] if refused else tail
        if refused:
            entry["gate"] = refused[0]["decision_agreement"]
    else:
        (runtime, prec, b), = built
        manifest = json.loads((out / b["artifact"] / "manifest.json").read_text())
        rt = manifest["runtime"]["meta"]
        entry.update({"runtime": runtime, "precision": prec, "executes": b.get("executes"),
                      "device": manifest.get("device") or rt.get("device"), "int16": rt.get("int16"),
                      **({"int16_every_group": True} if rt.get("int16_every_group") else {}), "host_ops": rt.get("host_ops"), "cost": rt.get("cost"),
                      "gate": manifest["parity"].get("data", {}).get("decision_agreement"), "splits": {}})
        def verify(split):
            rows = demo / "data" / f"{split}.jsonl"
            lines = rows.read_text().splitlines()
            order = list(range(len(lines)))  # sampled rows' line numbers in the split, for the changed rows
            if a.rows:
                random.Random(0).shuffle(order)  # the same sample as shuffling the lines (same length, same seed)
                order = order[: a.rows]
                rows = tmp / f"{split}.jsonl"
                rows.write_text("\n".join(lines[i] for i in order) + "\n")
            res = tmp / f"verify-{split}.json"
            vrc, vtail, vwall = _cli(["verify", str(out), "--eval-data", str(rows), "--json", str(res)], a.timeout)
            if not res.exists():
                return {"rc": vrc, "failed": vtail}
            (name, r), = json.loads(res.read_text())["artifacts"].items()
            d = r["parity"]["data"]
            return {"rc": vrc, "rows": d.get("n"), "decision_agreement": d["decision_agreement"],
                    "max_abs_logit_diff": d["max_abs_logit_diff"],
                    "max_abs_prob_diff": d["max_abs_prob_diff"], "psnr_db": d.get("psnr_db"),
                    # line numbers (0-based) in the split's file of rows whose decision changed
                    "changed_lines": [order[i] for i in d.get("changed_rows") or []],
                    "wall_s": round(vwall, 1), "s_per_row": round(vwall / max(1, d.get("n") or 1), 2)}

        with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:  # each verify is its own process
            for split, figs in zip(splits, pool.map(verify, splits)):
                entry["splits"][split] = figs
                print(a.target, split, json.dumps(figs), flush=True)
        if a.jobs > 1:
            entry["jobs"] = a.jobs
    # read-modify-write at the end: a run of another target may have written its entry meanwhile
    old = RESULTS / "npu_verify.json"
    targets = json.loads(old.read_text())["targets"] if old.exists() else {}
    targets[a.target] = {**meta("npu_verify.py"), **entry}
    write_result("npu_verify", {**meta("npu_verify.py"), "demo_init": a.init, "targets": targets})
    print(json.dumps(entry)[:2000])


if __name__ == "__main__":
    main()
