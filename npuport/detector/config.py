"""The detector's training config: one frozen dataclass, validated before anything is written."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError
from ..runtimes import train_precision
from ..train.select import training_runtimes
from .static_train import train_buckets


@dataclass(frozen=True, kw_only=True)
class DetectorTrainConfig:
    """`npuport detector train`: fine-tune a detector (eager, or its step captured as static graphs with --runtime)."""

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
    # None: the eager trainer below. A runtime name: the step captured as static graphs, one per length bucket
    # (detector/static_train.py); "eager" runs that same static schedule in PyTorch, the control.
    runtime: str | None = None
    buckets: tuple[int, ...] | None = None  # static training shapes (default 32/64/128/256 up to max_len)
    gather_free: bool = False  # the embedding lookup as a one-hot MatMul in the graph (NPUs without Gather)
    precision: str | None = None  # on --runtime: None = the runtime's own; bf16 = mixed precision (fp32 weights, AdamW)
    threads: int | None = None

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
        if self.runtime is None and (self.buckets or self.gather_free or self.precision not in (None, "fp32")):
            raise ConfigError("--buckets, --gather-free and --precision shape the captured step: they need --runtime")
        if self.runtime is not None:
            if self.runtime not in training_runtimes():
                raise ConfigError(f"--runtime {self.runtime!r} cannot run a training step; "
                                  f"choose one of {', '.join(training_runtimes())}")
            object.__setattr__(self, "precision", train_precision(self.runtime, self.precision))
            train_buckets(self.max_len, self.buckets)  # validated now, before anything is written
