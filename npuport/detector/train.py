"""Fine-tune a detector: AdamW, linear warmup + linear decay, early stopping on validation F1, atomic
checkpoints at every epoch, exact `--resume`.

Determinism: the batch order of epoch e is a permutation drawn from seed+e and the torch RNG is reseeded at each
epoch start, so a run resumed from the checkpoint of epoch e replays epochs e+1.. exactly as an uninterrupted run.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ..errors import ConfigError
from ..fsio import replace_dir, write_json_atomic
from ..models.detector import Detector, DetectorSpec, build_preset, load_detector, load_tokenizer
from .data import encode, load_examples
from ..train.core import CheckpointStore, MetricsLog, run_loop
from ..ui import StepBar
from .metrics import best_threshold, classification_metrics

CKPT_DIR = "checkpoints"


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    data: str
    out: str
    val: str | None = None
    init: str | None = None  # a model directory (with tokenizer)
    preset: str | None = None  # or a preset built at random (needs `tokenizer`)
    tokenizer_dir: str | None = None
    epochs: int = 6
    lr: float = 5e-4
    batch: int = 32
    max_len: int = 256
    warmup: float = 0.1
    weight_decay: float = 0.01
    patience: int = 2
    context_noise: float = 0.15  # fraction of context tokens replaced at random during training (see _noise)
    # A pretrained init: train only the top N encoder layers (and the head); the embeddings and lower layers keep
    # their pretrained weights, which is what carries over to text the demo data never showed (and costs less).
    train_top_layers: int | None = None
    head_lr: float | None = None  # default: lr; a new head on a pretrained encoder wants a larger one
    seed: int = 0
    resume: bool = False

    def __post_init__(self):
        if (self.init is None) == (self.preset is None):
            raise ConfigError("give exactly one of --init MODEL_DIR or --preset NAME")
        for name in ("epochs", "batch", "max_len"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        if not (0 < self.lr < 1):
            raise ConfigError(f"--lr {self.lr} is out of range (0, 1)")
        if not (0 <= self.warmup < 1):
            raise ConfigError(f"--warmup {self.warmup} must be a fraction in [0, 1)")
        if self.train_top_layers is not None and self.train_top_layers < 0:
            raise ConfigError(f"--train-top-layers must be >= 0, got {self.train_top_layers}")
        if self.head_lr is not None and not (0 < self.head_lr < 1):
            raise ConfigError(f"--head-lr {self.head_lr} is out of range (0, 1)")


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

    def __init__(self, model: Detector, top: int):
        self.model, self.layers = model, encoder_layers(model.backbone)
        self.split = len(self.layers) - top
        self.cache: list[torch.Tensor] = []

    @classmethod
    def applies(cls, model, top: int | None) -> bool:
        return top is not None and isinstance(model, Detector) and model.model_type in cls.ARCHS

    def _masks(self, mask: torch.Tensor) -> torch.Tensor:
        from ..static.adapters import padding_masks

        return padding_masks(mask)[0]

    def build(self, rows: list[np.ndarray], pad_id: int, batch: int = 64) -> None:
        bb = self.model.backbone
        self.cache = [None] * len(rows)
        order = np.argsort([len(r) for r in rows], kind="stable")
        bb.eval()
        with torch.no_grad():
            for s in range(0, len(order), batch):
                idx = order[s : s + batch]
                ids, mask, _ = next(_batches(rows, np.zeros(len(rows), dtype=np.int64), idx, len(idx), pad_id))
                h, full = bb.embeddings(input_ids=ids), self._masks(mask)
                for layer in list(self.layers)[: self.split]:
                    h = layer(h, full)
                for r, i in enumerate(idx):
                    self.cache[i] = h[r, : len(rows[i])].clone()

    def logits(self, idx: np.ndarray) -> torch.Tensor:
        width = max(self.cache[i].shape[0] for i in idx)
        h = torch.zeros(len(idx), width, self.cache[idx[0]].shape[1])
        mask = torch.zeros(len(idx), width, dtype=torch.int64)
        for r, i in enumerate(idx):
            n = self.cache[i].shape[0]
            h[r, :n], mask[r, :n] = self.cache[i], 1
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


def predict_probs(model: Detector, rows: list[np.ndarray], pad_id: int, batch: int = 64) -> np.ndarray:
    """P(deviation) per row; rows sorted by length so little padding is computed."""
    model.eval()
    order = np.argsort([len(r) for r in rows], kind="stable")
    out = np.zeros(len(rows), dtype=np.float64)
    with torch.no_grad():
        for ids, mask, _ in _batches(rows, np.zeros(len(rows), dtype=np.int64), order, batch, pad_id):
            p = torch.softmax(model(ids, mask).float(), dim=-1)[:, 1].numpy()
            n = len(p)
            out[order[:n]] = p
            order = order[n:]
    return out


def _lr_lambda(total: int, warmup_steps: int) -> Callable[[int], float]:
    def f(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / max(1, warmup_steps)
        return max(0.0, (total - step) / max(1, total - warmup_steps))

    return f


# -- checkpoints (safetensors + JSON; never pickle) -------------------------------------------------------------
# checkpoints/epoch_XXXXXXXX/{model/, optimizer.safetensors, trainer_state.json}: written under a temporary name and
# renamed into place (no moment without a whole checkpoint), the last two kept, a damaged newest one skipped.


def _store(out: Path) -> CheckpointStore:
    return CheckpointStore(out / CKPT_DIR, "epoch", "", keep=2)


def _write_checkpoint(d: Path, model: Detector, tokenizer, opt: torch.optim.Optimizer, state: dict) -> None:
    from safetensors.torch import save_file

    model.save_pretrained(d / "model", tokenizer=tokenizer)
    osd = opt.state_dict()
    tensors = {}
    for idx, st in osd["state"].items():
        for k, v in st.items():
            tensors[f"{idx}.{k}"] = v.detach().clone().contiguous() if torch.is_tensor(v) else torch.tensor(v)
    save_file(tensors, str(d / "optimizer.safetensors"))
    (d / "trainer_state.json").write_text(json.dumps({**state, "param_groups": osd["param_groups"]}, indent=1))


def _read_checkpoint(d: Path) -> tuple:
    """(model, tokenizer, trainer state, optimizer tensors): everything is read, so a damaged file raises here."""
    from safetensors.torch import load_file

    state = json.loads((d / "trainer_state.json").read_text())
    return load_detector(d / "model"), load_tokenizer(d / "model"), state, load_file(str(d / "optimizer.safetensors"))


def _restore_optimizer(opt: torch.optim.Optimizer, state: dict, tensors: dict) -> dict:
    st: dict[int, dict] = {}
    for key, v in tensors.items():
        idx, k = key.split(".", 1)
        st.setdefault(int(idx), {})[k] = v
    opt.load_state_dict({"state": st, "param_groups": state.pop("param_groups")})
    return state


def _file_sha256(path: str | None) -> str | None:
    if path is None:
        return None
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def _identity(cfg: TrainConfig) -> dict:
    """What a resume must match: the config and the *content* of the data files (not just their paths)."""
    return {**{k: v for k, v in asdict(cfg).items() if k != "resume"},
            "data_sha256": _file_sha256(cfg.data), "val_sha256": _file_sha256(cfg.val)}


def _check_resume(cfg: TrainConfig, out: Path, identity: dict, store):
    """The run to continue: same config and data (by content), and a loadable checkpoint."""
    if not (out / "train_config.json").is_file():
        raise ConfigError(f"--resume: {out} holds no detector run (no train_config.json); start one without --resume")
    saved = json.loads((out / "train_config.json").read_text())
    diff = {k: (saved.get(k), v) for k, v in identity.items() if saved.get(k) != v}
    if diff:
        raise ConfigError(f"--resume with a different config or data: {diff}; use the original flags and files, "
                          "or a new -o")
    resumed = store.load_latest(_read_checkpoint)
    if resumed is None:
        raise ConfigError(f"--resume: no loadable checkpoint in {out / CKPT_DIR}; start a new run with another -o")
    return resumed


def _initial_model(cfg: TrainConfig, tokenizer):
    """(model, tokenizer) a new run starts from: --init DIR, or --preset at random with a given tokenizer."""
    if cfg.init:  # a detector to fine-tune further, or a backbone (or classifier) whose encoder we reuse
        return load_detector(cfg.init, new_head=True), load_tokenizer(cfg.init)
    tokenizer = tokenizer or (load_tokenizer(cfg.tokenizer_dir) if cfg.tokenizer_dir else None)
    if tokenizer is None:
        raise ConfigError("--preset needs a tokenizer (--tokenizer DIR), or use --init MODEL_DIR")
    return build_preset(cfg.preset, seed=cfg.seed, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id), tokenizer


def _optimizer(model: Detector, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW over the trainable parameters: no decay on biases and norms; the head at --head-lr."""
    groups: dict[tuple[bool, bool], list] = {}
    for n, p in model.named_parameters():
        if p.requires_grad:
            groups.setdefault((n.startswith("head."), p.ndim < 2 or "norm" in n.lower()), []).append(p)
    return torch.optim.AdamW([{"params": ps, "weight_decay": 0.0 if no_decay else cfg.weight_decay,
                               "lr": (cfg.head_lr or cfg.lr) if head else cfg.lr}
                              for (head, no_decay), ps in sorted(groups.items())], lr=cfg.lr)


