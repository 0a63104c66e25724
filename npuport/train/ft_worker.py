"""One torchft replica group (one process, one rank) of `npuport lm train --fault-tolerance torchft`.

    python -m npuport.train.ft_worker RUN SLOT        (started by the launcher in train/ft.py, never by hand)

The step runs on a static-graph runtime as in every other mode; torchft owns membership and recovery:
    allreduce  every step: `Manager.start_quorum` (a recovering replica heals here from a peer's live state),
               the gradient graph, `Manager.allreduce` (averaged over this step's participants), `should_commit`,
               then the update graph. A step whose all-reduce failed (a peer died in it) is not committed on any
               replica and runs again with the next quorum: its rows are neither lost nor applied twice.
    diloco     `torchft.local_sgd.DiLoCo` (its Streaming form with --fragments > 1) around the runner: the runner's
               parameters are mirrored into an `nn.Module` whose fragments DiLoCo syncs, the inner "optimizer" runs
               the fused step graph, the outer one is torch's Nesterov SGD. A phase whose sync fails is rolled back
               by DiLoCo and its steps run again.
Calling `Manager.allreduce` directly, never torchft's DDP wrapper: a peer killed inside an all-reduce makes the
wrapper's future assert (`assert fut._fut`, torchft 0.2.0), where the Manager reports the error and the step is
dropped.

Data: slot R always takes rows [R·b, (R+1)·b) of step s's global batch (b = batch / workers). A slot that is not in
step s's quorum (dead, hung, or still healing) skips those rows: they are not trained, and nothing is trained twice,
except that a replica that heals at a DiLoCo sync joins with its donor's state, so its first pseudo-gradient repeats
the donor's (torchft's documented behaviour). Each replica logs only committed steps to workers/rank_R.jsonl
(`step`, `participants` = torchft's count for the commit); the launcher merges them into metrics.jsonl, where
`world_size` is the number of replicas that trained their own rows in the step.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import signal
import sys
import time
from pathlib import Path

import torch

from ..fsio import save_with, write_json_atomic
from ..interrupt import die_with_parent
from ..models.lm import LMConfig
from .core import MetricsLog, load_params
from .data import Batches, CharVocab
from .distributed import COMMIT, DistConfig, _flat, _unflat, ckpt_cadence, fragment_bounds, rank_store
from .loop import LMTrainConfig, evaluate, initial_model, load_corpus, lr_at, read_run, save_checkpoint
from .select import open_step_runner

ENV_LIGHTHOUSE = "NPUPORT_FT_LIGHTHOUSE"
ENV_READY = "NPUPORT_FT_READY"  # host:port of the launcher's store: first-round workers start together
ENV_JOIN = "NPUPORT_FT_JOIN"  # "1": a replacement, which joins a running fleet and heals
ENV_RESUME = "NPUPORT_FT_RESUME"
FAULT_ENV = "NPUPORT_FAULT"  # KIND:SLOT:STEP (kill | stop | allreduce-kill | allreduce-error), first round only
FINISHED = "finished.json"  # workers/finished.json: written by the first replica to finish; late ones stop there
HOST = "127.0.0.1"


def loopback_store():
    """A TCPStore server listening on 127.0.0.1 only (torch binds its server to every interface unless handed a
    listening socket): (store, socket), the socket kept alive as long as the store."""
    import socket

    sock = socket.socket()
    sock.bind((HOST, 0))
    sock.listen(128)
    store = torch.distributed.TCPStore(HOST, sock.getsockname()[1], is_master=True, wait_for_workers=False,
                                       master_listen_fd=sock.fileno(), use_libuv=True)
    return store, sock


def _loopback_manager_server() -> None:
    """torchft 0.2.0's Manager binds its server to "[::]:PORT" (every interface); it is addressed at `hostname`
    (here 127.0.0.1). Rebind it to loopback, the smallest change that keeps every socket on 127.0.0.1."""
    import torchft.manager as tm

    if getattr(tm.ManagerServer, "_npuport_loopback", False):
        return
    original = tm.ManagerServer

    def server(**kw):
        kw["bind"] = f"{HOST}:{kw['bind'].rsplit(':', 1)[1]}"
        return original(**kw)

    server._npuport_loopback = True  # type: ignore[attr-defined]
    tm.ManagerServer = server


class _Fault:
    """Test-only fault injection from NPUPORT_FAULT, like torchft's own EventInjector (fail_at,
    fail_allreduce_at): on the first round only, so the replacement runs clean.
        kill:R:S            replica R SIGKILLs itself before step S
        stop:R:S            replica R SIGSTOPs itself before step S (a hang)
        allreduce-error:R:S replica R's all-reduce of step S fails (its process group aborted)
        allreduce-kill:R:S  replica R SIGKILLs itself when step S's all-reduce is in flight on its peers"""

    def __init__(self, slot: int):
        spec = os.environ.get(FAULT_ENV, "") if os.environ.get(ENV_JOIN) != "1" else ""
        parts = spec.split(":") if spec else []
        self.kind, self.at = (parts[0], int(parts[2])) if len(parts) == 3 and int(parts[1]) == slot else ("", -1)

    def before_step(self, step: int, pg) -> None:
        if step != self.at:
            return
        if self.kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.kind == "stop":  # a hang: the launcher sees a live process; the quorum must time it out
            os.kill(os.getpid(), signal.SIGSTOP)
        if self.kind == "allreduce-error":
            # this replica's process group is torn down under it, so its next all-reduce fails here and the peers'
            # fail after --ft-timeout, waiting for it (torchft's FakeProcessGroupWrapper.report_future_error does not
            # reach the Manager in 0.2.0: _ManagedWork reads the wrapped work's own future)
            print(f"npuport fault injection: all-reduce fails at step {step}", file=sys.stderr, flush=True)
            pg.abort()
            self.at = -1

    def in_allreduce(self, step: int) -> None:
        # in this step's quorum, the peers already inside the all-reduce, this replica dies instead of joining it
        if step == self.at and self.kind == "allreduce-kill":
            os.kill(os.getpid(), signal.SIGKILL)


