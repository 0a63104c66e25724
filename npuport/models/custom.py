"""A user's own PyTorch module as a port source (`npuport.port(model, ...)`).

Any `nn.Module` whose `forward(input_ids, attention_mask)` returns logits (B, C) and which holds one supported Hugging
Face backbone somewhere inside (ModernBERT / mmBERT, BERT, XLM-R, RoBERTa, DistilBERT). Whatever is around the
backbone - attention pooling, CLS, several heads concatenated - is the user's code and stays as written: the adapter
patches the backbone in place, on a copy (static/adapters.py `StaticModule`), and every proof compares against the
user's own module, unmodified.

`UserModel` gives that module the interface the port stages read from a detector: `config` and `model_type` (the
backbone's), `spec` (labels, problem type: a ClassifierSpec whose head names the user's class), `forward`.
"""

from __future__ import annotations

import torch
from torch import nn

from ..errors import ConfigError, UnsupportedArchitecture
from ..task import PROBLEM_TYPES, REGRESSION, SINGLE
from .base import BackboneView
from .classifier import ClassifierSpec
from .detector import SUPPORTED_MODEL_TYPES


def logits_of(out, owner: str) -> torch.Tensor:
    """The module's output must be logits (B, C): a clear error for anything else (a ModelOutput, a tuple, 1-D)."""
    if not isinstance(out, torch.Tensor) or out.dim() != 2 or not out.is_floating_point():
        what = f"a {out.dim()}-D {out.dtype} tensor" if isinstance(out, torch.Tensor) else f"a {type(out).__name__}"
        raise ConfigError(f"{owner}.forward(input_ids, attention_mask) must return logits, a float tensor (B, C); "
                          f"it returned {what}")
    return out


def find_backbone(module: nn.Module) -> tuple[str, nn.Module]:
    """(attribute path, backbone): the one Hugging Face base model inside `module` (a `*ForSequenceClassification`
    inside counts by its base model)."""
    from transformers import PreTrainedModel

    owner = type(module).__name__
    bases = [(n, m) for n, m in module.named_modules() if isinstance(m, PreTrainedModel) and m.base_model is m]
    if not bases:
        raise UnsupportedArchitecture(
            f"{owner} holds no Hugging Face backbone: npuport ports modules built around one of "
            f"{', '.join(SUPPORTED_MODEL_TYPES)} (e.g. self.backbone = AutoModel.from_pretrained(DIR) or "
            "AutoModel.from_config(config)); other architectures have no adapter")
    if len(bases) > 1:
        names = ", ".join(n or "(the module itself)" for n, _ in bases)
        raise UnsupportedArchitecture(f"{owner} holds {len(bases)} Hugging Face backbones ({names}); npuport adapts "
                                      "one backbone per module: port each encoder on its own")
    path, bb = bases[0]
    model_type = getattr(bb.config, "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise UnsupportedArchitecture(
            f"{owner}.{path or 'self'} is a {type(bb).__name__} (model_type {model_type!r}), which npuport has no "
            f"adapter for; supported backbones: {', '.join(SUPPORTED_MODEL_TYPES)}")
    return path, bb


class UserModel(BackboneView, nn.Module):
    """The user's module (registered as `user`, so the state fingerprint covers every weight it has) with the
    interface the port stages read: `config`, `model_type`, `spec`, `forward(ids, mask) -> logits`."""

    def __init__(self, module: nn.Module, *, labels: tuple[str, ...] | None = None, problem_type: str = SINGLE,
                 threshold: float = 0.5):
        super().__init__()
        if not isinstance(module, nn.Module):
            raise ConfigError(f"npuport.port takes a torch.nn.Module (or a model directory), not a {type(module).__name__}")
        if problem_type not in PROBLEM_TYPES:
            raise ConfigError(f"problem_type {problem_type!r}: use one of {', '.join(PROBLEM_TYPES)}")
        self.user = module
        self.backbone_path, bb = find_backbone(module)
        cls = type(module)
        num = self._num_labels(bb)
        if labels is None:
            labels = tuple(f"LABEL_{i}" for i in range(num))  # the detector view: labels=("in_persona", "deviation")
        labels = tuple(str(x) for x in labels)
        if len(labels) != num:
            raise ConfigError(f"{len(labels)} labels given ({', '.join(labels)}) but {cls.__name__} returns {num} logits")
        if problem_type == REGRESSION and threshold != 0.5:
            raise ConfigError("threshold applies to classification, not regression")
        limit = int(getattr(bb.config, "max_position_embeddings", 512) or 512)
        self.spec = ClassifierSpec(num_labels=num, labels=labels, problem_type=problem_type,
                                   head=f"module:{cls.__module__}.{cls.__qualname__}", pooling="module",
                                   threshold=threshold, max_length=min(limit, 8192))

    def _num_labels(self, bb: nn.Module) -> int:
        """C, from one short forward of the user's module (eval mode, no grad)."""
        cfg = bb.config
        pad = int(cfg.pad_token_id if cfg.pad_token_id is not None else 0)
        ids = torch.full((1, 8), pad, dtype=torch.long)
        ids[0, :4] = torch.tensor([min(5 + i, cfg.vocab_size - 1) for i in range(4)])
        mask = (torch.arange(8) < 4).long()[None]
        was = self.user.training
        self.user.eval()
        try:
            with torch.no_grad():
                out = logits_of(self.user(ids, mask), type(self.user).__name__)
        finally:
            self.user.train(was)
        return int(out.shape[-1])

    @property
    def backbone(self) -> nn.Module:
        return self.user.get_submodule(self.backbone_path)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return logits_of(self.user(input_ids, attention_mask), type(self.user).__name__)

    def save_pretrained(self, directory, tokenizer=None):
        raise ConfigError(f"a {type(self.user).__name__} module object has no model-directory form (its class is your "
                          "code): runtimes that save the source model (eager) cannot port it; compile it to a graph "
                          "runtime (onnxruntime, openvino, ...)")
