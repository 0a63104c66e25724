"""Fine-tune a detector: AdamW, linear warmup + linear decay, early stopping on validation F1, atomic
checkpoints at every epoch, exact `--resume`.

Determinism: the batch order of epoch e is a permutation drawn from seed+e and the torch RNG is reseeded at each
epoch start, so a run resumed from the checkpoint of epoch e replays epochs e+1.. exactly as an uninterrupted run.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ..errors import ConfigError
from ..fsio import atomic_write, replace_dir, write_json_atomic
from ..models.detector import Detector, DetectorSpec, build_preset, load_detector, load_tokenizer
from .data import Example, encode, load_examples
from .metrics import best_threshold, classification_metrics
from ..ui import StepBar

CKPT = "checkpoint"


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


def _save_checkpoint(out: Path, model: Detector, tokenizer, opt: torch.optim.Optimizer, state: dict) -> None:
    from safetensors.torch import save_file

    tmp = out / f".{CKPT}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp / "model", tokenizer=tokenizer)
    osd = opt.state_dict()
    tensors = {}
    for idx, st in osd["state"].items():
        for k, v in st.items():
            tensors[f"{idx}.{k}"] = v.detach().clone().contiguous() if torch.is_tensor(v) else torch.tensor(v)
    save_file(tensors, str(tmp / "optimizer.safetensors"))
    (tmp / "trainer_state.json").write_text(json.dumps({**state, "param_groups": osd["param_groups"]}, indent=1))
    replace_dir(tmp, out / CKPT)  # the checkpoint appears whole or not at all


def _load_checkpoint(out: Path, opt: torch.optim.Optimizer) -> dict:
    from safetensors.torch import load_file

    ck = out / CKPT
    state = json.loads((ck / "trainer_state.json").read_text())
    tensors = load_file(str(ck / "optimizer.safetensors"))
    st: dict[int, dict] = {}
    for key, v in tensors.items():
        idx, k = key.split(".", 1)
        st.setdefault(int(idx), {})[k] = v
    opt.load_state_dict({"state": st, "param_groups": state.pop("param_groups")})
    return state


def train(cfg: TrainConfig, progress: Callable[[str], None] | None = None, *, model: Detector | None = None,
          tokenizer=None, show_bar: bool = True) -> dict:
    """Train and write OUT/model (the best epoch by validation F1), OUT/metrics.jsonl, OUT/train_summary.json."""
    out = Path(cfg.out)
    say = progress or (lambda m: None)
    resume_state = None
    if cfg.resume:
        if not (out / CKPT / "trainer_state.json").is_file():
            raise ConfigError(f"--resume: no checkpoint in {out} (expected {out / CKPT})")
        saved = json.loads((out / "train_config.json").read_text())
        mine = {k: v for k, v in asdict(cfg).items() if k != "resume"}
        diff = {k: (saved.get(k), v) for k, v in mine.items() if saved.get(k) != v}
        if diff:
            raise ConfigError(f"--resume with a different config: {diff}; use the original flags or a new -o")
        model = load_detector(out / CKPT / "model")
        tokenizer = load_tokenizer(out / CKPT / "model")
    else:
        if out.exists() and any(out.iterdir()):
            raise ConfigError(f"{out} is not empty; pass --resume to continue that run or choose another -o")
        out.mkdir(parents=True, exist_ok=True)
        (out / "train_config.json").write_text(json.dumps({k: v for k, v in asdict(cfg).items() if k != "resume"}, indent=1))
        if model is None:
            if cfg.init:
                model = load_detector(cfg.init)
                tokenizer = load_tokenizer(cfg.init)
            else:
                tokenizer = tokenizer or (load_tokenizer(cfg.tokenizer_dir) if cfg.tokenizer_dir else None)
                if tokenizer is None:
                    raise ConfigError("--preset needs a tokenizer (--tokenizer DIR), or use --init MODEL_DIR")
                model = build_preset(cfg.preset, seed=cfg.seed, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id)
    if tokenizer is None:
        raise ConfigError("the model directory has no tokenizer files; training needs one")
    pad_id = tokenizer.pad_token_id
    train_ex = load_examples(cfg.data, require_label=True)
    val_ex = load_examples(cfg.val, require_label=True) if cfg.val else None
    rows, labels = encode(tokenizer, train_ex, cfg.max_len), np.array([e.label for e in train_ex], dtype=np.int64)
    val_rows = encode(tokenizer, val_ex, cfg.max_len) if val_ex else None
    val_labels = np.array([e.label for e in val_ex]) if val_ex else None

    steps_per_epoch = math.ceil(len(rows) / cfg.batch)
    total = steps_per_epoch * cfg.epochs
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (no_decay if p.ndim < 2 or "norm" in n.lower() else decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=cfg.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _lr_lambda(total, int(cfg.warmup * total)))
    state = {"epoch": 0, "step": 0, "best_f1": -1.0, "best_epoch": 0, "bad_epochs": 0, "threshold": 0.5, "history": []}
    if cfg.resume:
        state = _load_checkpoint(out, opt)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, _lr_lambda(total, int(cfg.warmup * total)), last_epoch=state["step"] - 1)
        say(f"resuming after epoch {state['epoch']} (step {state['step']})")
        # Epochs after the checkpoint were lost with the interruption and will be replayed: drop their records.
        mpath = out / "metrics.jsonl"
        if mpath.exists():
            kept = [l for l in mpath.read_text().splitlines() if l.strip() and json.loads(l)["epoch"] <= state["epoch"]]
            atomic_write(mpath, "".join(k + "\n" for k in kept))
    t0 = time.perf_counter()
    bar = StepBar("training", total, state["step"], enabled=show_bar)
    for epoch in range(state["epoch"] + 1, cfg.epochs + 1):
        if state["bad_epochs"] >= cfg.patience:
            break
        torch.manual_seed(cfg.seed * 1000 + epoch)
        rng = np.random.default_rng(cfg.seed * 1000 + epoch)
        order = rng.permutation(len(rows))
        noisy = _noise(rows, tokenizer.sep_token_id, len(tokenizer), cfg.context_noise, rng)
        model.train()
        losses = []
        for ids, mask, y in _batches(noisy, labels, order, cfg.batch, pad_id):
            loss = torch.nn.functional.cross_entropy(model(ids, mask), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            state["step"] += 1
            losses.append(loss.item())
            bar.update(state["step"], f"loss {loss.item():.4f}")
        rec = {"epoch": epoch, "step": state["step"], "train_loss": float(np.mean(losses)), "lr": sched.get_last_lr()[0]}
        if val_rows is not None:
            probs = predict_probs(model, val_rows, pad_id)
            thr = best_threshold(val_labels, probs)
            m = classification_metrics(val_labels, probs, thr)
            rec.update(val_f1=m["f1"], val_accuracy=m["accuracy"], val_roc_auc=m["roc_auc"], threshold=thr)
            score = m["f1"]
        else:
            thr, score = 0.5, -float(np.mean(losses))  # no validation: keep the latest epoch
        with open(out / "metrics.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")
        state["history"].append(rec)
        state["epoch"] = epoch
        if score > state["best_f1"]:
            state.update(best_f1=score, best_epoch=epoch, bad_epochs=0, threshold=thr)
            model.spec = DetectorSpec(**{**model.spec.to_json(), "labels": tuple(model.spec.labels), "threshold": float(thr),
                                         "max_length": cfg.max_len})
            _atomic_model(out / "model", model, tokenizer)
        else:
            state["bad_epochs"] += 1
        _save_checkpoint(out, model, tokenizer, opt, state)
        say(f"epoch {epoch}: loss {rec['train_loss']:.4f}" + (f", val F1 {rec['val_f1']:.4f}" if "val_f1" in rec else ""))
    bar.close()
    summary = {"epochs_run": state["epoch"], "best_epoch": state["best_epoch"], "best_val_f1": state["best_f1"],
               "threshold": state["threshold"], "steps": state["step"], "seconds": round(time.perf_counter() - t0, 1),
               "train_rows": len(rows), "val_rows": len(val_rows) if val_rows else 0, "history": state["history"]}
    write_json_atomic(out / "train_summary.json", summary)
    return summary


def _atomic_model(path: Path, model: Detector, tokenizer) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, tokenizer=tokenizer)
    replace_dir(tmp, path)
