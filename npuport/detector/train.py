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
from dataclasses import asdict
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ..errors import ConfigError
from ..fsio import replace_dir, write_json_atomic
from ..machine import release_memory
from ..models.detector import Detector, DetectorSpec, build_preset, load_detector, load_tokenizer
from ..models.tokfiles import TokenizerFiles
from ..train.core import CKPT_DIR, CheckpointStore, MetricsLog, run_loop
from ..ui import StepBar
from .config import DetectorTrainConfig
from .data import encode, load_examples
from .epochs import EagerEpochs, _batches, _noise, freeze_below, length_grouped
from .metrics import best_threshold, classification_metrics


def predict_probs(model: Detector, rows: list[np.ndarray], pad_id: int, batch: int = 32) -> np.ndarray:
    """P(deviation) per row; rows sorted by length so little padding is computed. 32 rows a call: faster than 64
    on the demo's rows (see FrozenPrefix.build)."""
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


# -- checkpoints (safetensors + JSON; never pickle) -------------------------------------------------------------
# checkpoints/epoch_XXXXXXXX/{model/, optimizer.safetensors, trainer_state.json}: written under a temporary name and
# renamed into place (no moment without a whole checkpoint), the last two kept, a damaged newest one skipped.


def _store(out: Path) -> CheckpointStore:
    return CheckpointStore(out / CKPT_DIR, "epoch", "", keep=2)


def _write_checkpoint(d: Path, model: Detector, tokenizer, epochs, state: dict) -> None:
    """model/ + optimizer.safetensors (the epochs object's optimizer state) + trainer_state.json."""
    from safetensors.torch import save_file

    model.save_pretrained(d / "model", tokenizer=tokenizer)
    tensors, extra = epochs.optimizer_tensors()
    save_file(tensors, str(d / "optimizer.safetensors"))
    (d / "trainer_state.json").write_text(json.dumps({**state, **extra}, indent=1))


def _read_checkpoint(d: Path) -> tuple:
    """(model, tokenizer, trainer state, optimizer tensors): everything is read, so a damaged file raises here."""
    from safetensors.torch import load_file

    state = json.loads((d / "trainer_state.json").read_text())
    return load_detector(d / "model"), load_tokenizer(d / "model"), state, load_file(str(d / "optimizer.safetensors"))


def _file_sha256(path: str | None) -> str | None:
    if path is None:
        return None
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def _own(cfg: DetectorTrainConfig) -> str | None:
    """The precision a run gets when none is asked for: left out of its identity, as runs before the flag had it."""
    if cfg.runtime is None:
        return None
    from ..runtimes import get_runtime

    return get_runtime(cfg.runtime).train_precisions[0]


def _identity(cfg: DetectorTrainConfig) -> dict:
    """What a resume must match: the config and the *content* of the data files (not just their paths)."""
    ident = {**{k: v for k, v in asdict(cfg).items() if k != "resume" and not (k == "precision" and v == _own(cfg))},
             "data_sha256": _file_sha256(cfg.data), "val_sha256": _file_sha256(cfg.val)}
    return json.loads(json.dumps(ident))  # as train_config.json holds it (tuples become lists)


def _check_resume(cfg: DetectorTrainConfig, out: Path, identity: dict, store):
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


def _initial_model(cfg: DetectorTrainConfig, tokenizer):
    """(model, tokenizer) a new run starts from: --init DIR, or --preset at random with a given tokenizer."""
    if cfg.init:  # a detector to fine-tune further, or a backbone (or classifier) whose encoder we reuse
        torch.manual_seed(cfg.seed)  # a new head is drawn at random: the same --seed gives the same init
        return load_detector(cfg.init, new_head=True), load_tokenizer(cfg.init)
    tokenizer = tokenizer or (load_tokenizer(cfg.tokenizer_dir) if cfg.tokenizer_dir else None)
    if tokenizer is None:
        raise ConfigError("--preset needs a tokenizer (--tokenizer DIR), or use --init MODEL_DIR")
    return build_preset(cfg.preset, seed=cfg.seed, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id), tokenizer


