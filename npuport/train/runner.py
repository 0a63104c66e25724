"""Step runners: the same training step on eager PyTorch (the control) and on any runtime that runs graphs.

Every runner holds the training state (params, Adam moments) and offers
    step(t, lr, *batch) -> loss                      the fused step (or grad + update in the split form)
    grad(*batch) -> (loss, grads) / apply(grads, t, lr) the split form, for data-parallel all-reduce
    get_state() / set_state(...)                    torch tensors, for checkpoints and evaluation

Which runner a runtime gets is a capability flag of the runtime (`Runtime.step_runner`, read in train/select.py): the
eager runtime gets EagerRunner, graph runtimes the GraphRunner below, which exports the step graph(s) to standard ONNX once and runs
them through `runtime.open_graph(...)` (sessions are built in the runtime's own file). It keeps two state buffers
and swaps them each step: outputs are written straight into the buffers the next step reads (`run_into`).

A batch is whatever the objective says (LM: x, y; classifier: input_ids, attention_mask, labels, weights). With
several `shapes` (a classifier's length buckets) there is one graph per shape, all reading and writing the same
state: one set of weights, as an inference artifact shares its weights between buckets.
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
from ..runtimes import Graph
from ..spec import TRAIN_PRECISIONS
from .capture import GATHER_LIKE, GATHER_LIKE_ATEN, export_step_onnx, fx_op_types, trace_step
from .step import FORMS, OptimConfig, StepFunctions, eager_optimizer


class StepRunner:
    name = "?"

    def __init__(self, model, opt: OptimConfig, *, batch: int, seq_len: int, form: str = "fused",
                 gather_free: bool = False, workdir: Path | None = None, threads: int | None = None,
                 compiled_dir: Path | None = None, objective=None, slots=None, seq_lens: tuple[int, ...] | None = None,
                 precision: str = "fp32"):
        if form not in FORMS:
            raise ConfigError(f"step form {form!r}: choose one of {', '.join(FORMS)}")
        if precision not in TRAIN_PRECISIONS:
            raise ConfigError(f"training precision {precision!r}: choose one of {', '.join(TRAIN_PRECISIONS)}")
        self.precision = precision
        self.model, self.opt, self.batch, self.seq_len = model, opt, batch, seq_len
        self.seq_lens = tuple(seq_lens or (seq_len,))  # one graph per length (a classifier's buckets)
        self.form, self.gather_free, self.threads = form, gather_free, threads
        self.workdir = Path(workdir) if workdir else None
        self.compiled_dir = Path(compiled_dir) if compiled_dir else self.workdir
        self.fns = StepFunctions(model, opt, gather_free=gather_free, objective=objective, slots=slots)
        self.info: dict = {"backend": self.name, "form": form, "gather_free": gather_free, "precision": precision}

    # subclasses implement these
    def set_state(self, params, m, v, t: int = 0) -> None: ...
    def get_state(self) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]: ...
    def grad(self, *batch) -> tuple[float, list[np.ndarray]]: ...
    def apply(self, grads, t: int, lr: float) -> None: ...
    def fused_step(self, t: int, lr: float, *batch) -> float: ...

    def close(self) -> None:
        """Release runtime sessions (graph runners); eager holds none."""

    def step(self, t: int, lr: float, *batch) -> float:
        if self.form == "fused":
            return self.fused_step(t, lr, *batch)
        loss, grads = self.grad(*batch)
        self.apply(grads, t, lr)
        return loss

    def shape_key(self, batch) -> str:
        """The graph a batch runs on: its sequence length must be one of the compiled ones."""
        t = int(np.shape(batch[0])[-1])
        if t not in self.seq_lens:
            raise ConfigError(f"a batch of length {t}: the step graphs are compiled for {list(self.seq_lens)}")
        return "" if len(self.seq_lens) == 1 else f"_{self.batch}x{t}"

    def params_dict(self) -> dict[str, torch.Tensor]:
        return dict(zip(self.fns.names, self.get_state()[0]))


class EagerRunner(StepRunner):
    """The control: the model in eager PyTorch, `loss.backward()`, `clip_grad_norm_`, `torch.optim.AdamW`."""

    def __init__(self, model, opt, *, name: str, device: str = "cpu", **kw):
        self.name = name
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
        named = dict(model.named_parameters())
        self.params = [named[k] for k in self.fns.names]  # the trained ones; the rest stay as they are
        self.optim = eager_optimizer(model, opt, slots=self.fns.slots)
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

    def _backward(self, *batch) -> float:
        self.optim.zero_grad(set_to_none=True)
        # bf16: autocast runs the matmuls in bf16 and keeps reductions, norms and the loss in fp32; the parameters
        # and their .grad stay fp32, so AdamW below is the fp32 update
        with torch.autocast(self.device.split(":")[0], dtype=torch.bfloat16, enabled=self.precision == "bf16"):
            loss = self.fns.objective.loss(self.model, *[torch.as_tensor(b, device=self.device) for b in batch],
                                           captured=False)
        loss.backward()
        return float(loss.detach())

    def grad(self, *batch):
        loss = self._backward(*batch)
        return loss, [p.grad.cpu().numpy().copy() for p in self.params]

    def apply(self, grads, t, lr):
        for p, g in zip(self.params, grads):
            p.grad = torch.as_tensor(g, device=self.device)
        self._opt_step(lr)

    def _opt_step(self, lr):
        if self.opt.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.params, self.opt.max_grad_norm)
        for g in self.optim.param_groups:
            g["lr"] = lr * g["lr_scale"]
        self.optim.step()

    def fused_step(self, t, lr, *batch):
        loss = self._backward(*batch)
        self._opt_step(lr)
        return loss


def _graph_key(fns: StepFunctions, kind: str, batch: int, seq_len: int) -> str:
    """What a step graph depends on: reusing a file exported for another model or shape would be wrong."""
    h = hashlib.sha256()
    h.update(json.dumps({"kind": kind, "batch": batch, "seq": seq_len, "gather_free": fns.gather_free,
                         "opt": fns.opt.to_json(), "objective": fns.objective.key(),
                         "slots": [(s.name, s.shape, s.decay, s.lr_scale) for s in fns.slots],
                         "frozen": fns.frozen_fingerprint(), "torch": torch.__version__}, sort_keys=True).encode())
    return h.hexdigest()


class GraphRunner(StepRunner):
    """Exports the step graph(s) to ONNX once (a file already exported for the same key is reused: data-parallel
    ranks share one), then runs them on a runtime with double-buffered state."""

    def __init__(self, runtime, model, opt, **kw):
        self.name = runtime.name
        if kw.get("precision", "fp32") != "fp32":
            kw["form"] = "split"  # mixed precision: the gradient graph in bf16, the update its own graph in fp32
        super().__init__(model, opt, **kw)
        if self.workdir is None:
            raise ConfigError(f"the {self.name} runtime needs a work directory for its step graphs")

        kinds = ["fused"] if self.form == "fused" else ["grad", "update"]
        # one graph per (kind, length); the update graph does not depend on the length: one for all
        names = [(k, t) for k in kinds for t in (self.seq_lens if k != "update" else self.seq_lens[:1])]
        self.graphs: dict[str, dict] = {}
        self.executors = {}
        # A runtime that compiles from FX (AOTInductor) gets the traced graph alone: an ONNX export it never reads
        # would cost as long as tracing and lowering together (~30 s per graph for the `tiny` step, measured).
        from_onnx = "onnx" in runtime.compiles_from
        for kind, t in names:
            key = kind + ("" if len(self.seq_lens) == 1 or kind == "update" else f"_{self.batch}x{t}")
            if from_onnx:
                self.graphs[key] = self._export(kind, key, t)
                fx = lambda k=kind, t=t: (trace_step(self.fns, k, self.batch, t), self.fns.example_args(k, self.batch, t))  # noqa: E731
            else:
                self.graphs[key], traced = self._trace(kind, t)
                fx = lambda traced=traced: traced  # noqa: E731
            onnx = self.workdir / self.graphs[key]["file"] if from_onnx else None
            graph = Graph(onnx=onnx, workdir=self.compiled_dir, name=key, fx=fx,
                          precision="fp32" if kind == "update" else self.precision)
            t0 = time.perf_counter()
            self.executors[key] = runtime.open_graph(graph, self.threads)
            self.graphs[key]["open_s"] = round(time.perf_counter() - t0, 2)
            self.graphs[key]["precision"] = graph.precision
            # what the runtime really computes in (OpenVINO stays in f32 where the CPU has no bf16), not what we asked
            ran = getattr(self.executors[key], "execution_precision", None)
            if ran:
                self.graphs[key]["executes_in"] = ran
        self.info["graphs"] = self.graphs
        self.info["runtime"] = " ".join(f"{k} {v}" for k, v in runtime.versions().items()) or runtime.name
        shapes = [s.shape for s in self.fns.slots]
        # state = params + m + v, two copies; `cur` is what the next step reads
        self.cur = [np.zeros(s, np.float32) for s in shapes * 3]
        self.nxt = [np.zeros(s, np.float32) for s in shapes * 3]
        self.grads = [np.zeros(s, np.float32) for s in shapes]
        self.loss = np.zeros((), np.float32)
        named = dict(model.named_parameters())
        self.set_state([named[k].detach() for k in self.fns.names], *[[np.zeros(s, np.float32) for s in shapes]] * 2)
        self.n = self.fns.n

    def _trace(self, kind: str, seq_len: int) -> tuple[dict, tuple]:
        """The step as an ATen graph, and what the graph info says of it (op types, gather-like ops)."""
        t0 = time.perf_counter()
        gm = trace_step(self.fns, kind, self.batch, seq_len)
        ops = fx_op_types(gm)
        info = {"file": None, "format": "fx", "trace_s": round(time.perf_counter() - t0, 2), "op_types": ops,
                "gather_like_ops": sorted(o for o in ops if o in GATHER_LIKE_ATEN)}
        return info, (gm, self.fns.example_args(kind, self.batch, seq_len))

    def _export(self, kind: str, name: str, seq_len: int) -> dict:
        key = _graph_key(self.fns, kind, self.batch, seq_len)
        # The key is in the file name: runs of other models or shapes sharing the directory (ranks, parallel test
        # workers) never replace this graph between the check below and a runtime's reading of it.
        path = self.workdir / f"{name}.{key[:16]}.onnx"
        sidecar = path.with_suffix(".json")
        if path.is_file() and sidecar.is_file():
            info = json.loads(sidecar.read_text())
            if info.get("key") == key and info.get("sha256") == hashlib.sha256(path.read_bytes()).hexdigest():
                return {**info, "reused": True}
        t0 = time.perf_counter()
        ops = export_step_onnx(self.fns, kind, self.batch, seq_len, path)
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

    def fused_step(self, t, lr, *batch):
        step, lr_ = self._scalars(t, lr)
        self.executors["fused" + self.shape_key(batch)].run_into([*self.cur, step, lr_, *_feeds(batch)],
                                                                 [self.loss, *self.nxt])
        self.cur, self.nxt = self.nxt, self.cur
        return float(self.loss)

    def grad(self, *batch):
        self.executors["grad" + self.shape_key(batch)].run_into([*self.cur[: len(self.grads)], *_feeds(batch)],
                                                                [self.loss, *self.grads])
        return float(self.loss), self.grads

    def apply(self, grads, t, lr):
        step, lr_ = self._scalars(t, lr)
        self.executors["update"].run_into([*self.cur, *grads, step, lr_], list(self.nxt))
        self.cur, self.nxt = self.nxt, self.cur

    def close(self) -> None:
        """Release the runtime sessions now, before the state buffers they write into (a runner sits in reference
        cycles, so otherwise the cyclic collector frees them later, in whatever order and at whatever moment)."""
        for ex in self.executors.values():
            ex.close()
        self.executors.clear()


def _feeds(batch) -> list[np.ndarray]:
    """Batch tensors as the graph takes them: integers as int64, anything else as fp32."""
    out = []
    for a in batch:
        a = a.numpy() if isinstance(a, torch.Tensor) else np.asarray(a)
        out.append(np.ascontiguousarray(a, dtype=np.int64 if np.issubdtype(a.dtype, np.integer) else np.float32))
    return out