class _Shadow(torch.nn.Module):
    """The runner's parameters as an nn.Module, so torchft's DiLoCo can snapshot, average and step them."""

    def __init__(self, params):
        super().__init__()
        self.ps = torch.nn.ParameterList([torch.nn.Parameter(torch.as_tensor(p).detach().clone()) for p in params])

    def fragments(self, k: int) -> list[torch.nn.Module]:
        """The same k fragments as the plain mode (distributed.fragment_bounds): Streaming DiLoCo syncs one at a
        time."""
        out = []
        for a, b in fragment_bounds([p.numel() for p in self.ps], k):
            m = torch.nn.Module()
            m.ps = torch.nn.ParameterList(list(self.ps)[a:b])
            out.append(m)
        return out

    @torch.no_grad()
    def copy_from(self, params) -> None:
        for p, v in zip(self.ps, params):
            p.copy_(torch.as_tensor(v))


class _RunnerStep(torch.optim.Optimizer):
    """DiLoCo's inner optimizer: `step(closure)` runs the fused AdamW step graph (the closure). torch wraps
    `step` with the pre/post hooks that DiLoCo registers, which is where it syncs."""

    def __init__(self, params):
        super().__init__(params, {})

    def step(self, closure=None):  # type: ignore[override]
        return closure() if closure is not None else None