def train(cfg: DetectorTrainConfig, progress: Callable[[str], None] | None = None, *, model: Detector | None = None,
          tokenizer=None, show_bar: bool | Callable[[str], None] = True) -> dict:
    """Train and write OUT/model (the best epoch by validation F1), OUT/metrics.jsonl, OUT/train_summary.json.

    Every input (data files, model, tokenizer, output directory) is validated before anything is written."""
    out = Path(cfg.out)
    say = progress or (lambda m: None)
    identity = _identity(cfg)
    store = _store(out)
    resumed, model, tokenizer = _model_to_train(cfg, out, identity, store, model, tokenizer)
    pad_id = tokenizer.pad_token_id
    rows, labels, val_rows, val_labels = _encoded(cfg, tokenizer)
    if cfg.runtime is None:  # the eager trainer needs the ids and the files from here on, not the object (tokfiles)
        tokenizer = TokenizerFiles.of(tokenizer)
    if not cfg.resume:  # inputs are valid: only now does the run directory appear
        out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(out / "train_config.json", identity)
    total = _steps_per_epoch(cfg, rows) * cfg.epochs
    epochs = _epoch_runner(cfg, model, tokenizer, rows, total, out, say)
    metrics = MetricsLog(out / "metrics.jsonl", key="epoch")
    state = _start_state(epochs, resumed, metrics, say)
    t0 = time.perf_counter()
    if state["epoch"] < cfg.epochs and hasattr(epochs, "start"):
        epochs.start()
        release_memory()  # the frozen-layer pass's temporaries: freed, and handed back before the epochs' own
    # show_bar: a bar on a TTY (plain lines elsewhere), or a ProgressFn that takes the lines (demo's build process)
    bar = StepBar("training", total, state["step"], enabled=show_bar is True, sink=show_bar if callable(show_bar) else None)
    losses: list[float] = []

    def one_epoch(epoch: int) -> dict:
        torch.manual_seed(cfg.seed * 1000 + epoch)
        rng = np.random.default_rng(cfg.seed * 1000 + epoch)
        static = cfg.runtime is not None
        order = rng.permutation(len(rows)) if static else length_grouped(rng.permutation(len(rows)), rows, cfg.batch, rng)
        prefix = getattr(epochs, "prefix", None)
        noisy = rows if prefix is not None else _noise(rows, tokenizer.sep_token_id, len(tokenizer), cfg.context_noise, rng)
        losses[:] = epochs.run_epoch(noisy, labels, order, rng, state, bar)
        return {"epoch": epoch, "step": state["step"], "train_loss": float(np.mean(losses)), "lr": epochs.last_lr}

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
        store.save_dir(epoch, lambda d: _write_checkpoint(d, model, tokenizer, epochs, state))
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
               "train_rows": len(rows), "val_rows": len(val_rows) if val_rows else 0, "training": epochs.info(),
               "history": metrics.read()}
    write_json_atomic(out / "train_summary.json", summary)
    return summary


def _model_to_train(cfg: DetectorTrainConfig, out: Path, identity: dict, store, model, tokenizer):
    """(resumed checkpoint or None, model, tokenizer): the checkpoint's on --resume, else the given or initial one
    (into an empty or new -o only)."""
    resumed = _check_resume(cfg, out, identity, store) if cfg.resume else None
    if resumed is not None:
        model, tokenizer = resumed[1][0], resumed[1][1]
    else:
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise ConfigError(f"{out} is not an empty directory; pass --resume to continue that run or choose another -o")
        if model is None:
            model, tokenizer = _initial_model(cfg, tokenizer)
        elif tokenizer is None and cfg.init:  # a model handed in, built from --init: its tokenizer is there
            tokenizer = load_tokenizer(cfg.init)
    if tokenizer is None:
        raise ConfigError("the model directory has no tokenizer files; training needs one")
    return resumed, model, tokenizer


def _encoded(cfg: DetectorTrainConfig, tokenizer):
    """(train rows, train labels, val rows or None, val labels or None), token ids cut to --max-len."""
    train_ex = load_examples(cfg.data, require_label=True)
    val_ex = load_examples(cfg.val, require_label=True) if cfg.val else None
    rows, labels = encode(tokenizer, train_ex, cfg.max_len), np.array([e.label for e in train_ex], dtype=np.int64)
    if not val_ex:
        return rows, labels, None, None
    return rows, labels, encode(tokenizer, val_ex, cfg.max_len), np.array([e.label for e in val_ex])


def _epoch_runner(cfg: DetectorTrainConfig, model, tokenizer, rows, total: int, out: Path, say):
    """Eager PyTorch, or the classifier step as static graphs on --backend; with --train-top-layers the rest frozen."""
    if cfg.train_top_layers is not None:
        n = freeze_below(model, cfg.train_top_layers)
        say(f"training the top {cfg.train_top_layers} layers and the head ({n / 1e6:.1f}M parameters), the rest frozen")
    if cfg.runtime is None:
        return EagerEpochs(model, tokenizer, cfg, rows, total, say)
    from .static_train import StaticEpochs

    return StaticEpochs(model, tokenizer, cfg, total, out, say)


def _start_state(epochs, resumed, metrics: MetricsLog, say) -> dict:
    """The loop's state: fresh, or the checkpoint's (records of the epochs after it dropped: they are replayed)."""
    if resumed is None:
        metrics.reset()
        return {"epoch": 0, "step": 0, "best_f1": -1.0, "best_epoch": 0, "bad_epochs": 0, "threshold": 0.5}
    state = epochs.restore(resumed[1][2], resumed[1][3])
    say(f"resuming after epoch {state['epoch']} (step {state['step']})")
    metrics.truncate(state["epoch"])
    return state


def _steps_per_epoch(cfg: DetectorTrainConfig, rows) -> int:
    if cfg.runtime is None:
        return math.ceil(len(rows) / cfg.batch)
    from .static_train import train_buckets

    buckets = train_buckets(cfg.max_len, cfg.buckets)
    counts = np.bincount([next(k for k, b in enumerate(buckets) if b >= len(r)) for r in rows], minlength=len(buckets))
    return int(sum(math.ceil(c / cfg.batch) for c in counts))


def _atomic_model(path: Path, model: Detector, tokenizer) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, tokenizer=tokenizer)
    replace_dir(tmp, path)
