"""Backprop on an fp16 NPU, the way GPUs train in mixed precision (the second field report, reproduced).

The gradient graph runs on the accelerator in fp16; the AdamW update runs on the host in fp32 on fp32 master weights.
Measured on the HTP simulator before this was written: a whole AdamW step in fp16 moved parameters 0.49 off after
one step (m / sqrt(v) at fp16 resolution), while the fp16 loss matched to 2e-5 — so only the gradient goes to the NPU.
Gradients of a mean loss underflow fp16, hence dynamic loss scaling: the graph differentiates scale·loss, the host
unscales, and a step whose gradients overflow (the HTP saturates at fp16's 65504 rather than returning inf) is skipped and the scale halved (it doubles after GROWTH_INTERVAL
clean steps, up to MAX_SCALE), torch.amp.GradScaler's policy with a shorter interval for short runs.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from ..errors import ConfigError
from .capture import export_step_onnx
from .runner import StepRunner, _feeds, _graph_key
from .step import adamw_update

INIT_SCALE = 2.0**10
GROWTH_INTERVAL = 50
MIN_SCALE = 1.0
# The backward pass starts from the scale itself, in fp16 on the accelerator: it must stay below fp16's 65504
# (GPUs hold the scale in fp32; here the whole graph is fp16). Measured on `tiny`: the gradient's relative error is
# 3.1% for scales 1 to 2^13 (fp16 rounding, not underflow) and 5.8% at 2^15, where intermediates near overflow.
MAX_SCALE = 2.0**13
FP16_MAX = 65504.0


class MixedPrecisionRunner(StepRunner):
    """grad (fp16, on the accelerator, scaled) -> unscale + overflow check -> AdamW (fp32, host)."""

    def __init__(self, runtime, model, opt, *, open_graph, **kw):
        self.name = runtime.name
        kw["form"] = "split"  # the update is not an accelerator graph here
        super().__init__(model, opt, **kw)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.sessions, graphs = {}, {}
        for t in self.seq_lens:  # one gradient graph per length (a classifier's buckets), one set of weights
            name = "grad_scaled" + ("" if len(self.seq_lens) == 1 else f"_{self.batch}x{t}")
            path = self.workdir / f"{name}.onnx"
            t0 = time.perf_counter()
            ops = export_step_onnx(self.fns, "grad_scaled", self.batch, t, path)
            export_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            self.sessions[name], host_ops = open_graph(path)
            graphs[name] = {"file": path.name, "op_types": ops, "export_s": round(export_s, 2),
                            "open_s": round(time.perf_counter() - t0, 2), "host_ops": host_ops,
                            "key": _graph_key(self.fns, "grad_scaled", self.batch, t)}
        self.info.update(graphs=graphs, runtime=" ".join(f"{k} {v}" for k, v in runtime.versions().items()),
                         precision="fp16 gradients on the accelerator, fp32 master weights + AdamW on the host")
        self.scale, self.good, self.skipped = INIT_SCALE, 0, 0
        self.scales: list[float] = []
        named = dict(model.named_parameters())
        ps = [named[k].detach() for k in self.fns.names]
        self.set_state(ps, *[[torch.zeros_like(p) for p in ps]] * 2)

    def set_state(self, params, m, v, t: int = 0):
        self.p = [torch.as_tensor(x).detach().float().clone() for x in params]
        self.m = [torch.as_tensor(x).detach().float().clone() for x in m]
        self.v = [torch.as_tensor(x).detach().float().clone() for x in v]

    def get_state(self):
        return [x.clone() for x in self.p], [x.clone() for x in self.m], [x.clone() for x in self.v]

    def grad(self, *batch):
        if not MIN_SCALE <= self.scale <= MAX_SCALE:  # the HTP saturates a larger fp16 scale silently: wrong grads
            raise ConfigError(f"loss scale {self.scale:g} outside [{MIN_SCALE:g}, {MAX_SCALE:g}]")
        feeds = {f"param.{k}": p.numpy() for k, p in zip(self.fns.names, self.p)}
        feeds.update(scale=np.asarray(self.scale, np.float32), **dict(zip(self.fns.objective.batch_names, _feeds(batch))))
        loss, *raw = self.sessions["grad_scaled" + self.shape_key(batch)].run(None, feeds)
        self.scales.append(self.scale)
        # The HTP saturates on fp16 overflow instead of producing inf (measured: gradients come back as ±65504 or
        # sums of it), so "overflow" is any value at fp16's limit, not only a non-finite one.
        if any(not np.isfinite(g).all() or np.abs(g).max() >= FP16_MAX for g in raw):
            self.skipped += 1
            self.good = 0
            self.scale = max(MIN_SCALE, self.scale / 2)
            return float(loss), None
        grads = [torch.from_numpy(np.asarray(g, np.float32)) / self.scale for g in raw]
        self.good += 1
        if self.good % GROWTH_INTERVAL == 0:
            self.scale = min(MAX_SCALE, self.scale * 2)
        return float(loss), grads

    def apply(self, grads, t, lr):
        if grads is None:  # overflow: skip the update, as GradScaler does
            return
        with torch.no_grad():
            self.p, self.m, self.v = adamw_update(self.p, self.m, self.v, grads, torch.tensor(float(t)),
                                                  torch.tensor(float(lr)), self.fns.slots, self.opt)

    def fused_step(self, t, lr, *batch):  # pragma: no cover - the form is always split here
        return self.step(t, lr, *batch)

    def summary(self) -> dict:
        return {"skipped_steps": self.skipped, "final_loss_scale": self.scale,
                "loss_scale_min": min(self.scales, default=self.scale), "loss_scale_max": max(self.scales, default=self.scale)}
