"""Step runners: the same training step on eager PyTorch (the control) and on any runtime that runs graphs.

Every runner holds the training state (params, Adam moments) and offers
    step(t, lr, x, y) -> loss                        the fused step (or grad + update in the split form)
    grad(x, y) -> (loss, grads) / apply(grads, t, lr) the split form, for data-parallel all-reduce
    get_state() / set_state(...)                    torch tensors, for checkpoints and evaluation

Which runner a runtime uses is the runtime's business (`Runtime.step_runner`): the eager runtime returns
EagerRunner, graph runtimes the GraphRunner below, which exports the step graph(s) to standard ONNX once and runs
them through `runtime.open_graph(...)` (sessions are built in the runtime's own file). It keeps two state buffers
and swaps them each step: outputs are written straight into the buffers the next step reads (`run_into`).
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import numpy as np
import torch

from ..errors import BackendUnavailable, ConfigError
from ..fsio import write_json_atomic
from .step import FORMS, GATHER_LIKE, OptimConfig, StepFunctions, eager_optimizer, export_step_onnx, trace_step


def open_step_runner(runtime: str, model, opt: OptimConfig, **kw) -> "StepRunner":
    """The runner for `runtime` (a registered runtime name): ask the registry, never a second list."""
    from ..runtimes import get_runtime

    return get_runtime(runtime).step_runner(model, opt, **kw)


def training_runtimes() -> list[str]:
    from ..runtimes import runtime_names

    return runtime_names(trains=True)


class StepRunner:
    name = "?"

    def __init__(self, model, opt: OptimConfig, *, batch: int, seq_len: int, form: str = "fused",
                 gather_free: bool = False, workdir: Path | None = None, threads: int | None = None,
                 compiled_dir: Path | None = None):
        if form not in FORMS:
            raise ConfigError(f"step form {form!r}: choose one of {', '.join(FORMS)}")
        self.model, self.opt, self.batch, self.seq_len = model, opt, batch, seq_len
        self.form, self.gather_free, self.threads = form, gather_free, threads
        self.workdir = Path(workdir) if workdir else None
        self.compiled_dir = Path(compiled_dir) if compiled_dir else self.workdir
        self.fns = StepFunctions(model, opt, gather_free=gather_free)
        self.info: dict = {"backend": self.name, "form": form, "gather_free": gather_free}

    # subclasses implement these
    def set_state(self, params, m, v, t: int = 0) -> None: ...
    def get_state(self) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]: ...
    def grad(self, x, y) -> tuple[float, list[np.ndarray]]: ...
    def apply(self, grads, t: int, lr: float) -> None: ...
    def fused_step(self, t: int, lr: float, x, y) -> float: ...

    def step(self, t: int, lr: float, x, y) -> float:
        if self.form == "fused":
            return self.fused_step(t, lr, x, y)
        loss, grads = self.grad(x, y)
        self.apply(grads, t, lr)
        return loss

    def params_dict(self) -> dict[str, torch.Tensor]:
        return dict(zip(self.fns.names, self.get_state()[0]))


class EagerRunner(StepRunner):
    """The control: the model in eager PyTorch, `loss.backward()`, `clip_grad_norm_`, `torch.optim.AdamW`."""

    def __init__(self, model, opt, *, device: str = "cpu", **kw):
        self.name = "eager" if device == "cpu" else f"eager-{device}"
        super().__init__(model, opt, **kw)
        self.device = device
        if self.threads:
            torch.set_num_threads(int(self.threads))
        if device != "cpu":
            if not torch.cuda.is_available():
                raise BackendUnavailable(f"the {self.name} runtime needs a CUDA GPU; none is visible to torch")
            # fp32 means fp32: no TF32 in the control run
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            model.to(device)
            self.info["device"] = torch.cuda.get_device_name()
        self.params = list(model.parameters())
        self.optim = eager_optimizer(model, opt)
        self.info["graph"] = "none (eager PyTorch reference)"

    def set_state(self, params, m, v, t: int = 0):
        dev = self.device
        with torch.no_grad():
            for p, src in zip(self.params, params):
                p.copy_(torch.as_tensor(src))
        self.optim.state.clear()
        if t > 0:
            for p, mi, vi in zip(self.params, m, v):
                self.optim.state[p] = {"step": torch.tensor(float(t)), "exp_avg": torch.as_tensor(mi).to(dev, copy=True),
                                       "exp_avg_sq": torch.as_tensor(vi).to(dev, copy=True)}

    def get_state(self):
        ps = [p.detach().to("cpu", copy=True) for p in self.params]
        st = [self.optim.state.get(p, {}) for p in self.params]
        m = [s["exp_avg"].to("cpu", copy=True) if "exp_avg" in s else torch.zeros_like(p) for s, p in zip(st, ps)]
        v = [s["exp_avg_sq"].to("cpu", copy=True) if "exp_avg_sq" in s else torch.zeros_like(p) for s, p in zip(st, ps)]
        return ps, m, v

    def _backward(self, x, y) -> float:
        from ..models.lm import cross_entropy

        self.optim.zero_grad(set_to_none=True)
        loss = cross_entropy(self.model(torch.as_tensor(x, device=self.device)), torch.as_tensor(y, device=self.device))
        loss.backward()
        return float(loss.detach())

    def grad(self, x, y):
        loss = self._backward(x, y)
        return loss, [p.grad.cpu().numpy().copy() for p in self.params]

    def apply(self, grads, t, lr):
        for p, g in zip(self.params, grads):
            p.grad = torch.as_tensor(g, device=self.device)
        self._opt_step(lr)

    def _opt_step(self, lr):
        if self.opt.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.params, self.opt.max_grad_norm)
        for g in self.optim.param_groups:
            g["lr"] = lr
        self.optim.step()

    def fused_step(self, t, lr, x, y):
        loss = self._backward(x, y)
        self._opt_step(lr)
        return loss


def _graph_key(fns: StepFunctions, kind: str, batch: int, seq_len: int) -> str:
    """What a step graph depends on: reusing a file exported for another model or shape would be wrong."""
    h = hashlib.sha256()
    h.update(json.dumps({"kind": kind, "batch": batch, "seq": seq_len, "gather_free": fns.gather_free,
                         "opt": fns.opt.to_json(), "slots": [(s.name, s.shape, s.decay) for s in fns.slots],
                         "torch": torch.__version__}, sort_keys=True).encode())
    return h.hexdigest()


class GraphRunner(StepRunner):
    """Exports the step graph(s) to ONNX once (a file already exported for the same key is reused: data-parallel
    ranks share one), then runs them on a runtime with double-buffered state."""

    def __init__(self, runtime, model, opt, **kw):
        self.name = runtime.name
        super().__init__(model, opt, **kw)
        if self.workdir is None:
            raise ConfigError(f"the {self.name} runtime needs a work directory for its step graphs")
        from ..runtimes import Graph

        kinds = ["fused"] if self.form == "fused" else ["grad", "update"]
        self.graphs: dict[str, dict] = {}
        self.executors = {}
        for kind in kinds:
            self.graphs[kind] = self._export(kind)
        for kind in kinds:
            graph = Graph(onnx=self.workdir / self.graphs[kind]["file"], workdir=self.compiled_dir, name=kind,
                          fx=lambda k=kind: (trace_step(self.fns, k, self.batch, self.seq_len),
                                             self.fns.example_args(k, self.batch, self.seq_len)))
            t0 = time.perf_counter()
            self.executors[kind] = runtime.open_graph(graph, self.threads)
            self.graphs[kind]["open_s"] = round(time.perf_counter() - t0, 2)
        self.info["graphs"] = self.graphs
        self.info["runtime"] = " ".join(f"{k} {v}" for k, v in runtime.versions().items()) or runtime.name
        shapes = [s.shape for s in self.fns.slots]
        # state = params + m + v, two copies; `cur` is what the next step reads
        self.cur = [np.zeros(s, np.float32) for s in shapes * 3]
        self.nxt = [np.zeros(s, np.float32) for s in shapes * 3]
        self.grads = [np.zeros(s, np.float32) for s in shapes]
        self.loss = np.zeros((), np.float32)
        self.set_state([p.detach() for p in model.parameters()], *[[np.zeros(s, np.float32) for s in shapes]] * 2)
        self.n = self.fns.n

    def _export(self, kind: str) -> dict:
        path = self.workdir / f"{kind}.onnx"
        sidecar = self.workdir / f"{kind}.json"
        key = _graph_key(self.fns, kind, self.batch, self.seq_len)
        if path.is_file() and sidecar.is_file():
            info = json.loads(sidecar.read_text())
            if info.get("key") == key and info.get("sha256") == hashlib.sha256(path.read_bytes()).hexdigest():
                return {**info, "reused": True}
        t0 = time.perf_counter()
        ops = export_step_onnx(self.fns, kind, self.batch, self.seq_len, path)
        info = {"file": path.name, "sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "key": key,
                "export_s": round(time.perf_counter() - t0, 2), "op_types": ops,
                "gather_like_ops": sorted(o for o in ops if o in GATHER_LIKE)}
        write_json_atomic(sidecar, info)
        return info

    def set_state(self, params, m, v, t: int = 0):
        for dst, src in zip(self.cur, [*params, *m, *v]):
            np.copyto(dst, np.asarray(torch.as_tensor(src).detach().numpy(), dtype=np.float32))

    def get_state(self):
        n = len(self.cur) // 3
        t = [torch.from_numpy(a.copy()) for a in self.cur]
        return t[:n], t[n : 2 * n], t[2 * n :]

    def _scalars(self, t, lr):
        return np.asarray(float(t), np.float32), np.asarray(float(lr), np.float32)

    def fused_step(self, t, lr, x, y):
        step, lr_ = self._scalars(t, lr)
        self.executors["fused"].run_into([*self.cur, step, lr_, _i64(x), _i64(y)], [self.loss, *self.nxt])
        self.cur, self.nxt = self.nxt, self.cur
        return float(self.loss)

    def grad(self, x, y):
        self.executors["grad"].run_into([*self.cur[: len(self.grads)], _i64(x), _i64(y)], [self.loss, *self.grads])
        return float(self.loss), self.grads

    def apply(self, grads, t, lr):
        step, lr_ = self._scalars(t, lr)
        self.executors["update"].run_into([*self.cur, *grads, step, lr_], list(self.nxt))
        self.cur, self.nxt = self.nxt, self.cur


def _i64(a) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(a, dtype=np.int64))
