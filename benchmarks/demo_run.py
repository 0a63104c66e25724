"""`npuport demo` recorded: detector quality on unseen personas, proof and parity of every backend, latency per
bucket (interleaved with eager PyTorch) and bucketed vs padded throughput on the test length mix.

    python benchmarks/demo_run.py [--runs 30] [--fresh]
"""

import argparse
import shutil
import tempfile
import time

from common import meta, write_result

from npuport.detector.demo import DemoBuildConfig, DemoConfig, build_demo, run_demo
from npuport.ui import Progress


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--fresh", action="store_true", help="rebuild the demo detector (measures the build time too)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    build_root = build_demo(DemoBuildConfig(force=args.fresh), Progress(), show_bar=False)
    out = tempfile.mkdtemp(prefix="npuport-demo-")
    try:
        report = run_demo(DemoConfig(out=out + "/demo", runs=args.runs), Progress(), show_bar=False)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    import json

    build = json.loads((build_root / "build.json").read_text())
    report.pop("plots", None)
    write_result("demo", {**meta("demo_run.py"), "seconds": round(time.perf_counter() - t0, 1), "build": build, "report": report})


if __name__ == "__main__":
    main()
