"""Data-parallel training over static-graph steps on torch.distributed (gloo on CPU), elastic and resumable.

    allreduce  each worker runs the *gradient graph* on its shard of the global batch, gradients are averaged with
               one all-reduce, each worker runs the *update graph*: parameters stay identical everywhere (hashed
               every `hash_every` steps; drift is an error).
    diloco     (Douillard et al., 2023) each worker runs H inner *fused* steps with its own AdamW state, then the
               pseudo-gradient θ_global − θ_local is averaged with all-reduce and Nesterov-momentum SGD updates
               θ_global (defaults lr 0.7, momentum 0.9); inner optimizer states stay local.

Launch: `npuport lm train … --workers N --sync …` starts N processes on this machine through torch's elastic
launcher (the same agent `torchrun` uses); under `torchrun --nnodes … --nproc-per-node …` the same code runs
across machines (`npuport lm train … --sync …` detects the torchrun environment).

Fault tolerance: every rank writes its state at a checkpoint (allreduce: every `ckpt_every` steps; DiLoCo: every
`ckpt_every` steps rounded up to whole outer steps, see ckpt_cadence) atomically into checkpoints/step_X/rank_R.safetensors; after a barrier rank 0 commits the step
with checkpoints/step_X/COMMIT. When a worker dies the elastic agent restarts the group, and every rank resumes from
the last committed step. Batches depend only on (seed, step), so no sample is lost or repeated.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
import signal
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from ..errors import ConfigError, NpuportError
from ..fsio import save_with, write_json_atomic
from ..machine import machine
from ..models.lm import LMConfig, build_lm, count_parameters
from .core import CKPT_DIR, CheckpointStore, MetricsLog, load_params, run_loop
from .data import Batches, CharVocab
from .loop import (
    LMTrainConfig,
    corpus_and_model_config,
    evaluate,
    initial_model,
    load_corpus,
    lr_at,
    prepare_run,
    read_metrics,
    read_run,
    save_checkpoint,
)
from .loop import checkpoints as model_checkpoints
from .options import FAULT_TOLERANCE, OUTER_DTYPES
from .select import open_step_runner

SYNCS = ("allreduce", "diloco")

COMMIT = "COMMIT"
FAULT_ENV = "NPUPORT_FAULT"  # "RANK:STEP": that rank SIGKILLs itself at that step, first attempt only (tests)


@dataclass(frozen=True, kw_only=True)
class DistConfig:
    workers: int = 2
    sync: str = "allreduce"
    inner_steps: int = 10  # H, DiLoCo only
    outer_lr: float = 0.7
    outer_momentum: float = 0.9
    hash_every: int = 10
    max_restarts: int = 3
    fragments: int = 1  # Streaming DiLoCo: the parameters in K fragments, one synced every H/K steps
    outer_dtype: str = "fp32"
    fault_tolerance: str | None = None  # "torchft": survivors keep stepping, replacements heal from a peer
    ft_timeout: float = 30.0  # seconds: a collective (or a hung peer) that takes longer fails the step

    def __post_init__(self):
        if self.sync not in SYNCS:
            raise ConfigError(f"--sync {self.sync!r}: choose one of {', '.join(SYNCS)}")
        if self.fault_tolerance is not None and self.fault_tolerance not in FAULT_TOLERANCE:
            raise ConfigError(f"--fault-tolerance {self.fault_tolerance!r}: choose one of {', '.join(FAULT_TOLERANCE)}")
        if self.outer_dtype not in OUTER_DTYPES:
            raise ConfigError(f"--outer-dtype {self.outer_dtype!r}: choose one of {', '.join(OUTER_DTYPES)}")
        if self.fragments < 1 or self.inner_steps % self.fragments:
            raise ConfigError(f"--fragments {self.fragments} must be >= 1 and divide --inner-steps {self.inner_steps} "
                              "(one fragment is synced every H / fragments steps)")
        if (self.fragments > 1 or self.outer_dtype != "fp32") and self.sync != "diloco":
            raise ConfigError("--fragments and --outer-dtype apply to --sync diloco")
        if not self.ft_timeout > 0:
            raise ConfigError(f"--ft-timeout {self.ft_timeout}: must be > 0 seconds")
        if self.workers < 1 or self.inner_steps < 1 or self.hash_every < 1:
            raise ConfigError("--workers, --inner-steps and the hash interval must be >= 1")
        if not 0 < self.outer_lr or not 0 <= self.outer_momentum < 1:
            raise ConfigError(f"--outer-lr {self.outer_lr} must be > 0 and --outer-momentum in [0, 1)")

    def to_json(self) -> dict:
        return asdict(self)


class DriftError(NpuportError):
    """Parameters differ between data-parallel workers that must hold identical copies."""


# ---------------------------------------------------------------- checkpoints (one file per rank, committed by rank 0)

def rank_store(run: Path, keep: int | None = None) -> CheckpointStore:
    """checkpoints/step_XXXXXXXX/ with one file per rank whose state differs, visible once rank 0 wrote COMMIT."""
    return CheckpointStore(Path(run) / CKPT_DIR, "step", "", keep=keep, committed=lambda d: (d / COMMIT).is_file())


def committed_steps(run: Path) -> list[int]:
    return [n for n, _ in rank_store(run).entries()]


def _save_rank(run: Path, step: int, rank: int, tensors: dict[str, torch.Tensor]) -> None:
    from safetensors.torch import save_file

    d = run / CKPT_DIR / f"step_{step:08d}"
    d.mkdir(parents=True, exist_ok=True)
    flat = {k: v.detach().contiguous() for k, v in tensors.items()}
    save_with(d / f"rank_{rank}.safetensors", lambda tmp: save_file(flat, str(tmp), metadata={"step": str(step)}))


def _load_rank(run: Path, step: int, rank: int) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(run / CKPT_DIR / f"step_{step:08d}" / f"rank_{rank}.safetensors"))


def _flat(ts) -> torch.Tensor:
    return torch.cat([torch.as_tensor(np.asarray(t)).reshape(-1) if not isinstance(t, torch.Tensor) else t.reshape(-1)
                      for t in ts])


def _unflat(flat: torch.Tensor, shapes) -> list[torch.Tensor]:
    out, i = [], 0
    for s in shapes:
        n = math.prod(s)
        out.append(flat[i : i + n].view(s))
        i += n
    return out


def params_hash(params) -> str:
    h = hashlib.sha256()
    for p in params:
        h.update(np.ascontiguousarray(torch.as_tensor(p).numpy()).tobytes())
    return h.hexdigest()


# ---------------------------------------------------------------- the worker

def worker(cfg_json: dict, dcfg_json: dict, run: str, resume: bool) -> None:
    """One rank. Runs under torch's elastic agent (ours or torchrun's): RANK/WORLD_SIZE/MASTER_* come from env."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    cfg = LMTrainConfig.from_json(cfg_json)
    dcfg = DistConfig(**dcfg_json)
    run = Path(run)
    # A bounded timeout: after a lost worker, a rank whose first reconnect is refused fails within minutes and the
    # agent restarts the group, instead of every rank waiting out gloo's 30-minute default.
    timeout = datetime.timedelta(seconds=int(os.environ.get("NPUPORT_DIST_TIMEOUT", "300")))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", store=_round_store(rank, world, timeout), rank=rank, world_size=world, timeout=timeout)
    try:
        _worker(cfg, dcfg, run, resume, dist)
    finally:
        dist.destroy_process_group()


