"""`npuport demo` recorded: detector quality on unseen personas, proof and parity of every backend, latency per
bucket (interleaved with eager PyTorch) and bucketed vs padded throughput on the test length mix.

--fresh runs it as a new user would: an empty npuport cache (pretrained weights unpacked, demo detector built),
then the demo; `seconds` is that whole first run. The report's wall time is a run with the model cached.

    python benchmarks/demo_run.py [--runs 30] [--fresh] [--init me5-small]   # another init: results/demo_<init>.json
"""

import argparse
import json
import shutil
import tempfile
import time

from common import meta, write_result

from npuport.detector.demo import DEFAULT_INIT, DemoBuildConfig, DemoConfig, build_demo, run_demo
from npuport.ui import Progress


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--fresh", action="store_true", help="an empty cache: unpack, build and run as a new user would")
    ap.add_argument("--init", default=None, help="the demo detector's init (default: the demo's default)")
    args = ap.parse_args()
    import os

    cache = tempfile.mkdtemp(prefix="npuport-cache-") if args.fresh else None
    if cache:
        os.environ["NPUPORT_CACHE"] = cache
    t0 = time.perf_counter()
    out = tempfile.mkdtemp(prefix="npuport-demo-")
    try:
        init = args.init or DEFAULT_INIT
        first = run_demo(DemoConfig(out=out + "/first", runs=args.runs, init=init), Progress(), show_bar=False)
        first_s = time.perf_counter() - t0
        build_root = build_demo(DemoBuildConfig(init=init), Progress(), show_bar=False)  # cached now: its directory
        report = run_demo(DemoConfig(out=out + "/demo", runs=args.runs, init=init), Progress(), show_bar=False)
        build = json.loads((build_root / "build.json").read_text())  # before the cache goes
    finally:
        shutil.rmtree(out, ignore_errors=True)
        if cache:
            shutil.rmtree(cache, ignore_errors=True)
    report.pop("plots", None)
    write_result("demo" if not args.init or args.init == DEFAULT_INIT else f"demo_{args.init}", {**meta("demo_run.py"), "empty_cache": bool(cache), "first_run_seconds": round(first_s, 1),
                           "cached_run_seconds": report["wall_seconds"], "first_run_pass": first["pass"], "build": build,
                           "first_run_peak_rss_mb": first.get("peak_rss_mb"), "first_run_disk_mb": first.get("disk_mb"),
                           "report": report})


if __name__ == "__main__":
    main()
