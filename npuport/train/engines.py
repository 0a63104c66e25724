"""Step runners: the same training step on eager PyTorch (the control) and on static-graph runtimes.

Every runner holds the training state (params, Adam moments) and offers
    step(t, lr, x, y) -> loss                        the fused step (or grad + update in the split form)
    grad(x, y) -> (loss, grads) / apply(grads, t, lr) the split form, for data-parallel all-reduce
    get_state() / set_state(...)                    torch tensors, for checkpoints and evaluation

Graph runners keep two state buffers and swap them each step: outputs are written straight into the buffers
the next step reads (ONNX Runtime IOBinding, OpenVINO output tensors), so no state is copied between steps.
"""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path

import numpy as np
import torch

from ..errors import BackendUnavailable, ConfigError
from ..registry import Registry
from .step import FORMS, GATHER_LIKE, OptimConfig, StepFunctions, eager_optimizer, export_step_onnx

log = logging.getLogger(__name__)
TRAIN_BACKENDS: Registry[type] = Registry("training backend")


def register(name: str):
    def deco(cls):
        cls.name = name
        TRAIN_BACKENDS.register(name, cls)
        return cls

    return deco


class StepRunner:
    name = "?"

    def __init__(self, model, opt: OptimConfig, *, batch: int, seq_len: int, form: str = "fused",
                 gather_free: bool = False, workdir: Path | None = None, threads: int | None = None):
        if form not in FORMS:
            raise ConfigError(f"step form {form!r}: choose one of {', '.join(FORMS)}")
        self.model, self.opt, self.batch, self.seq_len = model, opt, batch, seq_len
        self.form, self.gather_free, self.threads = form, gather_free, threads
        self.workdir = Path(workdir) if workdir else None
        self.fns = StepFunctions(model, opt, gather_free=gather_free)
        self.info: dict = {"backend": self.name, "form": form, "gather_free": gather_free}

    # subclasses implement these
    def set_state(self, params, m, v) -> None: ...
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


@register("eager")
class EagerRunner(StepRunner):
    """The control: the model in eager PyTorch, `loss.backward()`, `clip_grad_norm_`, `torch.optim.AdamW`."""

    device = "cpu"

    def __init__(self, model, opt, **kw):
        super().__init__(model, opt, **kw)
        if self.threads:
            torch.set_num_threads(int(self.threads))
        if self.device != "cpu":
            if not torch.cuda.is_available():
                raise BackendUnavailable(f"the {self.name} backend needs a CUDA GPU; none is visible to torch")
            # fp32 means fp32: no TF32 in the control run
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            model.to(self.device)
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


@register("eager-cuda")
class EagerCudaRunner(EagerRunner):
    """The report's control: eager PyTorch on a GPU (fp32, TF32 off); state moves to the host for checkpoints."""

    device = "cuda"


class GraphRunner(StepRunner):
    """Exports the step graph(s) to ONNX, then runs them on a runtime with double-buffered state."""

    def __init__(self, model, opt, **kw):
        super().__init__(model, opt, **kw)
        if self.workdir is None:
            raise ConfigError(f"the {self.name} backend needs a work directory for its step graphs")
        kinds = ["fused"] if self.form == "fused" else ["grad", "update"]
        self.graphs: dict[str, dict] = {}
        for kind in kinds:
            path = self.workdir / f"{kind}.onnx"
            t0 = time.perf_counter()
            ops = export_step_onnx(self.fns, kind, self.batch, self.seq_len, path)
            self.graphs[kind] = {
                "file": path.name, "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                "export_s": round(time.perf_counter() - t0, 2), "op_types": ops,
                "gather_like_ops": sorted(o for o in ops if o in GATHER_LIKE),
            }
        self.info["graphs"] = self.graphs
        n = self.fns.n
        shapes = [s.shape for s in self.fns.slots]
        # state = params + m + v, two copies; `cur` is what the next step reads
        self.cur = [np.zeros(s, np.float32) for s in shapes * 3]
        self.nxt = [np.zeros(s, np.float32) for s in shapes * 3]
        self.grads = [np.zeros(s, np.float32) for s in shapes]
        self.loss = np.zeros((), np.float32)
        self.set_state([p.detach() for p in model.parameters()], *[[np.zeros(s, np.float32) for s in shapes]] * 2)
        self.n = n
        self._open()

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
        self._run("fused", [*self.cur, step, lr_, _i64(x), _i64(y)], [self.loss, *self.nxt])
        self.cur, self.nxt = self.nxt, self.cur
        return float(self.loss)

    def grad(self, x, y):
        n = len(self.grads)
        self._run("grad", [*self.cur[:n], _i64(x), _i64(y)], [self.loss, *self.grads])
        return float(self.loss), self.grads

    def apply(self, grads, t, lr):
        step, lr_ = self._scalars(t, lr)
        self._run("update", [*self.cur, *grads, step, lr_], list(self.nxt))
        self.cur, self.nxt = self.nxt, self.cur

    def _open(self): ...
    def _run(self, kind: str, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None: ...


def _i64(a) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(a, dtype=np.int64))