def _round_store(rank: int, world: int, timeout: datetime.timedelta):
    """The rendezvous store for this group, under a prefix of its own restart round.

    Under the elastic agent the ranks share the agent's store across restarts. Without a per-round prefix, a
    respawned rank can read the listening address a dead rank published in the previous round, and gloo's
    full-mesh connect then fails with "Connection refused" until its timeout (seen after a lost worker)."""
    from torch.distributed import PrefixStore, TCPStore

    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store = TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size=world,
                     is_master=(not agent_store and rank == 0), timeout=timeout, multi_tenant=not agent_store)
    round_id = f"{os.environ.get('TORCHELASTIC_RUN_ID', 'npuport')}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    return PrefixStore(f"npuport/{round_id}/", store)


def _prepare_on_rank0(cfg: LMTrainConfig, dcfg: DistConfig, run: Path, resume: bool, world: int, restart: int) -> None:
    """Under torchrun (no local launcher did it), rank 0 prepares the run directory, or checks a resumed one."""
    launched = "NPUPORT_LAUNCHED" in os.environ
    if restart == 0 and not resume and (run / "run.json").is_file() and not launched:
        raise ConfigError(f"{run} already holds a run; continue it with --resume, or pass another -o directory")
    if not (run / "run.json").is_file():
        corpus, mcfg = corpus_and_model_config(cfg, run, resume)
        prepare_run(run, cfg, resume, corpus, mcfg)
        info = read_run(run)
        info["distributed"] = {**dcfg.to_json(), "world_size": world}
        write_json_atomic(run / "run.json", info)
    elif resume and restart == 0 and not launched:
        # resuming: the same checks the local launcher makes (config, corpus, sync, world size)
        vocab0 = CharVocab.from_json(json.loads((run / "vocab.json").read_text()))
        info0 = read_run(run)
        prepare_run(run, cfg, True, load_corpus(cfg, vocab0), LMConfig.from_json(info0["model"]))
        check_resume_distributed(run, info0, dcfg, world)


