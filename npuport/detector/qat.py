"""`npuport detector train --init DETECTOR --qat ethos-u`: quantization-aware fine-tuning for an integer NPU.

The detector is adapted for static shapes exactly as `port` adapts it, exported, and prepared by the target's own
quantizer for QAT (PT2E fake-quant modules where the target quantises: ExecuTorch's Ethos-U quantizer for ethos-u).
Every activation's range is first calibrated on the training rows as `port` would (the target's own observers)
and then held; training runs through that graph at one static shape [batch, max_len] (AdamW, linear warmup + decay;
the embedding block stays frozen; dropout off: runtimes/_qat.py `thaw` says why) towards the float detector's own
answers (distillation, `--qat-distill`; the rest of the loss on the labels), so the weights learn to live with the
target's rounding at the ranges the integer graph will use, while the weights' fake-quants follow the weights.
(Learning the activation ranges with QAT's moving min-max failed on the me5-small detector: runtimes/ethosu_qat.py
`seed_ranges` says why.) The prepared graph shares its parameters with the detector, so the detector saved at the end
carries the trained weights, and beside it:

    qat.json                  target, device, precision, shapes, the figures below, the ranges' sha256
    qat_ranges.safetensors    the fake-quant modules' ranges, per batch size (runtimes/_qat.py)

`port` on that directory (for the same target) builds each shape's graph the same way, loads those ranges and
converts, without calibrating; its manifest's proof adds the trained graph's logits against the integer graph.

Figures, on --val (else the training rows), with the detector's threshold: the float detector before QAT, the
target's fake-quantised graph before training (calibrated ranges, the original weights: what `port` gives without
QAT) and after.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from ..errors import ConfigError
from ..fsio import check_output, staged_output, write_json_atomic
from ..models.detector import load_detector, load_tokenizer
from ..runtimes import _qat, get_runtime, runtime_names
from ..static.adapters import adapt
from ..ui import StepBar
from .data import encode, load_examples
from .metrics import classification_metrics


@dataclass(frozen=True, kw_only=True)
class QatConfig:
    data: str
    out: str
    init: str  # a trained detector directory (with its tokenizer)
    target: str  # a runtime with `qat` (its quantizer's fake-quant modules)
    device: str | None = None  # the runtime's default device
    precision: str | None = None  # int8 (default) or int16
    val: str | None = None
    epochs: int = 2
    lr: float = 2e-5
    batch: int = 16
    max_len: int = 128
    batch_sizes: tuple[int, ...] = (1,)  # the batch sizes `port` will compile: each gets its ranges
    seed: int = 0
    overwrite: bool = False  # replace OUT when it is an earlier npuport output
    distill: float = 1.0  # weight of the float detector's answers in the loss (the rest: the labels)
    int16: tuple[str, ...] = ()  # groups trained (and then ported) at 16-bit activations in an int8 graph

    def __post_init__(self):
        able = runtime_names(qat=True)
        if self.target not in runtime_names() or not get_runtime(self.target).qat:
            raise ConfigError(f"--qat {self.target!r}: quantization-aware training runs through a target's own "
                              f"quantizer; targets that have one: {', '.join(able) or 'none installed'}")
        for name in ("epochs", "batch", "max_len"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} {getattr(self, name)}: must be >= 1")
        if self.batch < 2:  # a batch-1 graph specialises views: train at >= 2, batch 1 takes its ranges after
            raise ConfigError(f"--batch {self.batch}: QAT trains at batch 2 or more (batch 1 gets its ranges after)")
        if not 0 < self.lr < 1:
            raise ConfigError(f"--lr {self.lr}: must be in (0, 1)")
        if not 0 <= self.distill <= 1:
            raise ConfigError(f"--qat-distill {self.distill}: a weight in [0, 1]")
        if not self.batch_sizes or min(self.batch_sizes) < 1:
            raise ConfigError(f"--qat-batch-sizes {self.batch_sizes}: give positive batch sizes, e.g. 1,4")


def _fixed(rows: list[np.ndarray], idx, batch: int, width: int, pad_id: int):
    """One [batch, width] batch of these rows (cut to width); a short batch is filled with copies of its first row,
    whose outputs the caller drops."""
    idx = list(idx) + [idx[0]] * (batch - len(idx))
    ids = np.full((batch, width), pad_id, dtype=np.int64)
    mask = np.zeros_like(ids)
    for r, i in enumerate(idx):
        n = min(len(rows[i]), width)
        ids[r, :n], mask[r, :n] = rows[i][:n], 1
    return torch.from_numpy(ids), torch.from_numpy(mask)


def _logits(fn, rows, batch: int, width: int, pad_id: int) -> np.ndarray:
    out = []
    with torch.no_grad():
        for s in range(0, len(rows), batch):
            idx = list(range(s, min(s + batch, len(rows))))
            ids, mask = _fixed(rows, idx, batch, width, pad_id)
            out.append(fn(ids, mask).float()[: len(idx)].numpy())
    return np.concatenate(out)


def _probs(fn, rows, batch: int, width: int, pad_id: int) -> np.ndarray:
    return torch.softmax(torch.from_numpy(_logits(fn, rows, batch, width, pad_id)), dim=-1)[:, 1].numpy()


def _loss(logits, teacher, labels, distill: float):
    """Distillation from the float detector (KL to its answers), mixed with the labels' cross-entropy: the integer
    graph's job is to keep the float detector's decisions, and labels alone let it drift from them (measured: on the
    me5-small detector, label-only QAT lost decisions it had kept before training)."""
    kd = torch.nn.functional.kl_div(torch.log_softmax(logits, -1), torch.softmax(teacher, -1), reduction="batchmean")
    return distill * kd + (1 - distill) * torch.nn.functional.cross_entropy(logits, labels)


CALIBRATION_ROWS = 64  # rows that calibrate the activation ranges (as `port` calibrates on its rows)


def _prepared(runtime, static, rows, batch: int, width: int, pad_id: int, device: str, precision: str,
              int16: tuple[str, ...] = ()):
    """The target's QAT graph at [batch, width], its activation ranges calibrated on the first rows and held, its
    weight fake-quants primed on the weights (one forward), frozen until training thaws it."""
    n = min(len(rows), CALIBRATION_ROWS)
    calib = [_fixed(rows, list(range(s, min(s + batch, n))), batch, width, pad_id) for s in range(0, n, batch)]
    g = runtime.prepare_qat(static, calib[0], device, precision, calibration=calib, int16=int16)
    _qat.thaw(g)
    with torch.no_grad():
        g(*calib[0])
    _qat.freeze(g)
    return g


def _figures(labels, probs, ref_probs, threshold: float) -> dict:
    m = classification_metrics(labels, probs, threshold)
    agree = float(np.mean((probs >= threshold) == (ref_probs >= threshold)))
    return {"f1": round(m["f1"], 4), "accuracy": round(m["accuracy"], 4), "decisions_kept_vs_float": round(agree, 4),
            "max_abs_prob_diff_vs_float": round(float(np.abs(probs - ref_probs).max()), 4)}


def _train(graph, params, rows, labels, teacher, cfg: QatConfig, pad: int, bar) -> list[float]:
    """AdamW, linear warmup (10 %) and decay, through the fake-quant graph at [batch, max_len]; the loss per step."""
    rng = np.random.default_rng(cfg.seed)
    steps_per_epoch = len(rows) // cfg.batch
    total = steps_per_epoch * cfg.epochs
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.01)
    warm = max(1, total // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min((s + 1) / warm, max(0.0, (total - s) / (total - warm + 1))))
    torch.manual_seed(cfg.seed)
    losses = []
    _qat.thaw(graph)
    for _ in range(cfg.epochs):
        order = rng.permutation(len(rows))
        for s in range(steps_per_epoch):
            idx = order[s * cfg.batch:(s + 1) * cfg.batch]
            ids, mask = _fixed(rows, idx, cfg.batch, cfg.max_len, pad)
            loss = _loss(graph(ids, mask), teacher[idx], torch.from_numpy(labels[idx]), cfg.distill)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            losses.append(round(loss.item(), 5))
            bar.update(len(losses), f"loss {losses[-1]:.4f}")
    bar.close()
    return losses


def _per_batch(runtime, static, graph, rows, cfg: QatConfig, pad: int, device: str, precision: str, progress):
    """The ranges `port` will load, per batch size it compiles: the training graph's, where the graph has the same
    fake-quant modules or differs only by views (runtimes/_qat.py carry), else that graph calibrated under the trained
    weights."""
    width = cfg.max_len
    ranges, signatures, origin = {}, {}, {}
    for b in sorted(set(cfg.batch_sizes)):
        n = min(len(rows), CALIBRATION_ROWS)
        if b == cfg.batch:
            g, origin[b] = graph, "the training graph's"
        else:
            g = runtime.prepare_qat(static, _fixed(rows, [0], b, width, pad), device, precision, int16=cfg.int16)
            if _qat.signature(g) == _qat.signature(graph):
                g.load_state_dict(_qat.state(graph), strict=False)
                origin[b] = f"the training graph's (batch {cfg.batch}: the same fake-quant modules)"
            elif _qat.carry(g, graph) is not None:  # batch 1 specialises views: aligned past them
                origin[b] = (f"the training graph's (batch {cfg.batch}), module by module: this graph has single views "
                             "where that one has clone + view")
            else:  # a graph that differs by more than views: its own calibration under the trained weights
                progress(f"calibrating batch {b}'s graph on {n} rows (its fake-quant modules differ from batch "
                         f"{cfg.batch}'s)")
                g = _prepared(runtime, static, rows, b, width, pad, device, precision, cfg.int16)
                origin[b] = f"calibrated on {n} training rows with the trained weights (its graph differs)"
        ranges[b], signatures[b] = _qat.state(g), _qat.signature(g)
    return ranges, signatures, origin


def qat_train(cfg: QatConfig, progress=lambda m: None, show_bar: bool = True) -> dict:
    t0 = time.perf_counter()
    check_output(Path(cfg.out), overwrite=cfg.overwrite)  # before the training, not after it
    runtime = get_runtime(cfg.target)
    runtime.require()
    device = cfg.device or runtime.default_device()
    precision = cfg.precision or "int8"
    if precision not in runtime.precisions(device):
        raise ConfigError(f"--precision {precision}: {cfg.target} offers {', '.join(runtime.precisions(device))}")
    model = load_detector(cfg.init)
    tokenizer = load_tokenizer(cfg.init)
    if tokenizer is None:
        raise ConfigError(f"--init {cfg.init}: no tokenizer beside the model (QAT encodes --data with it)")
    train = load_examples(cfg.data, require_label=True)
    val = load_examples(cfg.val, require_label=True) if cfg.val else train
    rows, vrows = encode(tokenizer, train, cfg.max_len), encode(tokenizer, val, cfg.max_len)
    labels = np.array([e.label for e in train], dtype=np.int64)
    vlabels = np.array([e.label for e in val], dtype=np.int64)
    if len(rows) < cfg.batch:
        raise ConfigError(f"--data has {len(rows)} rows, fewer than --batch {cfg.batch}")
    pad, width, thr = int(model.config.pad_token_id or 0), cfg.max_len, model.spec.threshold
    model.eval()
    float_probs = _probs(model, vrows, cfg.batch, width, pad)
    # the float detector's own answers on the training rows: what the integer graph is trained to keep (distilled)
    teacher = torch.from_numpy(_logits(model, rows, cfg.batch, width, pad))

    mixed = f", 16-bit activations in {','.join(cfg.int16)}" if cfg.int16 else ""
    progress(f"preparing {cfg.target} ({device}, {precision}{mixed}) fake-quantisation at {cfg.batch}x{width}")
    static, _ = adapt(model, "dense")
    graph = _prepared(runtime, static, rows, cfg.batch, width, pad, device, precision, cfg.int16)
    _qat.trainable(graph)
    frozen = {p.data_ptr() for n, p in model.named_parameters() if "embeddings" in n}
    params = [p for p in graph.parameters() if p.data_ptr() not in frozen]
    for p in graph.parameters():
        p.requires_grad_(p.data_ptr() not in frozen)
    before = _figures(vlabels, _probs(graph, vrows, cfg.batch, width, pad), float_probs, thr)

    bar = StepBar("QAT", len(rows) // cfg.batch * cfg.epochs, enabled=show_bar, sink=None if show_bar else progress)
    losses = _train(graph, params, rows, labels, teacher, cfg, pad, bar)
    _qat.freeze(graph)
    after = _figures(vlabels, _probs(graph, vrows, cfg.batch, width, pad), float_probs, thr)

    ranges, signatures, origin = _per_batch(runtime, static, graph, rows, cfg, pad, device, precision, progress)

    with staged_output(cfg.out, overwrite=cfg.overwrite, what="qat") as out:
        model_dir = out / "model"
        model.save_pretrained(model_dir, tokenizer=tokenizer)
        sha = _qat.save(model_dir, ranges, signatures)
        info = {"target": cfg.target, "device": device, "precision": precision, "int16": list(cfg.int16),
                "shape": [cfg.batch, width],
                "batch_sizes": sorted(ranges), "ranges_origin": {str(b): o for b, o in origin.items()},
                "ranges_sha256": sha, "init": str(Path(cfg.init).resolve()), "config": asdict(cfg),
                "steps": len(losses), "loss_first": losses[0] if losses else None, "loss_last": losses[-1] if losses else None,
                "eval_rows": len(vrows), "eval_on": "--val" if cfg.val else "the training rows",
                "float": _figures(vlabels, float_probs, float_probs, thr),
                "fake_quant_before": before, "fake_quant_after": after, "seconds": round(time.perf_counter() - t0, 1)}
        write_json_atomic(model_dir / _qat.INFO_FILE, info)
        write_json_atomic(out / "losses.json", {"loss": losses})
    return info
