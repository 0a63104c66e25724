"""Evaluate a detector on labelled data: metrics JSON plus ROC and reliability plots (PNG)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ConfigError
from ..models.detector import load_detector, load_tokenizer
from ..verifying import EagerReference
from .data import encode, load_examples
from .metrics import calibration, classification_metrics, roc_curve


@dataclass(frozen=True, kw_only=True)
class EvalConfig:
    model_dir: str
    data: str
    json_out: str | None = None
    plots_dir: str | None = None
    threshold: float | None = None  # default: the threshold chosen on validation, stored with the model
    max_len: int | None = None


def evaluate(cfg: EvalConfig, loaded: tuple | None = None) -> dict:
    """loaded: (model, tokenizer) already loaded from cfg.model_dir, for a caller scoring several data files."""
    from .train import predict_probs

    model, tok, examples, rows = _rows(cfg, loaded)
    return _metrics(cfg, model, examples, predict_probs(model, rows, tok.pad_token_id))


def evaluate_with_reference(cfg: EvalConfig, loaded: tuple | None = None) -> tuple[dict, EagerReference]:
    """evaluate, scored by the port's own eager reference (`verifying.eager_logits`: every row unpadded): the
    metrics and the reference, which `port` then takes for the same rows instead of running the model again
    (the demo evaluates and ports its test split in one process)."""
    import torch

    model, _, examples, rows = _rows(cfg, loaded)
    ref = EagerReference.of(model, rows)
    probs = torch.softmax(torch.from_numpy(ref.logits).float(), dim=-1)[:, 1].numpy().astype(np.float64)  # as predict_probs
    return _metrics(cfg, model, examples, probs), ref


def _rows(cfg: EvalConfig, loaded: tuple | None):
    model, tok = loaded or load_model_and_tokenizer(cfg.model_dir)
    if tok is None:
        raise ConfigError(f"{cfg.model_dir} has no tokenizer files; evaluation needs the tokenizer the model was trained with")
    examples = load_examples(cfg.data, require_label=True)
    return model, tok, examples, encode(tok, examples, cfg.max_len or model.spec.max_length)


def _metrics(cfg: EvalConfig, model, examples, probs: np.ndarray) -> dict:
    labels = np.array([e.label for e in examples])
    thr = cfg.threshold if cfg.threshold is not None else model.spec.threshold
    m = classification_metrics(labels, probs, thr)
    m["threshold_source"] = "flag" if cfg.threshold is not None else "chosen on validation during training"
    m["data"] = str(cfg.data)
    m["model"] = str(cfg.model_dir)
    if cfg.plots_dir:
        m["plots"] = plot_eval(labels, probs, Path(cfg.plots_dir), m)
    if cfg.json_out:
        from ..fsio import write_json_atomic

        write_json_atomic(Path(cfg.json_out), m)
    return m


def load_model_and_tokenizer(model_dir: str) -> tuple:
    return load_detector(model_dir), load_tokenizer(model_dir)


def plot_eval(labels, probs, out: Path, m: dict) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    fpr, tpr = roc_curve(labels, probs)
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    ax.plot(fpr, tpr, lw=2, label=f"ROC (AUC {m['roc_auc']:.3f})")
    ax.plot([0, 1], [0, 1], "--", color="grey", lw=1)
    ax.set(xlabel="false positive rate", ylabel="true positive rate", title="Persona-deviation detector: ROC")
    ax.legend(loc="lower right")
    fig.tight_layout()
    roc_path = out / "roc.png"
    fig.savefig(roc_path, dpi=110)
    plt.close(fig)
    ece, table = calibration(labels, probs)
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    ax.plot([0, 1], [0, 1], "--", color="grey", lw=1, label="perfect calibration")
    ax.plot([b["mean_prob"] for b in table], [b["frac_positive"] for b in table], "o-", lw=2, label=f"model (ECE {ece:.3f})")
    for b in table:
        ax.annotate(str(b["n"]), (b["mean_prob"], b["frac_positive"]), fontsize=7, xytext=(3, -10), textcoords="offset points")
    ax.set(xlabel="predicted P(deviation)", ylabel="observed deviation rate", title="Reliability", xlim=(0, 1), ylim=(0, 1))
    ax.legend(loc="upper left")
    fig.tight_layout()
    rel_path = out / "reliability.png"
    fig.savefig(rel_path, dpi=110)
    plt.close(fig)
    return {"roc": str(roc_path), "reliability": str(rel_path)}