def _restore(run: Path, runner, shapes, state_rank: int, global_p: torch.Tensor, momentum: torch.Tensor):
    """(start step, θ_global, outer momentum, bytes sent): from the newest committed checkpoint, else the start."""
    steps = committed_steps(run)
    if not steps:
        return 0, global_p, momentum, 0
    start = steps[-1]
    st = _load_rank(run, start, state_rank)
    runner.set_state(_unflat(st["param"], shapes), _unflat(st["m"], shapes), _unflat(st["v"], shapes), t=start)
    return (start, st.get("global", st["param"]).clone(), st.get("momentum", momentum).clone(),
            int(st["bytes_sent"].item()))


def fragment_bounds(sizes: list[int], k: int) -> list[tuple[int, int]]:
    """Streaming DiLoCo's fragments: k contiguous runs of parameter tensors (layer order) of about equal size, as
    (first tensor, end tensor) pairs. The torchft mode cuts the same fragments (ft_worker._Shadow)."""
    total = sum(sizes)
    owner = []
    seen = 0
    for n in sizes:
        owner.append(min(k - 1, int(seen * k / total)))
        seen += n
    bounds = [(owner.index(j), len(owner) - owner[::-1].index(j)) for j in range(k) if j in owner]
    if len(bounds) != k:
        raise ConfigError(f"--fragments {k}: the model has {len(sizes)} parameter tensors, too few for {k} fragments")
    return bounds


def ckpt_cadence(cfg, dcfg: DistConfig) -> int:
    """Steps between two checkpoints. DiLoCo ranks only agree with θ_global right after an outer step, so a DiLoCo
    checkpoint falls on one: --ckpt-every rounded up to a multiple of H (not every outer step, which at a small H
    writes every rank's state every few steps)."""
    if dcfg.sync != "diloco":
        return cfg.ckpt_every
    return dcfg.inner_steps * math.ceil(cfg.ckpt_every / dcfg.inner_steps)


def outer_step(global_p: torch.Tensor, momentum: torch.Tensor, delta: torch.Tensor, lr: float,
               mu: float) -> tuple[torch.Tensor, torch.Tensor]:
    """DiLoCo's outer Nesterov SGD, as torch.optim.SGD(nesterov=True) steps it (what torchft's DiLoCo runs):
    buf ← μ·buf + Δ (buf starts at 0, so the first buf is Δ, as torch's), θ ← θ − lr·(Δ + μ·buf)."""
    if mu == 0:
        return global_p - lr * delta, momentum
    buf = momentum * mu + delta
    return global_p - lr * (delta + mu * buf), buf