class Replica:
    def __init__(self, run: Path, slot: int):
        self.run, self.slot = run, slot
        info = read_run(run)
        self.cfg = LMTrainConfig.from_json(info["config"])
        d = dict(info["distributed"])
        d.pop("world_size", None)
        self.dcfg = DistConfig(**d)
        self.mcfg = LMConfig.from_json(info["model"])
        self.fault = _Fault(slot)
        corpus = load_corpus(self.cfg, CharVocab.from_json(json.loads((run / "vocab.json").read_text())))
        self.shard = self.cfg.batch // self.dcfg.workers
        self.rows = slice(slot * self.shard, (slot + 1) * self.shard)
        self.train_b = Batches(corpus.train, self.cfg.batch, self.cfg.seq_len, self.cfg.seed)
        self.val_b = Batches(corpus.val, self.cfg.batch, self.cfg.seq_len, self.cfg.seed, name="validation").fixed(
            self.cfg.eval_batches)
        model = initial_model(self.cfg, self.mcfg)
        self.eval_model = initial_model(self.cfg, self.mcfg).eval()
        self.runner = open_step_runner(
            self.cfg.runtime, model, self.cfg.optim, batch=self.shard, seq_len=self.cfg.seq_len,
            form="split" if self.dcfg.sync == "allreduce" else "fused", gather_free=self.cfg.npu_friendly,
            workdir=run / "graphs", compiled_dir=run / "graphs" / f"rank_{slot}", threads=1, precision=self.cfg.precision)
        self.shapes = [s.shape for s in self.runner.fns.slots]
        self.log = MetricsLog(run / "workers" / f"rank_{slot}.jsonl")
        self.store = rank_store(run, keep=self.cfg.keep_checkpoints)
        self.bytes_sent = 0
        self.tokens = self.shard * self.cfg.seq_len

    # ------------------------------------------------------------ torchft

    def manager(self, state_dict, load_state_dict):
        from torchft.manager import Manager
        from torchft.process_group import ProcessGroupGloo

        from .ft_transport import SafetensorsHTTPTransport

        _loopback_manager_server()
        timeout = datetime.timedelta(seconds=self.dcfg.ft_timeout)
        # DiLoCo quorums come once per phase: a peer may be H steps away from its next sync
        quorum_timeout = datetime.timedelta(seconds=max(600.0, 20 * self.dcfg.ft_timeout))
        self.pg = pg = ProcessGroupGloo(timeout=timeout)
        self._tcp, self._tcp_sock = loopback_store()  # each replica group hosts its own store (torchft's Manager joins one)
        return Manager(pg=pg, load_state_dict=load_state_dict, state_dict=state_dict, min_replica_size=1,
                       use_async_quorum=False, timeout=timeout, quorum_timeout=quorum_timeout,
                       connect_timeout=timeout, rank=0, world_size=1, store_addr=HOST, store_port=self._tcp.port,
                       lighthouse_addr=os.environ[ENV_LIGHTHOUSE], replica_id=f"npuport_{self.slot}", hostname=HOST,
                       init_sync=False, checkpoint_transport=SafetensorsHTTPTransport(timeout, HOST))

    def wait_for_fleet(self) -> None:
        """First round only: every replica is built before any steps (a fault-free run is then the same run
        every time); a replacement or a resumed fleet joins whoever is there."""
        addr = os.environ.get(ENV_READY)
        if not addr or os.environ.get(ENV_JOIN) == "1":
            return
        host, port = addr.rsplit(":", 1)
        store = torch.distributed.TCPStore(host, int(port), is_master=False, wait_for_workers=False,
                                           timeout=datetime.timedelta(seconds=600))
        store.add("ready", 1)
        deadline = time.monotonic() + 600
        while store.add("ready", 0) < self.dcfg.workers:
            if time.monotonic() > deadline:
                raise TimeoutError("the other workers did not start within 600 s")
            time.sleep(0.05)

    def finished(self) -> int | None:
        p = self.run / "workers" / FINISHED
        return json.loads(p.read_text())["step"] if p.is_file() else None

    # ------------------------------------------------------------ shared

    def record(self, step: int, loss: float, lr: float, dt: float, world: int) -> dict:
        return {"step": step, "loss": loss, "lr": lr, "participants": world, "replica": self.slot, "t": round(time.time(), 3),
                "step_s": round(dt, 6), "tokens_per_s": round(self.tokens / dt, 1) if dt > 0 else None,
                "bytes_sent": self.bytes_sent}

    def validate(self, params) -> dict:
        load_params(self.eval_model, params)
        val = evaluate(self.eval_model, self.val_b)
        return {"val_loss": val, "val_bpc": val / math.log(2)}

    def _save_state(self, path: Path, state, step: int) -> None:
        from safetensors.torch import save_file

        from .ft_transport import to_wire

        tensors, skeleton = to_wire(state)
        save_with(path, lambda tmp: save_file(tensors, str(tmp), metadata={"npuport_skeleton": skeleton,
                                                                           "step": str(step)}))

    def checkpoint(self, step: int, manager, model_params) -> None:
        """Every replica stores its own state (its AdamW moments differ under DiLoCo); the participant of rank 0
        also stores torchft's full state (what a recovering peer would receive), commits the step, and writes the
        model checkpoint that eval / sample / compare read. A whole-fleet --resume starts from there."""
        d = self.store.path(step)
        d.mkdir(parents=True, exist_ok=True)
        own = {"user": {"default": manager._user_state_dicts["default"]()}, "bytes_sent": self.bytes_sent}
        self._save_state(d / f"replica_{self.slot}.safetensors", own, step)
        if manager.participating_rank() != 0:
            return
        self._save_state(d / "rank_0.safetensors", manager._manager_state_dict(), step)
        write_json_atomic(d / COMMIT, {"step": step, "world_size": manager.num_participants(), "sync": self.dcfg.sync,
                                       "fault_tolerance": "torchft"})
        _, m, v = self.runner.get_state()
        save_checkpoint(self.run, step, self.runner.fns.names, (model_params, m, v))
        self.store.prune()
        from .loop import checkpoints as model_checkpoints

        model_checkpoints(self.run, keep=self.cfg.keep_checkpoints).prune()

    def restore(self, manager) -> None:
        """A whole-fleet restart (--resume): every replica starts from the committed state."""
        from safetensors import safe_open

        from .ft_transport import from_wire

        steps = [n for n, _ in self.store.entries()]
        if not steps or os.environ.get(ENV_RESUME) != "1":
            return
        def read(path: Path):
            with safe_open(str(path), framework="pt") as f:
                return from_wire({k: f.get_tensor(k) for k in f.keys()}, (f.metadata() or {})["npuport_skeleton"])

        d = self.store.path(steps[-1])
        state = read(d / "rank_0.safetensors")
        own = d / f"replica_{self.slot}.safetensors"
        if own.is_file():  # this replica's own moments; else (it had not written them) the lead's
            mine = read(own)
            state["user"]["default"] = mine["user"]["default"]
            self.bytes_sent = int(mine["bytes_sent"])
        for key, load in manager._load_state_dict_fns.items():
            load(state["user"][key])
        manager.load_state_dict(state["torchft"])
        self.log.truncate(steps[-1])

    # ------------------------------------------------------------ all-reduce

    def run_allreduce(self) -> None:
        runner = self.runner

        def state():
            p, m, v = runner.get_state()
            return {"param": _flat(p), "m": _flat(m), "v": _flat(v)}

        def load(sd):
            runner.set_state(_unflat(sd["param"], self.shapes), _unflat(sd["m"], self.shapes),
                             _unflat(sd["v"], self.shapes), t=int(self._manager_step()))

        manager = self.manager(state, load)
        self._manager_step = manager.current_step
        self.phase = 1
        self.restore(manager)
        self.wait_for_fleet()
        while True:
            if self.finished() is not None:  # the fleet committed its last step (this replica may have been away)
                break
            manager.start_quorum()
            step = manager.current_step() + 1
            if step > self.cfg.steps:
                break
            self.fault.before_step(step, self.pg)
            x, y = self.train_b.get(step, self.rows)
            lr = lr_at(self.cfg, step)
            ts = time.perf_counter()
            loss, grads = runner.grad(x, y)
            buf = torch.cat([_flat(grads), torch.tensor([loss], dtype=torch.float32)])  # the loss rides along
            self.fault.in_allreduce(step)
            manager.allreduce(buf).wait()
            if not manager.should_commit():
                continue  # nobody applies this step; the next quorum runs it again
            self.bytes_sent += (buf.numel() - 1) * 4 if manager.num_participants() > 1 else 0
            runner.apply([t.numpy() for t in _unflat(buf[:-1], self.shapes)], step, lr)
            rec = self.record(step, float(buf[-1]), lr, time.perf_counter() - ts, manager.num_participants())
            self._after_commit([rec], manager, lambda: runner.get_state()[0])
        manager.shutdown(wait=False)

    def _after_commit(self, recs: list[dict], manager, model_params) -> None:
        last = recs[-1]["step"]
        lead = manager.participating_rank() == 0
        if lead and any(r["step"] % self.cfg.eval_every == 0 or r["step"] == self.cfg.steps for r in recs):
            recs[-1].update(self.validate(model_params()))
        for r in recs:
            self.log.append(r)
        every = ckpt_cadence(self.cfg, self.dcfg)
        if any(r["step"] % every == 0 for r in recs) or last == self.cfg.steps:
            self.checkpoint(last, manager, model_params())

    # ------------------------------------------------------------ DiLoCo (torchft.local_sgd)

    def run_diloco(self) -> None:
        from torchft.local_sgd import DiLoCo

        runner, dcfg = self.runner, self.dcfg
        shadow = _Shadow(runner.get_state()[0])
        frags = shadow.fragments(dcfg.fragments)
        self.phase = dcfg.inner_steps // dcfg.fragments  # steps between two (fragment) syncs

        def state():
            p, m, v = runner.get_state()
            return {"param": _flat(p), "m": _flat(m), "v": _flat(v)}

        def load(sd):
            p = _unflat(sd["param"], self.shapes)
            runner.set_state(p, _unflat(sd["m"], self.shapes), _unflat(sd["v"], self.shapes))
            shadow.copy_from(p)

        manager = self.manager(state, load)
        inner = _RunnerStep(shadow.parameters())
        outer = [torch.optim.SGD(f.parameters(), lr=dcfg.outer_lr, momentum=dcfg.outer_momentum,
                                 nesterov=dcfg.outer_momentum > 0) for f in frags]
        with DiLoCo(manager, frags, inner, outer, sync_every=dcfg.inner_steps, pin_memory=False) as dl:
            self.restore(manager)  # θ_global and the outer momentum too (DiLoCo's fragments registered them)
            self.wait_for_fleet()
            if os.environ.get(ENV_JOIN) == "1" and self.finished() is None:
                # A replacement joins at the fleet's next sync without training from its stale init first:
                # one empty inner step at the sync point; DiLoCo's quorum there heals it from a peer.
                dl._local_step = dl._sync_every - 1
                inner.step(lambda: None)
                self._pushed(dl, shadow)
            pending: list[dict] = []
            while True:
                step = manager.current_step() * self.phase + dl._local_step + 1
                if step > self.cfg.steps or self.finished() is not None:
                    break
                self.fault.before_step(step, self.pg)
                x, y = self.train_b.get(step, self.rows)
                lr = lr_at(self.cfg, step)
                before = manager.current_step()
                ts = time.perf_counter()

                def closure(step=step, lr=lr, x=x, y=y):
                    loss = runner.step(step, lr, x, y)
                    shadow.copy_from(runner.get_state()[0])
                    return loss

                loss = inner.step(closure)
                pending.append(self.record(step, loss, lr, time.perf_counter() - ts, 0))
                if dl._local_step != 0:
                    continue
                # a (fragment) sync just ran: committed (the manager stepped) or rolled back by DiLoCo
                self._pushed(dl, shadow)
                if manager.current_step() == before:
                    pending = []  # those steps run again
                    continue
                n = manager.num_participants()
                self.bytes_sent += (sum(p.numel() for p in frags[before % len(frags)].parameters()) * 4 if n > 1 else 0)
                for r in pending:
                    r["participants"], r["bytes_sent"] = n, self.bytes_sent
                self._after_commit(pending, manager, lambda: self._global(dl, frags))
                pending = []
        manager.shutdown(wait=False)

    @staticmethod
    def _global(dl, frags) -> list[torch.Tensor]:
        """θ_global: each fragment as of its last sync (DiLoCo's `original_parameters`), the run's model."""
        return [dl._fragments[i].original_parameters[name] for i, f in enumerate(frags)
                for name, _ in f.named_parameters()]

    def _pushed(self, dl, shadow) -> None:
        """After a sync DiLoCo has written θ_global (or the rollback) into the module: the runner takes it,
        keeping its own AdamW moments (inner state stays local, as in DiLoCo)."""
        _, m, v = self.runner.get_state()
        self.runner.set_state([p.detach().clone() for p in shadow.ps], m, v)

    def main(self) -> None:
        if self.dcfg.sync == "allreduce":
            self.run_allreduce()
        else:
            self.run_diloco()
        p = self.run / "workers" / FINISHED
        if not p.is_file():
            write_json_atomic(p, {"step": self.cfg.steps, "replica": self.slot})
        self.log.close()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    die_with_parent()  # no orphaned fleet: SIGTERM when the launcher dies, whatever killed it
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # gloo on loopback, not the hostname's address
    torch.set_num_threads(1)
    if os.environ.get("NPUPORT_FT_DEBUG") == "1":  # torchft's own narration of quorums, heals and commits
        import logging

        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    Replica(Path(argv[0]), int(argv[1])).main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