def _frozen_prefix(model, tokenizer, rows, cfg: TrainConfig, say) -> FrozenPrefix | None:
    if not FrozenPrefix.applies(model, cfg.train_top_layers):
        return None
    say("running the frozen layers once over the training rows (cached for every epoch)")
    prefix = FrozenPrefix(model, cfg.train_top_layers)
    noisy = _noise(rows, tokenizer.sep_token_id, len(tokenizer), cfg.context_noise, np.random.default_rng(cfg.seed))
    prefix.build(noisy, tokenizer.pad_token_id)
    return prefix


def train(cfg: TrainConfig, progress: Callable[[str], None] | None = None, *, model: Detector | None = None,
          tokenizer=None, show_bar: bool = True) -> dict:
    """Train and write OUT/model (the best epoch by validation F1), OUT/metrics.jsonl, OUT/train_summary.json.

    Every input (data files, model, tokenizer, output directory) is validated before anything is written."""
    out = Path(cfg.out)
    say = progress or (lambda m: None)
    identity = _identity(cfg)
    store = _store(out)
    resumed = _check_resume(cfg, out, identity, store) if cfg.resume else None
    if resumed is not None:
        model, tokenizer = resumed[1][0], resumed[1][1]
    else:
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise ConfigError(f"{out} is not an empty directory; pass --resume to continue that run or choose another -o")
        if model is None:
            model, tokenizer = _initial_model(cfg, tokenizer)
    if tokenizer is None:
        raise ConfigError("the model directory has no tokenizer files; training needs one")
    pad_id = tokenizer.pad_token_id
    train_ex = load_examples(cfg.data, require_label=True)
    val_ex = load_examples(cfg.val, require_label=True) if cfg.val else None
    rows, labels = encode(tokenizer, train_ex, cfg.max_len), np.array([e.label for e in train_ex], dtype=np.int64)
    val_rows = encode(tokenizer, val_ex, cfg.max_len) if val_ex else None
    val_labels = np.array([e.label for e in val_ex]) if val_ex else None
    if not cfg.resume:  # inputs are valid: only now does the run directory appear
        out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(out / "train_config.json", identity)

    steps_per_epoch = math.ceil(len(rows) / cfg.batch)
    total = steps_per_epoch * cfg.epochs
    if cfg.train_top_layers is not None:
        n = freeze_below(model, cfg.train_top_layers)
        say(f"training the top {cfg.train_top_layers} layers and the head ({n / 1e6:.1f}M parameters), the rest frozen")
    opt = _optimizer(model, cfg)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _lr_lambda(total, int(cfg.warmup * total)))
    state = {"epoch": 0, "step": 0, "best_f1": -1.0, "best_epoch": 0, "bad_epochs": 0, "threshold": 0.5}
    metrics = MetricsLog(out / "metrics.jsonl", key="epoch")
    if resumed is not None:
        state = _restore_optimizer(opt, resumed[1][2], resumed[1][3])
        sched = torch.optim.lr_scheduler.LambdaLR(opt, _lr_lambda(total, int(cfg.warmup * total)), last_epoch=state["step"] - 1)
        say(f"resuming after epoch {state['epoch']} (step {state['step']})")
        metrics.truncate(state["epoch"])  # epochs after the checkpoint are replayed: drop their records
    else:
        metrics.reset()
    t0 = time.perf_counter()
    prefix = _frozen_prefix(model, tokenizer, rows, cfg, say) if state["epoch"] < cfg.epochs else None
    bar = StepBar("training", total, state["step"], enabled=show_bar)
    losses: list[float] = []

    def one_epoch(epoch: int) -> dict:
        torch.manual_seed(cfg.seed * 1000 + epoch)
        rng = np.random.default_rng(cfg.seed * 1000 + epoch)
        order = length_grouped(rng.permutation(len(rows)), rows, cfg.batch, rng)
        noisy = None if prefix is not None else _noise(rows, tokenizer.sep_token_id, len(tokenizer), cfg.context_noise, rng)
        model.train()
        losses.clear()
        for s in range(0, len(order), cfg.batch):
            idx = order[s : s + cfg.batch]
            if prefix is not None:
                out, y = prefix.logits(idx), torch.from_numpy(labels[idx])
            else:
                ids, mask, y = next(_batches(noisy, labels, idx, len(idx), pad_id))
                out = model(ids, mask)
            loss = torch.nn.functional.cross_entropy(out, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
            opt.step()
            sched.step()
            state["step"] += 1
            losses.append(loss.item())
            bar.update(state["step"], f"loss {loss.item():.4f}")
        return {"epoch": epoch, "step": state["step"], "train_loss": float(np.mean(losses)), "lr": sched.get_last_lr()[0]}

    def validate(epoch: int) -> dict:
        if val_rows is not None:
            probs = predict_probs(model, val_rows, pad_id)
            thr = best_threshold(val_labels, probs)
            m = classification_metrics(val_labels, probs, thr)
            rec, score = {"val_f1": m["f1"], "val_accuracy": m["accuracy"], "val_roc_auc": m["roc_auc"], "threshold": thr}, m["f1"]
        else:
            rec, thr, score = {}, 0.5, -float(np.mean(losses))  # no validation: keep the latest epoch
        if score > state["best_f1"]:
            state.update(best_f1=score, best_epoch=epoch, bad_epochs=0, threshold=thr)
            model.spec = DetectorSpec(**{**model.spec.to_json(), "labels": tuple(model.spec.labels), "threshold": float(thr),
                                         "max_length": cfg.max_len})
            _atomic_model(out / "model", model, tokenizer)
        else:
            state["bad_epochs"] += 1
        return rec

    def checkpoint(epoch: int) -> None:
        state["epoch"] = epoch
        store.save_dir(epoch, lambda d: _write_checkpoint(d, model, tokenizer, opt, state))
        store.prune()

    def record(rec: dict) -> None:
        say(f"epoch {rec['epoch']}: loss {rec['train_loss']:.4f}" + (f", val F1 {rec['val_f1']:.4f}" if "val_f1" in rec else ""))

    start = cfg.epochs if state["bad_epochs"] >= cfg.patience else state["epoch"]  # resumed after an early stop
    try:
        run_loop(start=start, stop=cfg.epochs, step=one_epoch, evaluate=validate, eval_every=1, checkpoint=checkpoint,
                 ckpt_every=1, metrics=metrics, on_record=record, should_stop=lambda r: state["bad_epochs"] >= cfg.patience)
    finally:
        metrics.close()
        bar.close()
    summary = {"epochs_run": state["epoch"], "best_epoch": state["best_epoch"], "best_val_f1": state["best_f1"],
               "threshold": state["threshold"], "steps": state["step"], "seconds": round(time.perf_counter() - t0, 1),
               "train_rows": len(rows), "val_rows": len(val_rows) if val_rows else 0, "history": metrics.read()}
    write_json_atomic(out / "train_summary.json", summary)
    return summary


def _atomic_model(path: Path, model: Detector, tokenizer) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, tokenizer=tokenizer)
    replace_dir(tmp, path)