INT8_BLOCK = 256  # elements per int8 scale (an fp32 absmax scale per block, as INTELLECT-1's int8 all-reduce)


def mean_pseudo_gradient(dist, delta: torch.Tensor, dtype: str, world: int) -> tuple[torch.Tensor, int]:
    """The mean of every worker's Δ as it travels in `dtype`; returns (mean in fp32, bytes this worker sent).
    fp32 / bf16: one all-reduce. int8: blocks quantised with an absmax scale each, all-gathered (an int8 sum
    would overflow), dequantised and averaged on every worker."""
    if world == 1:
        q = _roundtrip(delta, dtype)
        return q, 0
    if dtype in ("fp32", "bf16"):
        t = delta.to(torch.bfloat16) if dtype == "bf16" else delta.clone()
        dist.all_reduce(t)
        return t.float() / world, t.numel() * t.element_size()
    q, scale, n = _quantize_int8(delta)
    qs, ss = [torch.empty_like(q) for _ in range(world)], [torch.empty_like(scale) for _ in range(world)]
    dist.all_gather(qs, q)
    dist.all_gather(ss, scale)
    total = sum(_dequantize_int8(a, b, n) for a, b in zip(qs, ss))
    return total / world, q.numel() + scale.numel() * 4


def _quantize_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    n = x.numel()
    pad = (-n) % INT8_BLOCK
    blocks = torch.nn.functional.pad(x, (0, pad)).view(-1, INT8_BLOCK)
    scale = blocks.abs().amax(dim=1).clamp_min(1e-30) / 127.0
    return torch.round(blocks / scale[:, None]).clamp(-127, 127).to(torch.int8), scale, n


def _dequantize_int8(q: torch.Tensor, scale: torch.Tensor, n: int) -> torch.Tensor:
    return (q.float() * scale[:, None]).reshape(-1)[:n]


def _roundtrip(x: torch.Tensor, dtype: str) -> torch.Tensor:
    """What Δ becomes after travelling in dtype (one worker: nothing travels, the rounding is still applied)."""
    if dtype == "bf16":
        return x.to(torch.bfloat16).float()
    if dtype == "int8":
        return _dequantize_int8(*_quantize_int8(x))
    return x


