"""`detector train --backend NAME`: the classifier's training step as static graphs, one per length bucket.

What differs from the eager trainer (detector/train.py), and why:
  * batches are bucketed by length like inference (`--buckets`, default 32/64/128/256 up to --max-len): a static
    graph takes one shape, so each bucket has its own graph; all of them read and write one set of weights. A
    bucket's last, short batch is filled to the static batch size with copies of its first row at weight 0, so
    every row is trained on exactly once per epoch and the filler contributes exactly nothing (ClassifierObjective).
  * dropout is off: a runtime cannot reproduce torch's random masks, and the control run (`--backend eager`, the
    same bucketed schedule in eager PyTorch) must compute the same function for the comparison to mean anything.
  * frozen parameters (`--train-top-layers N`, 0 = head only) are constants of the graph: fewer gradients and a
    smaller graph, as on the NPU.
The optimizer is the eager trainer's: AdamW (betas 0.9/0.999, eps 1e-8), decay except on biases and norms, the head at
--head-lr, global-norm clipping at 1.0, linear warmup + decay computed on the host and fed to the graph as `lr`.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from ..errors import ConfigError
from ..static.adapters import adapt
from ..train.select import open_step_runner
from ..train.step import ClassifierObjective, OptimConfig, ParamSlot

DEFAULT_BUCKETS = (32, 64, 128, 256)
CLIP = 1.0  # the eager trainer's clip_grad_norm_


def train_buckets(max_len: int, buckets: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """Sorted buckets, the largest = --max-len (no row is longer: encode truncates there)."""
    chosen = tuple(sorted(set(buckets))) if buckets else tuple(b for b in DEFAULT_BUCKETS if b < max_len) + (max_len,)
    if chosen[0] < 4:
        raise ConfigError(f"--buckets {list(chosen)}: a bucket must hold at least 4 tokens")
    if chosen[-1] < max_len:
        raise ConfigError(f"--buckets {list(chosen)}: the largest must be >= --max-len {max_len}, or rows won't fit")
    return chosen


def detector_slots(static, head_lr_scale: float = 1.0) -> list[ParamSlot]:
    """The trained parameters with the eager trainer's groups: no decay on biases and norms; the head's lr scaled.

    A parameter the loss does not reach (BERT's pooler, under mean pooling) gets no gradient in eager PyTorch, so
    AdamW leaves it alone, weight decay included; in a graph it would get zeros and be decayed. It is left out."""
    return [ParamSlot(n, tuple(p.shape), not (p.ndim < 2 or "norm" in n.lower()),
                      head_lr_scale if n.startswith("detector.head.") else 1.0)
            for n, p in static.named_parameters() if n in _reached(static)]


def _reached(static) -> set[str]:
    """Names of the trainable parameters that one backward pass on a small probe batch gives a gradient."""
    ids = torch.full((2, 8), 5, dtype=torch.long)
    ids[:, 0], ids[1, 5:] = 2, 0
    mask = (torch.arange(8) < torch.tensor([[8], [5]])).long()
    params = {n: p for n, p in static.named_parameters() if p.requires_grad}
    grads = torch.autograd.grad(static(ids, mask).float().logsumexp(-1).sum(), list(params.values()), allow_unused=True)
    return {n for n, g in zip(params, grads) if g is not None}


def static_batches(rows: list[np.ndarray], labels: np.ndarray, order: np.ndarray, batch: int, buckets: tuple[int, ...],
                   pad_id: int, rng: np.random.Generator) -> list[tuple[np.ndarray, ...]]:
    """(input_ids, attention_mask, labels, weights) batches of static shapes (batch, bucket), in a shuffled order."""
    by_bucket: dict[int, list[int]] = {}
    for i in order:
        t = next(b for b in buckets if b >= len(rows[i]))
        by_bucket.setdefault(t, []).append(int(i))
    out = []
    for t, idx in sorted(by_bucket.items()):
        for s in range(0, len(idx), batch):
            chunk = idx[s : s + batch]
            weights = np.zeros(batch, np.float32)
            weights[: len(chunk)] = 1.0
            chunk = chunk + [chunk[0]] * (batch - len(chunk))  # filler rows, weight 0
            ids = np.full((batch, t), pad_id, np.int64)
            mask = np.zeros((batch, t), np.int64)
            for r, i in enumerate(chunk):
                ids[r, : len(rows[i])], mask[r, : len(rows[i])] = rows[i], 1
            out.append((ids, mask, labels[chunk].astype(np.int64), weights))
    perm = rng.permutation(len(out))
    return [out[k] for k in perm]


def lr_factor(step: int, total: int, warmup_steps: int) -> float:
    """The eager trainer's LambdaLR, for the 0-based number of steps taken so far."""
    if step < warmup_steps:
        return (step + 1) / max(1, warmup_steps)
    return max(0.0, (total - step) / max(1, total - warmup_steps))


class StaticEpochs:
    """Epochs of static-shape steps on a runtime (or, for the control, eager PyTorch through the same runner API)."""

    def __init__(self, model, tokenizer, cfg, total: int, out: Path, say):
        self.model, self.cfg, self.total = model, cfg, total
        self.pad_id = tokenizer.pad_token_id
        self.buckets = train_buckets(cfg.max_len, cfg.buckets)
        self.warmup = int(cfg.warmup * total)
        self.step_times: list[float] = []
        self.step_losses: list[float] = []
        self.tokens = 0  # batch x bucket per step: what the graphs process, filler and padding included
        model.eval()  # dropout off, in the graph and in the control alike (see the module docstring)
        scale = (cfg.head_lr / cfg.lr) if cfg.head_lr else 1.0
        self.opt = OptimConfig(beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=cfg.weight_decay, max_grad_norm=CLIP)
        # the step is captured from the same static module inference is proven on (SDPA, masks built in-graph, no
        # unpadding): its parameters are the model's own, under the prefix "detector."
        self.static, self.adapter = adapt(model)
        say(f"capturing the training step for {cfg.runtime}: batch {cfg.batch} x buckets {list(self.buckets)}")
        self.runner = open_step_runner(
            cfg.runtime, self.static, self.opt, batch=cfg.batch, seq_len=self.buckets[-1], seq_lens=self.buckets,
            objective=ClassifierObjective(model.spec.num_labels, gather_free=cfg.gather_free),
            slots=detector_slots(self.static, scale), workdir=out / "graphs", threads=cfg.threads, precision=cfg.precision)
        self.names = self.runner.fns.names
        self.last_lr = cfg.lr * lr_factor(0, total, self.warmup)

    def run_epoch(self, rows, labels, order, rng, state, bar) -> list[float]:
        import time

        losses = []
        for batch in static_batches(rows, labels, order, self.cfg.batch, self.buckets, self.pad_id, rng):
            self.last_lr = self.cfg.lr * lr_factor(state["step"], self.total, self.warmup)
            t0 = time.perf_counter()
            loss = self.runner.step(state["step"] + 1, self.last_lr, *batch)
            self.step_times.append(time.perf_counter() - t0)
            self.step_losses.append(loss)
            self.tokens += batch[0].size
            if not math.isfinite(loss):
                raise ConfigError(f"loss became {loss} at step {state['step'] + 1}; lower --lr (now {self.cfg.lr})")
            state["step"] += 1
            losses.append(loss)
            bar.update(state["step"], f"loss {loss:.4f}")
        self.sync()
        return losses

    def sync(self) -> None:
        """Copy the runner's weights into the model (validation and saving read the model)."""
        named = dict(self.static.named_parameters())
        with torch.no_grad():
            for k, p in zip(self.names, self.runner.get_state()[0]):
                named[k].copy_(p)

    def optimizer_tensors(self) -> tuple[dict, dict]:
        _, m, v = self.runner.get_state()
        tensors = {**{f"m.{k}": t.contiguous() for k, t in zip(self.names, m)},
                   **{f"v.{k}": t.contiguous() for k, t in zip(self.names, v)}}
        return tensors, {"backend": self.cfg.runtime}

    def restore(self, state: dict, tensors: dict) -> dict:
        named = dict(self.static.named_parameters())
        try:
            m = [tensors[f"m.{k}"] for k in self.names]
            v = [tensors[f"v.{k}"] for k in self.names]
        except KeyError as e:
            raise ConfigError(f"--resume: the checkpoint has no optimizer moment {e}; it is not this run's") from None
        self.runner.set_state([named[k].detach() for k in self.names], m, v, t=state["step"])
        state.pop("backend", None)
        return state

    def info(self) -> dict:
        times = sorted(self.step_times)
        return {"backend": self.cfg.runtime, "buckets": list(self.buckets), "gather_free": self.cfg.gather_free,
                "adapter": self.adapter.__dict__,
                "trained_parameters": int(sum(int(np.prod(s.shape)) for s in self.runner.fns.slots)),
                "step_s_median": round(times[len(times) // 2], 5) if times else None,
                "tokens_per_s": round(self.tokens / sum(times), 1) if times else None,
                "step_losses": self.step_losses,  # this process's steps (a resumed run: those after the resume)
                **({"mixed_precision": self.runner.summary()} if hasattr(self.runner, "summary") else {}),
                "runner": self.runner.info}
