"""`npuport demo` recorded: detector quality on unseen personas, proof and parity of every backend, latency per
bucket (interleaved with eager PyTorch) and bucketed vs padded throughput on the test length mix.

The command runs as a user runs it (`npuport demo -o DIR`, its own process), twice: --fresh first with an empty
npuport cache and an empty PyTorch Inductor cache (pretrained weights unpacked, demo detector built, every kernel
compiled, then the demo), then with the build cached. While
each runs, the memory of its whole process tree (the demo, its stage processes, compiler subprocesses) is sampled
(TreeMemory: the resident sum every 0.2 s, the proportional one at most once a second and only when it could set a
new peak, so the sampler does not slow what it measures): `tree_peak_pss_mb` is the largest proportional sum seen
(shared pages split among their sharers), `tree_peak_rss_sum_mb` the largest resident sum (shared pages counted once
per process); `peak_rss_mb` in the report is the demo's own
account (its largest single process, with what the parent held while its build ran).

    python benchmarks/demo_run.py [--runs 30] [--fresh] [--init me5-small]   # another init: results/demo_<init>.json
    python benchmarks/demo_run.py --fresh --cap-avx2   # results/demo_avx2cap.json

--cap-avx2 runs the demo as on the 2-core AVX2 machine the budget is set for, on an AVX-512 one: the demo and every
process it starts see an AVX2 machine's CPUID (benchmarks/cpuid_avx2.c through LD_PRELOAD: the AVX-512, VNNI, BF16
and AMX bits cleared), so PyTorch, MKL, oneDNN, ONNX Runtime's MLAS, OpenVINO and IREE's host target each pick their
AVX2 kernels themselves. Same cores and caches otherwise. Only the first (fresh) run is made.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from common import CPUID_AVX2, cpuid_avx2_env, meta, write_result

_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def _tree_pids(pid: int) -> list[int]:
    """A process and all its descendants (each once: a child listed under two of its parent's threads too)."""
    out, stack, seen = [], [pid], set()
    while stack:
        p = stack.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            children = [int(c) for task in Path(f"/proc/{p}/task").iterdir()
                        for c in (task / "children").read_text().split()]
        except (OSError, ValueError):  # the process ended meanwhile
            continue
        out.append(p)
        stack += children
    return out


def _rss_kb(p: int) -> int:
    """Resident memory from /proc/PID/statm: the kernel's counters, read in microseconds."""
    try:
        return int(Path(f"/proc/{p}/statm").read_text().split()[1]) * _PAGE_KB
    except (OSError, ValueError, IndexError):
        return 0


def _pss_kb(p: int) -> int:
    """Proportional memory from /proc/PID/smaps_rollup: the kernel walks every mapping and page table of the process
    for it, with the process's mmap lock held (32 ms for a 1.4 GB stage process, measured)."""
    try:
        for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _name(p: int) -> str:
    try:
        name = Path(f"/proc/{p}/comm").read_text().strip()
        if name.startswith("python"):  # which python: the command line says (a stage, a compile worker, a tool)
            name = Path(f"/proc/{p}/cmdline").read_text().replace("\0", " ").strip()[:160] or name
        return name
    except OSError:
        return "?"


class TreeMemory:
    """The peak memory of a process tree, sampled: the proportional sum (Pss: each shared page split among its
    sharers, the memory the tree takes; the goal is judged on it) and the resident sum (a page counted once per
    process that maps it: shared libraries, a file two stages map, a child forked from a 2 GB process before it execs
    a compiler).

    Reading Pss is not free: smaps_rollup walks the process's page tables under its mmap lock, so reading it every
    0.2 s stalled the demo's own page faults and took a core's sixth - the fresh demo measured 700 s under the sampler
    and 589 s alone, its training 360 vs 287 s. Now the resident sum comes from statm (counters, microseconds) at every
    sample, and Pss is read at most once a second, and only when it could set a new peak: a process's Pss never
    exceeds its Rss, so while the tree's resident sum is at or below the Pss peak so far, no reading could exceed it.
    A peak shorter than a second can escape the Pss figure; the resident sum, read every 0.2 s, bounds it.
    """

    PSS_EVERY_S = 1.0

    def __init__(self, pid: int):
        self.pid, self.peak_pss_kb, self.peak_rss_kb, self.at_peak, self.pss_reads, self.samples = pid, 0, 0, [], 0, 0
        self.last_pss = -self.PSS_EVERY_S

    def sample(self) -> None:
        pids = _tree_pids(self.pid)
        rss = {p: _rss_kb(p) for p in pids}
        total = sum(rss.values())
        self.samples += 1
        self.peak_rss_kb = max(self.peak_rss_kb, total)
        now = time.monotonic()
        if total <= self.peak_pss_kb or now - self.last_pss < self.PSS_EVERY_S:
            return
        self.last_pss, self.pss_reads = now, self.pss_reads + 1
        pss = {p: _pss_kb(p) for p in pids}
        if sum(pss.values()) > self.peak_pss_kb:
            self.peak_pss_kb = sum(pss.values())
            self.at_peak = sorted(((p, _name(p), round(kb / 1024.0, 1)) for p, kb in pss.items()), key=lambda r: -r[2])


def run_cli(out: str, env: dict, runs: int, init: str) -> dict:
    """`npuport demo` in its own process; returns its wall time, the sampled tree peak and its report."""
    cmd = [sys.executable, "-m", "npuport.cli", "demo", "-o", out, "--runs", str(runs), "--init", init]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tree = TreeMemory(proc.pid)

    def sample():
        while proc.poll() is None:
            tree.sample()
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    log = proc.stdout.read()
    proc.wait()
    sampler.join()
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 1):  # 1: a parity check failed, which the report records
        raise SystemExit(f"npuport demo exited {proc.returncode}:\n{log[-3000:]}")
    return {"seconds": round(wall, 1), "tree_peak_pss_mb": round(tree.peak_pss_kb / 1024.0, 1),
            "tree_peak_rss_sum_mb": round(tree.peak_rss_kb / 1024.0, 1),
            "tree_peak_processes": [{"pid": p, "name": n, "pss_mb": m} for p, n, m in tree.at_peak if m >= 10],
            "tree_samples": tree.samples, "tree_pss_reads": tree.pss_reads,
            "exit_code": proc.returncode,
            "report": json.loads((Path(out) / "report.json").read_text())}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--fresh", action="store_true", help="an empty cache: unpack, build and run as a new user would")
    ap.add_argument("--init", default=None, help="the demo detector's init (default: the demo's default)")
    ap.add_argument("--cap-avx2", action="store_true", help="every library sees an AVX2 CPUID (implies --fresh; one run; "
                    "needs gcc and CPUID faulting)")
    args = ap.parse_args()
    args.fresh = args.fresh or args.cap_avx2
    from npuport.detector.demo import DEFAULT_INIT, demo_model_dir

    init = args.init or DEFAULT_INIT
    cache = tempfile.mkdtemp(prefix="npuport-cache-") if args.fresh else None
    out = tempfile.mkdtemp(prefix="npuport-demo-")
    # --fresh: PyTorch Inductor's compile cache starts empty too (by default it lives in /tmp across runs, and an
    # earlier run's kernels made the first run's inductor compile about 15 s shorter than a new user's: measured)
    fresh = {"NPUPORT_CACHE": cache, "TORCHINDUCTOR_CACHE_DIR": os.path.join(cache, "torchinductor")} if cache else {}
    env = {**os.environ, **fresh, **(cpuid_avx2_env(out) if args.cap_avx2 else {})}
    try:
        first = run_cli(out + "/first", env, args.runs, init)
        second = first if args.cap_avx2 else run_cli(out + "/demo", env, args.runs, init)
        if cache:
            os.environ["NPUPORT_CACHE"] = cache
        build = json.loads((demo_model_dir(0, init) / "build.json").read_text())  # before the cache goes
    finally:
        shutil.rmtree(out, ignore_errors=True)
        if cache:
            shutil.rmtree(cache, ignore_errors=True)
    report = second["report"]
    report.pop("plots", None)
    name = "demo" if init == DEFAULT_INIT else f"demo_{init}"
    write_result(name + ("_avx2cap" if args.cap_avx2 else ""), {
        **meta("demo_run.py"), "command": "npuport demo -o DIR", "empty_cache": bool(cache),
        "empty_compiler_cache": bool(cache),  # TORCHINDUCTOR_CACHE_DIR empty as well (results before 12-07: not)
        "isa_cap": CPUID_AVX2 if args.cap_avx2 else None,
        "first_run_seconds": first["seconds"], "cached_run_seconds": None if args.cap_avx2 else second["seconds"],
        "first_run_pass": first["report"]["pass"], "build": build,
        "first_run_peak_rss_mb": first["report"].get("peak_rss_mb"), "first_run_tree_peak_pss_mb": first["tree_peak_pss_mb"],
        "first_run_tree_peak_rss_sum_mb": first["tree_peak_rss_sum_mb"],
        "cached_run_tree_peak_pss_mb": None if args.cap_avx2 else second["tree_peak_pss_mb"],
        "cached_run_tree_peak_rss_sum_mb": None if args.cap_avx2 else second["tree_peak_rss_sum_mb"],
        "first_run_tree_peak_processes": first["tree_peak_processes"],
        # samples taken, and how many of them read Pss (see TreeMemory: the others could not set a new peak)
        "first_run_tree_samples": [first["tree_samples"], first["tree_pss_reads"]],
        "first_run_stage_seconds": first["report"].get("stage_seconds"),  # `report` is the cached run's
        "cached_run_tree_peak_processes": None if args.cap_avx2 else second["tree_peak_processes"], "first_run_disk_mb": first["report"].get("disk_mb"),
        "report": report})


if __name__ == "__main__":
    main()
