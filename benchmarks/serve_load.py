"""Closed-loop load on `npuport serve` over loopback: concurrency 1, 4, 16, 64 for a fixed duration each;
throughput, p50/p99, errors, 5xx, server RSS over time; and the raw session latency (no HTTP) for comparison.
The server is a separate process (the real CLI); the clients are threads in this process on the same 2 cores,
each on one keep-alive `http.client` connection with the request bodies encoded once up front, so the load
generator takes as little of the shared CPU as a Python client can.

    python benchmarks/serve_load.py [--duration 20] [--long 60]   # --long: the duration at concurrency 16
"""

import argparse
import http.client
import json
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from common import meta, write_result

from npuport.api import ModelSource, PortConfig, port
from npuport.bench import summarize
from npuport.detector.demo import DemoBuildConfig, build_demo
from npuport.runtimes import ShapeSpec
from npuport.ui import Progress


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start_server(art: str, port_: int, url: str, *extra: str) -> subprocess.Popen:
    """The real CLI server, returned once /healthz answers 200."""
    server = subprocess.Popen([sys.executable, "-m", "npuport.cli", "serve", art, "--port", str(port_), "--max-batch", "8",
                               "--max-wait-ms", "5", *extra], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            time.sleep(0.1)
    server.kill()
    raise RuntimeError("the server did not become healthy within a minute")


def load(url: str, rows: list[dict], concurrency: int, duration: float, pid: int, backoff_429_s: float = 0.02) -> dict:
    """Closed loop: each client sends its next request when the last is answered. A client answered 429 waits
    `backoff_429_s` (far less than the Retry-After the server suggests, so the overload stays on)."""
    stop = time.perf_counter() + duration
    lat, lat_ok, codes, lock = [], [], {}, threading.Lock()
    rss = []

    u = urlsplit(url)
    bodies = [json.dumps(r).encode() for r in rows]
    hdrs = {"Content-Type": "application/json"}

    def client(seed):
        rng = random.Random(seed)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            try:
                conn.request("POST", u.path, body=rng.choice(bodies), headers=hdrs)
                resp = conn.getresponse()
                resp.read()
                code = resp.status
            except (OSError, http.client.HTTPException):
                code = -1
                conn.close()
                conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
            dt = (time.perf_counter() - t0) * 1e3
            with lock:
                lat.append(dt)
                if code == 200:
                    lat_ok.append(dt)
                codes[code] = codes.get(code, 0) + 1
            if code == 429:
                time.sleep(backoff_429_s)
        conn.close()

    def sampler():
        t0 = time.perf_counter()
        while time.perf_counter() < stop:
            rss.append((round(time.perf_counter() - t0, 1), rss_mb(pid)))
            time.sleep(1.0)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(concurrency)] + [threading.Thread(target=sampler)]
    t_start = time.perf_counter()
    [t.start() for t in threads]
    [t.join() for t in threads]
    wall = time.perf_counter() - t_start
    errors = sum(n for c, n in codes.items() if c not in (200, 429))
    warm = [r for t, r in rss if t >= min(10.0, duration / 3)]
    return {"concurrency": concurrency, "duration_s": round(wall, 1), "requests": len(lat), "throughput_rps": len(lat) / wall,
            "admitted_rps": len(lat_ok) / wall, "latency": summarize(lat),
            "admitted_latency": summarize(lat_ok) if lat_ok else None,
            "share_429": codes.get(429, 0) / max(1, len(lat)),
            "status_counts": {str(k): v for k, v in codes.items()}, "errors": errors,
            "http_5xx": sum(n for c, n in codes.items() if 500 <= c < 600), "rss_mb": rss,
            "rss_growth_after_warmup": (warm[-1] / warm[0] - 1) if len(warm) > 1 else 0.0}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=20)
    ap.add_argument("--long", type=float, default=60)
    ap.add_argument("--admit", type=int, default=16,
                    help="overload phase: --max-concurrent-requests of the server (the saturating concurrency)")
    args = ap.parse_args()
    prog = Progress()
    root = build_demo(DemoBuildConfig(), prog, show_bar=False)
    rows = [json.loads(ln) for ln in (root / "data" / "test.jsonl").read_text().splitlines()]
    rows = [{k: r[k] for k in ("persona", "user", "reply") if r.get(k) is not None} for r in rows]
    tmp = tempfile.mkdtemp(prefix="npuport-serve-")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    server = None
    try:
        port(PortConfig(source=ModelSource(model_dir=str(root / "model")), out=f"{tmp}/art", runtimes=("onnxruntime",),
                        shapes=ShapeSpec(batch_sizes=(1, 4, 8), buckets=(32, 64, 128)), capture_methods=("trace",), bench_runs=1), prog)
        # Raw session latency of the same rows: what the server adds on top is HTTP, JSON, tokenizing and batching.
        from npuport.detector.data import Example
        from npuport.serve.engine import Engine

        eng = Engine(f"{tmp}/art")
        enc = eng.encode([Example(persona=r["persona"], reply=r["reply"], user=r.get("user")) for r in rows[:200]])
        raw = []
        for x in enc:
            t0 = time.perf_counter()
            eng.infer([x.tokens])
            raw.append((time.perf_counter() - t0) * 1e3)
        eng.session.close()
        url = f"http://127.0.0.1:{free}"
        server = start_server(f"{tmp}/art", free, url)
        results = []
        for c in (1, 4, 16, 64):
            d = args.long if c == 16 else args.duration
            prog(f"concurrency {c} for {d:.0f} s")
            results.append(load(url + "/v1/detect", rows, c, d, server.pid))
        metrics = httpx.get(url + "/metrics").text
        server.terminate()
        server.wait(timeout=60)
        # Overload: the same service admitting --admit requests at a time, driven at its saturating concurrency
        # and at 4x that. Admitted requests should keep their latency; the rest get 429 at once; never a 5xx.
        server = start_server(f"{tmp}/art", free, url, "--max-concurrent-requests", str(args.admit))
        overload = {}
        for c in (args.admit, 4 * args.admit):
            prog(f"overload phase: concurrency {c} against --max-concurrent-requests {args.admit}")
            overload[str(c)] = load(url + "/v1/detect", rows, c, args.duration, server.pid)
    finally:
        if server:
            server.terminate()
            server.wait(timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)
    batch_lines = [ln for ln in metrics.splitlines() if ln.startswith("npuport_batch_rows_sum") or ln.startswith("npuport_batch_rows_count")]
    init = json.loads((root / "build.json").read_text()).get("init", "?")  # the demo's default init, which changes
    write_result("serve_load", {**meta("serve_load.py"), "model": f"demo detector ({init} init), onnxruntime fp32, "
                                "buckets 32/64/128, batch 1/4/8",
                                "server": "npuport serve --max-batch 8 --max-wait-ms 5", "raw_session_latency": summarize(raw),
                                "results": results, "server_batch_metrics": batch_lines,
                                "overload": {"admit": args.admit, "runs": overload,
                                             "admitted_p99_ratio": overload[str(4 * args.admit)]["admitted_latency"]["p99_ms"]
                                             / overload[str(args.admit)]["admitted_latency"]["p99_ms"]},
                                "c16_vs_c1_throughput": results[2]["throughput_rps"] / results[0]["throughput_rps"]})


if __name__ == "__main__":
    main()
