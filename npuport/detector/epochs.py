"""How the eager trainer runs an epoch (detector/train.py drives it; detector/static_train.py is the static-graph
counterpart with the same interface: run_epoch, last_lr, optimizer_tensors, restore, info).

Length-grouped batches of any width, AdamW with a LambdaLR warmup + linear decay, dropout on, and - with a pretrained
init and `--train-top-layers` - the frozen lower layers run once and cached (FrozenPrefix).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np
import torch

from ..errors import ConfigError
from ..models.detector import Detector

if TYPE_CHECKING:
    from .config import DetectorTrainConfig


def encoder_layers(backbone: torch.nn.Module) -> torch.nn.ModuleList:
    """The stack of transformer blocks (BERT/RoBERTa `encoder.layer`, ModernBERT `layers`, DistilBERT
    `transformer.layer`)."""
    for path in ("encoder.layer", "layers", "transformer.layer"):
        mod = backbone
        for part in path.split("."):
            mod = getattr(mod, part, None)
        if isinstance(mod, torch.nn.ModuleList):
            return mod
    raise ConfigError(f"--train-top-layers: no layer stack found in {type(backbone).__name__}")


def freeze_below(model: Detector, top: int) -> int:
    """Freeze the embeddings and every layer but the top `top`; returns the number of trainable parameters."""
    layers = encoder_layers(model.backbone)
    if top > len(layers):
        raise ConfigError(f"--train-top-layers {top}: the encoder has only {len(layers)} layers")
    keep = {id(p) for layer in list(layers)[len(layers) - top:] for p in layer.parameters()}
    lower = {id(p) for layer in list(layers)[: len(layers) - top] for p in layer.parameters()}
    for name, p in model.backbone.named_parameters():
        if id(p) in lower or (id(p) not in keep and "embed" in name):
            p.requires_grad_(False)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


class FrozenPrefix:
    """The frozen part of a BERT-family detector (embeddings + lower layers), run once over the training rows.

    With `train_top_layers`, the frozen layers compute the same thing every epoch; caching their output makes an
    epoch cost only the top layers (measured on the demo: 2 epochs of all-MiniLM-L6-v2's top 2 layers in less
    than half the time). The context noise is drawn once, when the cache is built."""

    ARCHS = ("bert", "roberta", "xlm-roberta")  # layers called as layer(hidden, 4-D mask)

    def __init__(self, model: Detector, top: int, dtype: torch.dtype = torch.float16):
        self.model, self.layers = model, encoder_layers(model.backbone)
        self.split = len(self.layers) - top
        # fp16 by default: the cache is the build's largest allocation (rows x tokens x hidden), and the top layers
        # see their input rounded to 11 bits - far below the context noise and dropout training adds anyway.
        # Evaluation and every proof run the whole model in fp32; only the training inputs are rounded.
        self.dtype = dtype
        # Every row's states in ONE buffer (rows back to back, (sum of lengths, hidden)): thousands of separate
        # per-row tensors fragment the heap between the batches' large temporaries, and the process kept several
        # times the cache's own size (measured on the demo: see build.json's peak_rss_mb).
        self.buf = torch.empty(0)
        self.offsets = np.zeros(1, dtype=np.int64)

    @classmethod
    def applies(cls, model, top: int | None) -> bool:
        return top is not None and isinstance(model, Detector) and model.model_type in cls.ARCHS

    def _masks(self, mask: torch.Tensor) -> torch.Tensor:
        from ..static.adapters import padding_masks

        return padding_masks(mask)[0]

    # 32 rows a call, as the trainer's batches: 11 % faster than 64 over the me5-small demo's training rows (their
    # activations stay in cache; 128 and 256 were slower still, 16 no faster; measured 2026-12-07)
    def build(self, rows: list[np.ndarray], pad_id: int, batch: int = 32) -> None:
        bb = self.model.backbone
        lengths = np.array([len(r) for r in rows], dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(lengths)])
        self.buf = torch.empty(int(self.offsets[-1]), bb.config.hidden_size, dtype=self.dtype)  # (sum of lengths, C)
        order = np.argsort(lengths, kind="stable")
        bb.eval()
        with torch.no_grad():
            for s in range(0, len(order), batch):
                idx = order[s : s + batch]
                ids, mask, _ = next(_batches(rows, np.zeros(len(rows), dtype=np.int64), idx, len(idx), pad_id))
                h, full = bb.embeddings(input_ids=ids), self._masks(mask)
                for layer in list(self.layers)[: self.split]:
                    h = layer(h, full)
                for r, i in enumerate(idx):
                    self.buf[self.offsets[i]:self.offsets[i + 1]] = h[r, : lengths[i]]

    def logits(self, idx: np.ndarray) -> torch.Tensor:
        lengths = self.offsets[idx + 1] - self.offsets[idx]
        width = int(lengths.max())
        h = torch.zeros(len(idx), width, self.buf.shape[1])
        mask = torch.zeros(len(idx), width, dtype=torch.int64)
        for r, i in enumerate(idx):
            n = int(lengths[r])
            h[r, :n], mask[r, :n] = self.buf[self.offsets[i]:self.offsets[i + 1]], 1
        full = self._masks(mask)
        for layer in list(self.layers)[self.split :]:
            h = layer(h, full)
        return self.model.pool_and_head(h, mask)


def length_grouped(order: np.ndarray, rows: list[np.ndarray], batch: int, rng: np.random.Generator) -> np.ndarray:
    """Shuffled order whose batches hold rows of similar length (sorted within windows of 50 batches, batches then
    shuffled): far less padding is computed, and each epoch still sees a different mix."""
    window = batch * 50
    chunks = [sorted(order[s : s + window], key=lambda i: len(rows[i])) for s in range(0, len(order), window)]
    batches = [c[s : s + batch] for c in chunks for s in range(0, len(c), batch)]
    rng.shuffle(batches)
    return np.array([i for b in batches for i in b], dtype=np.int64)


def _batches(rows: list[np.ndarray], labels: np.ndarray, order: np.ndarray, batch: int, pad_id: int):
    for s in range(0, len(order), batch):
        idx = order[s : s + batch]
        width = max(len(rows[i]) for i in idx)
        ids = np.full((len(idx), width), pad_id, dtype=np.int64)
        mask = np.zeros_like(ids)
        for r, i in enumerate(idx):
            ids[r, : len(rows[i])] = rows[i]
            mask[r, : len(rows[i])] = 1
        yield torch.from_numpy(ids), torch.from_numpy(mask), torch.from_numpy(labels[idx])


def _lr_lambda(total: int, warmup_steps: int) -> Callable[[int], float]:
    def f(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / max(1, warmup_steps)
        return max(0.0, (total - step) / max(1, total - warmup_steps))

    return f


def _restore_optimizer(opt: torch.optim.Optimizer, state: dict, tensors: dict) -> dict:
    st: dict[int, dict] = {}
    for key, v in tensors.items():
        idx, k = key.split(".", 1)
        st.setdefault(int(idx), {})[k] = v
    opt.load_state_dict({"state": st, "param_groups": state.pop("param_groups")})
    return state


def _optimizer(model: Detector, cfg: DetectorTrainConfig) -> torch.optim.AdamW:
    """AdamW over the trainable parameters: no decay on biases and norms; the head at --head-lr."""
    groups: dict[tuple[bool, bool], list] = {}
    for n, p in model.named_parameters():
        if p.requires_grad:
            groups.setdefault((n.startswith("head."), p.ndim < 2 or "norm" in n.lower()), []).append(p)
    return torch.optim.AdamW([{"params": ps, "weight_decay": 0.0 if no_decay else cfg.weight_decay,
                               "lr": (cfg.head_lr or cfg.lr) if head else cfg.lr}
                              for (head, no_decay), ps in sorted(groups.items())], lr=cfg.lr)


def _frozen_prefix(model, tokenizer, rows, cfg: DetectorTrainConfig, say) -> FrozenPrefix | None:
    if not FrozenPrefix.applies(model, cfg.train_top_layers):
        return None
    say("running the frozen layers once over the training rows (cached for every epoch)")
    prefix = FrozenPrefix(model, cfg.train_top_layers)
    noisy = _noise(rows, tokenizer.sep_token_id, len(tokenizer), cfg.context_noise, np.random.default_rng(cfg.seed))
    prefix.build(noisy, tokenizer.pad_token_id)
    return prefix


class EagerEpochs:
    """The eager trainer's epochs: length-grouped batches of any width, LambdaLR, dropout on, frozen prefix cache."""

    def __init__(self, model, tokenizer, cfg: DetectorTrainConfig, rows, total: int, say):
        self.model, self.cfg, self.pad_id = model, cfg, tokenizer.pad_token_id
        self.opt = _optimizer(model, cfg)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, _lr_lambda(total, int(cfg.warmup * total)))
        self.total = total
        self.prefix = None
        self._prefix_args = (tokenizer, rows, say)

    def start(self) -> None:
        """Before the first epoch that runs (not at all when a resumed run has none left)."""
        self.prefix = _frozen_prefix(self.model, *self._prefix_args[:2], self.cfg, self._prefix_args[2])

    @property
    def last_lr(self) -> float:
        return self.sched.get_last_lr()[0]

    def run_epoch(self, rows, labels, order, rng, state, bar) -> list[float]:
        model, opt = self.model, self.opt
        model.train()
        losses = []
        for s in range(0, len(order), self.cfg.batch):
            idx = order[s : s + self.cfg.batch]
            if self.prefix is not None:
                out, y = self.prefix.logits(idx), torch.from_numpy(labels[idx])
            else:
                ids, mask, y = next(_batches(rows, labels, idx, len(idx), self.pad_id))
                out = model(ids, mask)
            loss = torch.nn.functional.cross_entropy(out, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
            opt.step()
            self.sched.step()
            state["step"] += 1
            losses.append(loss.item())
            bar.update(state["step"], f"loss {loss.item():.4f}")
        return losses

    def optimizer_tensors(self) -> tuple[dict, dict]:
        osd = self.opt.state_dict()
        tensors = {}
        for idx, st in osd["state"].items():
            for k, v in st.items():
                tensors[f"{idx}.{k}"] = v.detach().clone().contiguous() if torch.is_tensor(v) else torch.tensor(v)
        return tensors, {"param_groups": osd["param_groups"]}

    def restore(self, state: dict, tensors: dict) -> dict:
        state = _restore_optimizer(self.opt, state, tensors)
        self.sched = torch.optim.lr_scheduler.LambdaLR(
            self.opt, _lr_lambda(self.total, int(self.cfg.warmup * self.total)), last_epoch=state["step"] - 1)
        return state

    def info(self) -> dict:
        return {"backend": "eager (dynamic shapes)"}


def _noise(rows: list[np.ndarray], sep_id: int, vocab: int, p: float, rng: np.random.Generator) -> list[np.ndarray]:
    """Replace a fraction p of the *context* tokens (before the first [SEP]) with random ids, fresh each epoch.

    A small detector otherwise memorises the few hundred character cards it trains on and keys on them; noise in
    the card makes the reply - what is actually judged - the reliable signal. The reply is never touched."""
    if p <= 0:
        return rows
    out = []
    for r in rows:
        r = r.copy()
        seps = np.flatnonzero(r == sep_id)
        end = int(seps[0]) if len(seps) else 0
        hit = np.flatnonzero(rng.random(end - 1) < p) + 1 if end > 1 else np.array([], dtype=int)  # keep [CLS]
        r[hit] = rng.integers(5, vocab, len(hit))
        out.append(r)
    return out
