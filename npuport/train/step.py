"""The training step as a pure function of tensors (its capture as a standard-ONNX graph: train/capture.py).

    fused:  (params…, m…, v…, step, lr, x, y) -> (loss, params'…, m'…, v'…)
    split:  grad:   (params…, x, y) -> (loss, grads…)
            update: (params…, m…, v…, grads…, step, lr) -> (params'…, m'…, v'…)

The split form exists for data-parallel training: gradients are all-reduced between the two graphs. Global-norm
clipping sits in the update graph for the same reason (it must see the averaged gradient).

All optimizer state exists before step 0 (m = v = 0), `step` (1-based, fp32) and `lr` are fed from the host
(warmup + cosine is computed there), so one graph serves every step.

AdamW mirrors `torch.optim.AdamW` (single-tensor path, non-capturable) op for op:
    p *= 1 - lr*wd;  m = lerp(m, g, 1-b1);  v = v*b2 + (1-b2)*g*g
    p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
and clipping mirrors `torch.nn.utils.clip_grad_norm_`: g *= min(1, max_norm / (||g||_2 + 1e-6)).
torch computes the scalar coefficients in float64 on the host; the graph computes them in fp32 (NPUs have no
fp64), which moves an update by at most ~1e-7 relative.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn

from ..errors import ConfigError
from ..models.lm import cross_entropy
from .options import FORMS  # noqa: F401 - re-exported


@dataclass(frozen=True, kw_only=True)
class OptimConfig:
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.1
    max_grad_norm: float = 1.0  # <= 0 turns clipping off

    def __post_init__(self):
        if not (0.0 <= self.beta1 < 1.0 and 0.0 <= self.beta2 < 1.0):
            raise ConfigError(f"betas ({self.beta1}, {self.beta2}) must lie in [0, 1)")
        if self.eps <= 0 or self.weight_decay < 0:
            raise ConfigError(f"eps={self.eps} must be > 0 and weight_decay={self.weight_decay} >= 0")

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ParamSlot:
    name: str
    shape: tuple[int, ...]
    decay: bool  # weight decay on matrices only (embeddings, projections); never on norm gains
    lr_scale: float = 1.0  # this parameter's lr / the host's lr (a classifier head trained at its own --head-lr)


def param_slots(model: nn.Module) -> list[ParamSlot]:
    return [ParamSlot(n, tuple(p.shape), p.ndim >= 2) for n, p in model.named_parameters()]


def eager_optimizer(model: nn.Module, opt: OptimConfig, lr: float = 0.0,
                    slots: list[ParamSlot] | None = None) -> torch.optim.AdamW:
    """The reference optimizer the graph mirrors: one group per (decay, lr scale) over the trained parameters
    (`slots`; default every parameter, decay on matrices). A group's lr is the host's lr times its `lr_scale`."""
    slots = slots if slots is not None else param_slots(model)
    named = dict(model.named_parameters())
    groups: dict[tuple[bool, float], list] = {}
    for s in slots:
        groups.setdefault((s.decay, s.lr_scale), []).append(named[s.name])
    groups_ = [{"params": ps, "weight_decay": opt.weight_decay if decay else 0.0, "lr_scale": scale}
               for (decay, scale), ps in sorted(groups.items(), key=lambda kv: (not kv[0][0], kv[0][1]))]
    # foreach=False: the single-tensor path, whose per-op order the graph reproduces.
    return torch.optim.AdamW(groups_, lr=lr, betas=(opt.beta1, opt.beta2), eps=opt.eps, foreach=False)


def clip_grads(grads: list[torch.Tensor], max_norm: float) -> list[torch.Tensor]:
    if max_norm <= 0:
        return list(grads)
    norms = torch.stack([g.norm(2) for g in grads])
    total = norms.norm(2)
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    return [g * coef for g in grads]


def adamw_update(params, ms, vs, grads, step, lr, slots: list[ParamSlot], opt: OptimConfig):
    """One AdamW step on lists of tensors; `step` (1-based) and `lr` are 0-d fp32 tensors."""
    grads = clip_grads(grads, opt.max_grad_norm)
    bc1 = 1.0 - torch.pow(torch.tensor(opt.beta1, dtype=step.dtype), step)
    bc2_sqrt = torch.sqrt(1.0 - torch.pow(torch.tensor(opt.beta2, dtype=step.dtype), step))
    step_size = lr / bc1
    new_p, new_m, new_v = [], [], []
    for p, m, v, g, s in zip(params, ms, vs, grads, slots):
        lr_s, size = (lr, step_size) if s.lr_scale == 1.0 else (lr * s.lr_scale, lr * s.lr_scale / bc1)
        if s.decay and opt.weight_decay:
            p = p * (1.0 - lr_s * opt.weight_decay)
        m = m + (1.0 - opt.beta1) * (g - m)  # lerp(m, g, 1-b1) for weight < 0.5
        v = v * opt.beta2 + (1.0 - opt.beta2) * g * g
        denom = torch.sqrt(v) / bc2_sqrt + opt.eps
        p = p - size * m / denom
        new_p.append(p)
        new_m.append(m)
        new_v.append(v)
    return new_p, new_m, new_v


class LMObjective:
    """Next-token cross-entropy of a causal LM; batch (x, y), both (B, T) int64."""

    batch_names = ("x", "y")

    def __init__(self, gather_free: bool = False):
        self.gather_free = gather_free

    def key(self) -> dict:
        return {"objective": "lm", "gather_free": self.gather_free}

    def example_batch(self, batch: int, seq_len: int) -> tuple:
        x = torch.zeros(batch, seq_len, dtype=torch.long)
        return x, x.clone()

    def loss(self, forward, x, y, captured: bool = True) -> torch.Tensor:
        if not captured:  # the eager reference: the model as users call it
            return cross_entropy(forward(x), y)
        return cross_entropy(forward(x, gather_free=self.gather_free, rope_matmul=True), y, self.gather_free)


class ClassifierObjective:
    """Sequence classification (the detector): batch (input_ids, attention_mask (B, T) int64, labels (B,) int64,
    weights (B,) fp32). Loss = sum(w * CE) / sum(w): a bucket's last, short batch is filled up to the graph's static
    batch size with rows of weight 0, which then contribute exactly nothing (for a full batch it is the mean CE)."""

    batch_names = ("input_ids", "attention_mask", "labels", "weights")

    def __init__(self, num_labels: int, gather_free: bool = False):
        self.num_labels, self.gather_free = num_labels, gather_free

    def key(self) -> dict:
        return {"objective": "classifier", "labels": self.num_labels, "gather_free": self.gather_free}

    def example_batch(self, batch: int, seq_len: int) -> tuple:
        ids = torch.zeros(batch, seq_len, dtype=torch.long)
        return ids, torch.ones_like(ids), torch.zeros(batch, dtype=torch.long), torch.ones(batch)

    def loss(self, forward, input_ids, attention_mask, labels, weights, captured: bool = True) -> torch.Tensor:
        from ..models.lm import one_hot

        # Written out rather than F.cross_entropy: its nll_loss lowers to ONNX with a faked total_weight (see
        # models.lm.cross_entropy), and the one-hot pick is an Equal + Mul, no Gather.
        logp = forward(input_ids, attention_mask).float().log_softmax(dim=-1)
        picked = (logp * one_hot(labels, self.num_labels, logp.dtype)).sum(-1)
        return -(picked * weights).sum() / weights.sum().clamp(min=1e-12)


class StepFunctions:
    """The pure step functions for one model, objective, optimizer config and graph flavour.

    `slots` are the trained parameters (default: all, decay on matrices); any other parameter is frozen and, like
    the buffers, becomes a constant of the graph."""

    def __init__(self, model: nn.Module, opt: OptimConfig, *, gather_free: bool = False, objective=None,
                 slots: list[ParamSlot] | None = None):
        self.model = model
        self.opt = opt
        self.gather_free = gather_free
        self.objective = objective or LMObjective(gather_free)
        self.slots = slots if slots is not None else param_slots(model)
        self.names = [s.name for s in self.slots]
        trained = set(self.names)
        self.buffers = {**dict(model.named_buffers()),
                        **{n: p.detach() for n, p in model.named_parameters() if n not in trained}}
        # a classifier's gather-free flavour (its objective's flag) swaps the embedding lookup for a one-hot MatMul
        # and slice gradients for Pads while tracing (the LM model has its own flag for it)
        self.one_hot_embedding = bool(getattr(self.objective, "gather_free", False)) and not isinstance(
            self.objective, LMObjective)
        self.gather_free = gather_free or self.one_hot_embedding

    @property
    def n(self) -> int:
        return len(self.slots)

    @property
    def n_batch(self) -> int:
        return len(self.objective.batch_names)

    def frozen_fingerprint(self) -> str:
        """What the graph bakes in besides its inputs: a graph exported with other frozen weights is another graph."""
        import hashlib

        h = hashlib.sha256()
        for k in sorted(self.buffers):
            t = self.buffers[k].detach().contiguous().cpu()
            h.update(k.encode() + str(tuple(t.shape)).encode() + str(t.dtype).encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        return h.hexdigest()

    def loss_of(self, params: dict, *batch: torch.Tensor) -> torch.Tensor:
        def forward(*args, **kw):
            return torch.func.functional_call(self.model, ({**params, **self.buffers},), args, kw)

        return self.objective.loss(forward, *batch)

    def grad(self, *args):
        """(params…, *batch) -> (loss, grads…)"""
        params, batch = args[: self.n], args[self.n :]
        grads, loss = torch.func.grad_and_value(self.loss_of)(dict(zip(self.names, params)), *batch)
        return (loss, *[grads[k] for k in self.names])

    def grad_scaled(self, *args):
        """(params…, scale, *batch) -> (loss, grads of scale·loss…): the gradient graph for reduced-precision
        hardware, where unscaled gradients of a mean loss underflow fp16 (dynamic loss scaling, as on GPUs)."""
        params, scale, batch = args[: self.n], args[self.n], args[self.n + 1 :]

        def scaled(p, *b):
            loss = self.loss_of(p, *b)
            return loss * scale, loss  # the loss itself rides along unscaled: scale·loss may not fit in fp16

        grads, (_, loss) = torch.func.grad_and_value(scaled, has_aux=True)(dict(zip(self.names, params)), *batch)
        return (loss, *[grads[k] for k in self.names])

    def update(self, *args):
        """(params…, m…, v…, grads…, step, lr) -> (params'…, m'…, v'…)"""
        n = self.n
        p, m, v, g = args[:n], args[n : 2 * n], args[2 * n : 3 * n], args[3 * n : 4 * n]
        step, lr = args[4 * n], args[4 * n + 1]
        new_p, new_m, new_v = adamw_update(list(p), list(m), list(v), list(g), step, lr, self.slots, self.opt)
        return (*new_p, *new_m, *new_v)

    def fused(self, *args):
        """(params…, m…, v…, step, lr, *batch) -> (loss, params'…, m'…, v'…)"""
        n = self.n
        p, m, v = args[:n], args[n : 2 * n], args[2 * n : 3 * n]
        step, lr, batch = args[3 * n], args[3 * n + 1], args[3 * n + 2 :]
        loss, *grads = self.grad(*p, *batch)
        return (loss, *self.update(*p, *m, *v, *grads, step, lr))

    # ---- example inputs and I/O names (the graph's signature, also written to the manifest) ----
    def io_names(self, kind: str) -> tuple[list[str], list[str]]:
        P = [f"param.{k}" for k in self.names]
        M = [f"m.{k}" for k in self.names]
        V = [f"v.{k}" for k in self.names]
        G = [f"grad.{k}" for k in self.names]
        B = list(self.objective.batch_names)
        out = lambda xs: [s.replace(".", "_out.", 1) for s in xs]  # noqa: E731
        if kind == "fused":
            return P + M + V + ["step", "lr", *B], ["loss", *out(P), *out(M), *out(V)]
        if kind == "grad":
            return P + B, ["loss", *G]
        if kind == "grad_scaled":
            return P + ["scale", *B], ["loss", *G]
        if kind == "update":
            return P + M + V + G + ["step", "lr"], [*out(P), *out(M), *out(V)]
        raise ConfigError(f"unknown graph kind {kind!r}; known: fused, grad, grad_scaled, update")

    def example_args(self, kind: str, batch: int, seq_len: int) -> tuple:
        # Every argument a distinct tensor: make_fx maps tensors to graph inputs by identity, so passing one
        # zeros tensor as both m and v would wire both inputs to one placeholder.
        named = dict(self.model.named_parameters())
        params = [named[k].detach().clone() for k in self.names]
        zeros = lambda: [torch.zeros_like(p) for p in params]  # noqa: E731
        b = self.objective.example_batch(batch, seq_len)
        scalars = [torch.tensor(1.0), torch.tensor(1e-3)]
        if kind == "fused":
            return (*params, *zeros(), *zeros(), *scalars, *b)
        if kind == "grad":
            return (*params, *b)
        if kind == "grad_scaled":
            return (*params, torch.tensor(1024.0), *b)
        if kind == "update":
            return (*params, *zeros(), *zeros(), *zeros(), *scalars)
        raise ConfigError(f"unknown graph kind {kind!r}; known: fused, grad, grad_scaled, update")

    def fn(self, kind: str):
        return {"fused": self.fused, "grad": self.grad, "grad_scaled": self.grad_scaled, "update": self.update}[kind]