class _Sync:
    """What keeps the ranks together, and what a rank carries between steps besides its runner: DiLoCo's θ_global
    and outer Nesterov momentum, and the bytes sent so far. Streaming DiLoCo (fragments > 1) syncs one fragment
    every H / fragments steps, in turn; the others keep training locally meanwhile."""

    def __init__(self, runner, dist, dcfg: DistConfig, steps: int, global_p, momentum, bytes_sent: int):
        self.runner, self.dist, self.dcfg, self.steps = runner, dist, dcfg, steps
        self.world = dist.get_world_size()
        self.shapes = [s.shape for s in runner.fns.slots]
        self.global_p, self.momentum, self.bytes_sent = global_p, momentum, bytes_sent
        sizes = [math.prod(s) for s in self.shapes]
        offsets = np.cumsum([0, *sizes]).tolist()
        self.spans = [(offsets[a], offsets[b]) for a, b in fragment_bounds(sizes, dcfg.fragments)]
        self.phase = dcfg.inner_steps // dcfg.fragments

    def _mean(self, t: torch.Tensor) -> torch.Tensor:
        self.dist.all_reduce(t)  # one bucket for all tensors
        t /= self.world
        self.bytes_sent += t.numel() * t.element_size() if self.world > 1 else 0
        return t

    def step(self, step: int, lr: float, x, y) -> float:
        if self.dcfg.sync == "allreduce":  # gradients averaged every step; identical states checked by hash
            loss, grads = self.runner.grad(x, y)
            g = self._mean(_flat(grads).clone())
            self.runner.apply([t.numpy() for t in _unflat(g, self.shapes)], step, lr)
            if step % self.dcfg.hash_every == 0 or step == self.steps:
                _check_identical(self.runner.get_state()[0], self.dist, step)
            return loss
        loss = self.runner.step(step, lr, x, y)
        now = ((step // self.phase) - 1) % self.dcfg.fragments if step % self.phase == 0 else None
        if now is not None:
            self._outer(now)
        if step == self.steps and now is None:  # a run that ends between syncs ends on a sync of everything
            for f in range(self.dcfg.fragments):
                self._outer(f)
        return loss

    def _outer(self, frag: int) -> None:
        """DiLoCo's outer step on one fragment: the pseudo-gradient θ_global − θ_local averaged over workers (in
        --outer-dtype), Nesterov SGD on θ_global, and the workers' fragment reset to it."""
        a, b = self.spans[frag]
        p, m, v = self.runner.get_state()
        local = _flat(p)
        delta, sent = mean_pseudo_gradient(self.dist, self.global_p[a:b] - local[a:b], self.dcfg.outer_dtype,
                                           self.world)
        self.bytes_sent += sent
        g, buf = outer_step(self.global_p[a:b], self.momentum[a:b], delta, self.dcfg.outer_lr, self.dcfg.outer_momentum)
        self.global_p[a:b], self.momentum[a:b] = g, buf
        local[a:b] = self.global_p[a:b]
        self.runner.set_state(_unflat(local, self.shapes), m, v)

    def model_params(self, p=None):
        """The parameters the run's model is: θ_global under DiLoCo, the (identical) rank parameters otherwise."""
        if self.dcfg.sync == "diloco":
            return _unflat(self.global_p, self.shapes)
        return self.runner.get_state()[0] if p is None else p

    def rank_state(self) -> dict:
        p, m, v = self.runner.get_state()
        return {"param": _flat(p), "m": _flat(m), "v": _flat(v), "global": self.global_p, "momentum": self.momentum,
                "bytes_sent": torch.tensor(self.bytes_sent, dtype=torch.int64)}

def _open_runner(cfg: LMTrainConfig, dcfg: DistConfig, model, run: Path, rank: int, shard: int, dist):
    """Every rank runs the same graph: rank 0 exports it into graphs/ first, the others then reuse that file (a file
    whose key or hash does not match is exported again). Compiled forms (AOTInductor packages) stay per rank."""
    def make():
        return open_step_runner(cfg.runtime, model, cfg.optim, batch=shard, seq_len=cfg.seq_len,
                                form="split" if dcfg.sync == "allreduce" else "fused", gather_free=cfg.npu_friendly,
                                workdir=run / "graphs", compiled_dir=run / "graphs" / f"rank_{rank}", threads=1,
                                precision=cfg.precision)

    runner = make() if rank == 0 else None
    dist.barrier()
    return runner or make()


def _worker(cfg: LMTrainConfig, dcfg: DistConfig, run: Path, resume: bool, dist) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if cfg.batch % world:
        raise ConfigError(f"--batch {cfg.batch} must be divisible by the {world} workers (each takes an equal shard)")
    if rank == 0:
        _prepare_on_rank0(cfg, dcfg, run, resume, world, restart)
    dist.barrier()
    corpus = load_corpus(cfg, CharVocab.from_json(json.loads((run / "vocab.json").read_text())))
    mcfg = LMConfig.from_json(read_run(run)["model"])
    model = initial_model(cfg, mcfg)
    shard = cfg.batch // world
    rows = slice(rank * shard, (rank + 1) * shard)
    train_b = Batches(corpus.train, cfg.batch, cfg.seq_len, cfg.seed)
    runner = _open_runner(cfg, dcfg, model, run, rank, shard, dist)
    shapes = [s.shape for s in runner.fns.slots]
    global_p = _flat(runner.get_state()[0]).clone()
    # allreduce ranks hold identical state by construction (hashed every few steps): only rank 0's is stored.
    # DiLoCo ranks differ between outer steps: each stores its own.
    state_rank = rank if dcfg.sync == "diloco" else 0
    store = rank_store(run, keep=cfg.keep_checkpoints)
    start, *carried = _restore(run, runner, shapes, state_rank, global_p, torch.zeros_like(global_p))
    sync = _Sync(runner, dist, dcfg, cfg.steps, *carried)
    metrics = MetricsLog(run / "metrics.jsonl") if rank == 0 else None
    if metrics is not None:
        metrics.truncate(start)
    val_b = Batches(corpus.val, cfg.batch, cfg.seq_len, cfg.seed, name="validation").fixed(cfg.eval_batches)
    eval_model = build_lm(mcfg, seed=cfg.seed).eval()
    fault = os.environ.get(FAULT_ENV, "")
    tokens = cfg.batch * cfg.seq_len
    t_train = time.perf_counter()

    def one_step(step: int) -> dict:
        if fault and restart == 0 and fault == f"{rank}:{step}":
            os.kill(os.getpid(), signal.SIGKILL)  # a worker lost mid-run (tests)
        x, y = train_b.get(step, rows)
        lr = lr_at(cfg, step)
        ts = time.perf_counter()
        loss = sync.step(step, lr, x, y)
        dt = time.perf_counter() - ts
        lt = torch.tensor([loss], dtype=torch.float64)
        dist.all_reduce(lt)  # the logged loss is the mean over workers (not counted as sync traffic)
        return {"step": step, "loss": float(lt.item()) / world, "lr": lr, "step_s": round(dt, 6),
                "tokens_per_s": round(tokens / dt, 1), "bytes_sent": sync.bytes_sent}

    def validate(step: int) -> dict:
        load_params(eval_model, sync.model_params())
        val = evaluate(eval_model, val_b)
        return {"val_loss": val, "val_bpc": val / math.log(2)}

    def checkpoint(step: int) -> None:  # collective: every rank calls it at the same steps
        if rank == state_rank:
            _save_rank(run, step, rank, sync.rank_state())
        dist.barrier()
        if rank == 0:
            write_json_atomic(store.path(step) / COMMIT, {"step": step, "world_size": world, "sync": dcfg.sync})
            # rank 0's model checkpoint serves eval / sample / compare, like a single-process run's
            p, m, v = runner.get_state()
            save_checkpoint(run, step, runner.fns.names, (sync.model_params(p), m, v))
            store.prune()
            model_checkpoints(run, keep=cfg.keep_checkpoints).prune()

    try:
        run_loop(start=start, stop=cfg.steps, step=one_step, evaluate=validate if rank == 0 else None,
                 eval_every=cfg.eval_every, checkpoint=checkpoint,
                 ckpt_every=ckpt_cadence(cfg, dcfg), metrics=metrics)
    finally:
        if metrics is not None:
            metrics.close()
    if rank == 0:
        _write_run_manifest(run, runner.info, cfg, dcfg, world, start=start, restart=restart, bytes_sent=sync.bytes_sent,
                            param_bytes=int(sync.global_p.numel() * 4), wall_s=time.perf_counter() - t_train,
                            n_params=count_parameters(model))


def _write_run_manifest(run: Path, runtime_info: dict, cfg: LMTrainConfig, dcfg: DistConfig, world: int, *, start: int,
                        restart: int, bytes_sent: int, param_bytes: int, wall_s: float, n_params: int) -> None:
    """Rank 0's summary of a finished distributed run (what `lm compare` and the benchmarks read)."""
    ms = read_metrics(run)
    last_val = next((m["val_loss"] for m in reversed(ms) if "val_loss" in m), None)
    write_json_atomic(run / "manifest.json", {
        "npuport_run": 1, "backend": runtime_info, "distributed": {**dcfg.to_json(), "world_size": world},
        "steps": cfg.steps, "resumed_from": start or None, "restarts": restart,
        "final_loss": ms[-1]["loss"], "val_loss": last_val,
        "val_bpc": None if last_val is None else last_val / math.log(2),
        "bytes_sent_per_worker": bytes_sent, "param_bytes": param_bytes,
        "train_wall_s": round(wall_s, 1), "n_params": n_params, "machine": machine(),
        "init_from": read_run(run).get("init_from"),
    })


def check_resume_distributed(run: Path, info: dict, dcfg: DistConfig, world: int) -> None:
    """A resumed run must keep its synchronisation and its world size (the data shards depend on it)."""
    old = info.get("distributed")
    if not old:
        raise ConfigError(f"cannot resume {run} with --workers/--sync: it was trained in a single process")
    keys = ("sync", "inner_steps", "outer_lr", "outer_momentum", "fragments", "outer_dtype", "fault_tolerance")
    defaults = DistConfig().to_json()  # runs from before a field existed had its default
    if {k: old.get(k, defaults[k]) for k in keys} != {k: getattr(dcfg, k) for k in keys}:
        raise ConfigError(f"cannot resume {run}: it was trained with {old}, asked {dcfg.to_json()}")
    if old.get("world_size") != world:
        raise ConfigError(f"cannot resume {run} with {world} workers: it was trained with {old.get('world_size')} "
                          "(each worker's data shard depends on the count)")


def _check_identical(params, dist, step: int) -> None:
    h = params_hash(params)
    hashes: list = [None] * dist.get_world_size()
    dist.all_gather_object(hashes, h)
    if len(set(hashes)) != 1:
        raise DriftError(f"step {step}: parameters differ between workers (hashes {sorted(set(hashes))}); the "
                         "runtimes are not deterministic across processes; use the same backend and threads on every worker")


# ---------------------------------------------------------------- launching

def in_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ and "RANK" in os.environ


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prepare_distributed_run(cfg: LMTrainConfig, dcfg: DistConfig, run: Path, resume: bool) -> dict:
    """The run directory a local launcher hands its workers: new (refusing a non-empty one) or checked for a
    resume (config, corpus, synchronisation, world size), with the distributed config in run.json."""
    corpus, mcfg = corpus_and_model_config(cfg, run, resume)
    info = prepare_run(run, cfg, resume, corpus, mcfg)
    if resume:
        check_resume_distributed(run, info, dcfg, dcfg.workers)
    info["distributed"] = {**dcfg.to_json(), "world_size": dcfg.workers}
    write_json_atomic(run / "run.json", info)
    return info


def launch(cfg: LMTrainConfig, dcfg: DistConfig, run: str | Path, *, resume: bool = False) -> dict:
    """Start `dcfg.workers` local ranks under torch's elastic agent; returns rank 0's manifest."""
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    run = Path(run)
    if cfg.batch % dcfg.workers:
        raise ConfigError(f"--batch {cfg.batch} must be divisible by --workers {dcfg.workers}")
    prepare_distributed_run(cfg, dcfg, run, resume)
    lc = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=dcfg.workers, run_id=f"npuport-{os.getpid()}",
                      rdzv_backend="c10d", rdzv_endpoint=f"127.0.0.1:{_free_port()}", max_restarts=dcfg.max_restarts,
                      monitor_interval=0.2, start_method="spawn")
    # inherited by the ranks: the directory was prepared (and guarded) here. Only for this launch: a later torchrun
    # started from this process must not skip its own checks.
    previous = os.environ.get("NPUPORT_LAUNCHED")
    os.environ["NPUPORT_LAUNCHED"] = "1"
    try:
        elastic_launch(lc, worker)(cfg.to_json(), dcfg.to_json(), str(run), resume)
    except Exception as e:  # ChildFailedError: name the rank and the root cause in one line
        raise NpuportError(f"distributed training failed after {dcfg.max_restarts} restarts: {str(e).strip()[-600:]}") from e
    finally:
        if previous is None:
            os.environ.pop("NPUPORT_LAUNCHED", None)
        else:
            os.environ["NPUPORT_LAUNCHED"] = previous
    return json.loads((run / "manifest.json").read_text())