@register("onnxruntime")
class OrtRunner(GraphRunner):
    def _open(self):
        try:
            import onnxruntime as ort
        except ImportError as e:
            raise BackendUnavailable("onnxruntime is not installed: pip install onnxruntime") from e
        so = ort.SessionOptions()
        so.log_severity_level = 3  # CastLike constant-folding notices are harmless and noisy
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        if self.threads:
            so.intra_op_num_threads = int(self.threads)
            so.inter_op_num_threads = 1
        self.sessions = {k: ort.InferenceSession(str(self.workdir / g["file"]), so, providers=["CPUExecutionProvider"])
                         for k, g in self.graphs.items()}
        self.names = {k: ([i.name for i in s.get_inputs()], [o.name for o in s.get_outputs()])
                      for k, s in self.sessions.items()}
        self.info["runtime"] = f"onnxruntime {ort.__version__} CPUExecutionProvider"
        self._ort = ort

    def _run(self, kind, inputs, outputs):
        sess = self.sessions[kind]
        ins, outs = self.names[kind]
        b = sess.io_binding()
        for name, a in zip(ins, inputs):
            b.bind_input(name, "cpu", 0, a.dtype, list(a.shape), a.ctypes.data)
        for name, a in zip(outs, outputs):  # ORT writes into our numpy buffers: no copy back
            b.bind_output(name, "cpu", 0, a.dtype, list(a.shape), a.ctypes.data)
        sess.run_with_iobinding(b)


@register("openvino")
class OpenVinoRunner(GraphRunner):
    """fp32 pinned: OpenVINO's CPU plugin would otherwise pick bf16 on AVX512-BF16 machines."""

    def _open(self):
        try:
            import openvino as ov
        except ImportError as e:
            raise BackendUnavailable("openvino is not installed: pip install openvino") from e
        core = ov.Core()
        cfg = {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"}
        if self.threads:
            cfg["INFERENCE_NUM_THREADS"] = int(self.threads)
        self.requests = {}
        for k, g in self.graphs.items():
            cm = core.compile_model(core.read_model(str(self.workdir / g["file"])), "CPU", cfg)
            self.requests[k] = cm.create_infer_request()
        self.info["runtime"] = f"openvino {ov.__version__} CPU f32"
        self._ov = ov

    def _run(self, kind, inputs, outputs):
        ov, req = self._ov, self.requests[kind]
        for i, a in enumerate(inputs):
            req.set_input_tensor(i, ov.Tensor(a, shared_memory=True))
        for i, a in enumerate(outputs):
            req.set_output_tensor(i, ov.Tensor(a, shared_memory=True))
        req.infer()


@register("inductor")
class InductorRunner(GraphRunner):
    """AOTInductor: the same traced step, compiled ahead of time to a .pt2 package (no ONNX in between).

    It shares the ONNX export with the other graph runners only for the op list in the manifest."""

    def _open(self):
        from torch._inductor import aoti_compile_and_package, aoti_load_package

        from .step import trace_step

        if self.threads:
            torch.set_num_threads(int(self.threads))
        self.fns_call = {}
        for k in self.graphs:
            gm = trace_step(self.fns, k, self.batch, self.seq_len)
            args = self.fns.example_args(k, self.batch, self.seq_len)
            t0 = time.perf_counter()
            ep = torch.export.export(gm, args, strict=False)
            pkg = aoti_compile_and_package(ep, package_path=str(self.workdir / f"{k}.pt2"))
            self.graphs[k]["aoti_compile_s"] = round(time.perf_counter() - t0, 1)
            self.fns_call[k] = aoti_load_package(pkg)
        self.info["runtime"] = f"AOTInductor (torch {torch.__version__})"

    def _run(self, kind, inputs, outputs):
        res = self.fns_call[kind](*[torch.from_numpy(a) for a in inputs])
        for dst, src in zip(outputs, res):
            np.copyto(dst, src.numpy())  # AOTI allocates its own outputs; one copy per state tensor
