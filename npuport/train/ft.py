"""`npuport lm train --workers N --sync … --fault-tolerance torchft`: the fleet on torchft.

The launcher (this process) hosts torchft's Lighthouse on 127.0.0.1, starts N replica groups of one rank each
(`python -m npuport.train.ft_worker RUN SLOT`), and watches them:
    - a worker that dies is replaced (same slot, so the same replica id and data rows); the replacement heals from
      a live peer through torchft and rejoins; the survivors never restart or roll back;
    - a hung worker (SIGSTOP, a wedged driver) stops heartbeating: the Lighthouse drops it after the heartbeat
      timeout, and the survivors' step in flight fails after --ft-timeout and runs again without it; when it
      wakes it heals and rejoins;
    - OUT/workers.json maps each live worker's slot to its pid (for operators, and the tests' signals);
    - at the end the replicas' logs of committed steps (workers/rank_R.jsonl) become metrics.jsonl, one record
      per step with `world_size` (the replicas that committed it), and manifest.json is written.
Checkpoints commit as in the other modes (checkpoints/step_X/COMMIT), for a whole-fleet restart with --resume.
torchrun's elastic path (train/distributed.py) stays the plain mode.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..errors import ConfigError, NpuportError
from ..fsio import write_json_atomic, write_lines_atomic
from ..machine import machine
from ..models.lm import LMConfig
from .core import MetricsLog
from .distributed import DistConfig, prepare_distributed_run
from .ft_worker import ENV_JOIN, ENV_LIGHTHOUSE, ENV_READY, ENV_RESUME, FINISHED, HOST, loopback_store
from .loop import LMTrainConfig, initial_model, read_metrics
from .select import open_step_runner

WORKERS_JSON = "workers.json"
HEARTBEAT_TIMEOUT_MS = 2000  # how long survivors wait on a silent peer before a quorum without it


def require_torchft() -> None:
    try:
        import torchft  # noqa: F401
    except ImportError as e:
        raise ConfigError("--fault-tolerance torchft needs torchft: pip install 'npuport[torchft]'") from e


def _check(cfg: LMTrainConfig, dcfg: DistConfig) -> None:
    if cfg.batch % dcfg.workers:
        raise ConfigError(f"--batch {cfg.batch} must be divisible by --workers {dcfg.workers}")
    phase = dcfg.inner_steps // dcfg.fragments
    if dcfg.sync == "diloco" and cfg.steps % phase:
        raise ConfigError(f"--steps {cfg.steps} must be a multiple of --inner-steps / --fragments ({phase}) under "
                          "--fault-tolerance torchft: DiLoCo ends on a sync")
    if dcfg.outer_dtype != "fp32":
        raise ConfigError(f"--outer-dtype {dcfg.outer_dtype} is not available with --fault-tolerance torchft: torchft "
                          "0.2.0 quantizes its all-reduce only with Triton on a GPU; drop --fault-tolerance, or "
                          "use --outer-dtype fp32")


def _prepare(cfg: LMTrainConfig, dcfg: DistConfig, run: Path, resume: bool) -> None:
    info = prepare_distributed_run(cfg, dcfg, run, resume)
    mcfg = LMConfig.from_json(info["model"])
    (run / "workers").mkdir(exist_ok=True)
    (run / "workers" / FINISHED).unlink(missing_ok=True)
    # export the step graph once, here: the replicas then load that file instead of racing to write it
    model = initial_model(cfg, mcfg)
    runner = open_step_runner(cfg.runtime, model, cfg.optim, batch=cfg.batch // dcfg.workers, seq_len=cfg.seq_len,
                              form="split" if dcfg.sync == "allreduce" else "fused", gather_free=cfg.npu_friendly,
                              workdir=run / "graphs", compiled_dir=run / "graphs" / "launcher", threads=1,
                              precision=cfg.precision)
    runner.close()


class Fleet:
    def __init__(self, run: Path, dcfg: DistConfig, resume: bool, on_event=None):
        from torchft.coordination import LighthouseServer

        self.run, self.dcfg, self.resume = run, dcfg, resume
        self.on_event = on_event or (lambda msg: print(msg, file=sys.stderr, flush=True))
        # join timeout: a replica that is heartbeating but between syncs (a DiLoCo phase) is waited for, so a
        # replacement never forms a quorum on its own; a dead or hung one stops heartbeating and is not waited for
        self.lighthouse = LighthouseServer(bind=f"{HOST}:0", min_replicas=1, join_timeout_ms=600_000,
                                           quorum_tick_ms=50, heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS)
        self.ready, self._ready_sock = loopback_store()
        self.procs: dict[int, subprocess.Popen] = {}
        self.done: set[int] = set()
        self.replacements = 0
        self.logs = []

    def _spawn(self, slot: int, join: bool) -> None:
        env = {**os.environ, ENV_LIGHTHOUSE: self.lighthouse_address(), ENV_READY: f"{HOST}:{self.ready.port}",
               ENV_JOIN: "1" if join else "0", ENV_RESUME: "1" if self.resume and not join else "0",
               "GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME", "lo"), "RUST_LOG": os.environ.get("RUST_LOG", "warn")}
        log = open(self.run / "workers" / f"rank_{slot}.log", "ab")
        self.logs.append(log)
        self.procs[slot] = subprocess.Popen([sys.executable, "-m", "npuport.train.ft_worker", str(self.run), str(slot)],
                                            env=env, stdout=log, stderr=subprocess.STDOUT)
        self._write_workers()

    def _write_workers(self) -> None:
        live = {str(s): p.pid for s, p in sorted(self.procs.items()) if p.poll() is None}
        write_json_atomic(self.run / WORKERS_JSON, {"workers": live, "lighthouse": self.lighthouse_address(),
                                                    "replacements": self.replacements})

    def lighthouse_address(self) -> str:
        # LighthouseServer.address() names the host (`socket.gethostname()`); it listens on 127.0.0.1
        return f"http://{HOST}:{self.lighthouse.address().rsplit(':', 1)[1]}"

    def run_until_done(self) -> None:
        for slot in range(self.dcfg.workers):
            self._spawn(slot, join=False)
        finished_at = None
        while len(self.done) < self.dcfg.workers:
            time.sleep(0.2)
            if finished_at is None and (self.run / "workers" / FINISHED).is_file():
                finished_at = time.monotonic()
            if finished_at is not None and time.monotonic() - finished_at > self.dcfg.ft_timeout + 15:
                for slot, p in self.procs.items():  # a replica still away (hung) when the fleet finished
                    if slot not in self.done and p.poll() is None:
                        self.on_event(f"worker {slot} did not stop after the fleet finished: terminating it")
                        p.send_signal(signal.SIGCONT)
                        p.terminate()
            for slot, p in list(self.procs.items()):
                if slot in self.done or (rc := p.poll()) is None:
                    continue
                if rc == 0:
                    self.done.add(slot)
                    self._write_workers()
                    continue
                if (self.run / "workers" / FINISHED).is_file():
                    self.done.add(slot)  # died after the fleet finished: nothing left to heal into
                    continue
                if self.replacements >= self.dcfg.max_restarts:
                    raise NpuportError(f"worker {slot} exited with {_describe(rc)} after {self.replacements} "
                                       f"replacements (--max-restarts {self.dcfg.max_restarts}); its log: "
                                       f"{self.run / 'workers' / f'rank_{slot}.log'}")
                self.replacements += 1
                self.on_event(f"worker {slot} exited with {_describe(rc)}: the others keep training; starting a "
                              f"replacement ({self.replacements}/{self.dcfg.max_restarts}) that heals from a peer")
                self._spawn(slot, join=True)

    def close(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)  # a stopped worker cannot act on SIGTERM
                p.terminate()
        deadline = time.monotonic() + 10
        for p in self.procs.values():
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for f in self.logs:
            f.close()
        self._write_workers()  # none live now
        self.lighthouse.shutdown()


def _describe(rc: int) -> str:
    return f"signal {signal.Signals(-rc).name}" if rc < 0 else f"exit code {rc}"


def merge_metrics(run: Path, workers: int) -> list[dict]:
    """One record per committed step: loss = the mean over the replicas that logged it; `world_size` = those
    replicas (the workers whose own rows the step trained); `participants` = torchft's count, which also includes
    a replica that joined at a DiLoCo sync with its donor's pseudo-gradient; validation from the replica that ran
    it."""
    by_step: dict[int, list[dict]] = {}
    for slot in range(workers):
        for r in MetricsLog(run / "workers" / f"rank_{slot}.jsonl").read():
            by_step.setdefault(r["step"], []).append(r)
    out = []
    for step in sorted(by_step):
        rs = by_step[step]
        rec = {"step": step, "loss": sum(r["loss"] for r in rs) / len(rs), "lr": rs[0]["lr"],
               "world_size": len(rs), "participants": max(r["participants"] for r in rs),
               "replicas": sorted(r["replica"] for r in rs),
               "step_s": max(r["step_s"] for r in rs), "bytes_sent": max(r["bytes_sent"] for r in rs),
               "t": max(r.get("t", 0) for r in rs)}  # when the last replica logged it (wall clock)
        tps = [r["tokens_per_s"] for r in rs if r.get("tokens_per_s")]
        rec["tokens_per_s"] = round(sum(tps), 1) if tps else None
        for r in rs:
            if "val_loss" in r:
                rec["val_loss"], rec["val_bpc"] = r["val_loss"], r["val_bpc"]
        out.append(rec)
    write_lines_atomic(run / "metrics.jsonl", out)
    return out


def launch_ft(cfg: LMTrainConfig, dcfg: DistConfig, run: str | Path, *, resume: bool = False, on_event=None) -> dict:
    """Train under torchft; returns the manifest (as `distributed.launch` does)."""
    os.environ.setdefault("RUST_LOG", "warn")  # torchft's Rust side logs every quorum at INFO otherwise
    require_torchft()
    run = Path(run)
    _check(cfg, dcfg)
    _prepare(cfg, dcfg, run, resume)
    t0 = time.perf_counter()
    fleet = Fleet(run, dcfg, resume, on_event)
    try:
        fleet.run_until_done()
    finally:
        fleet.close()
    ms = merge_metrics(run, dcfg.workers)
    if not ms or ms[-1]["step"] != cfg.steps:
        raise NpuportError(f"the fleet stopped at step {ms[-1]['step'] if ms else 0} of {cfg.steps}; see "
                           f"{run / 'workers'}/rank_*.log")
    last_val = next((m["val_loss"] for m in reversed(ms) if "val_loss" in m), None)
    manifest = {
        "npuport_run": 1, "backend": {"backend": cfg.runtime}, "steps": cfg.steps,
        "distributed": {**dcfg.to_json(), "world_size": dcfg.workers},
        "fault_tolerance": {"engine": "torchft", "replacements": fleet.replacements,
                            "min_world_size": min(m["world_size"] for m in ms),
                            "steps_below_full": sum(m["world_size"] < dcfg.workers for m in ms)},
        "resumed_from": None, "restarts": 0, "final_loss": ms[-1]["loss"], "val_loss": last_val,
        "val_bpc": None if last_val is None else last_val / math.log(2),
        "bytes_sent_per_worker": ms[-1]["bytes_sent"], "param_bytes": _param_bytes(run),
        "train_wall_s": round(time.perf_counter() - t0, 1), "machine": machine(),
        "init_from": json.loads((run / "run.json").read_text()).get("init_from"),
    }
    write_json_atomic(run / "manifest.json", manifest)
    return manifest


def _param_bytes(run: Path) -> int:
    from ..models.lm import LMConfig, build_lm, count_parameters
    from .loop import read_run

    return 4 * count_parameters(build_lm(LMConfig.from_json(read_run(run)["model"])))


__all__ = ["launch_ft", "merge_metrics", "read_metrics"]
