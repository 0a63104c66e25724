"""Stock Hugging Face sequence classifiers, head included.

A user's fine-tuned `ModernBertForSequenceClassification` (or BERT, XLM-RoBERTa, RoBERTa, DistilBERT) is ported
as it is: the backbone goes through the same static-graph adapter as the detector's, and the classifier's own
pooling and head follow, written out per architecture so the graph computes exactly what HF's `forward` does
(CLS or mean pooling per `classifier_pooling`, BERT's pooler, RoBERTa's classification head, DistilBERT's
pre-classifier). `forward` is HF's own forward: the reference every proof compares against.

BERT-style models read `token_type_ids`; the graph takes only `input_ids` + `attention_mask`, so where the model's
tokenizer makes segment ids they are rebuilt in-graph from the ids exactly as it makes them for a pair
([CLS] A [SEP] = 0, B [SEP] = 1). A directory without a tokenizer gets zeros, as HF does when none are passed.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from ..errors import ConfigError, ModelLoadError, UnsupportedArchitecture
from ..fsio import atomic_write, save_with
from ..registry import Registry
from ..task import PROBLEM_TYPES, REGRESSION, SINGLE
from .base import max_positions_of

CONFIG_NAME, WEIGHTS_NAME = "config.json", "model.safetensors"
SEGMENT_KEY = "npuport_segment_sep_id"  # config attribute: [SEP]'s id when the tokenizer makes token_type_ids


@dataclass(frozen=True, kw_only=True)
class ClassifierSpec:
    """What the manifest records of a stock classifier's head (the `detector` block of an artifact)."""

    num_labels: int
    labels: tuple[str, ...]
    problem_type: str
    head: str  # e.g. "hf:BertForSequenceClassification"
    pooling: str  # cls | mean | pooler (BERT's dense+tanh on [CLS])
    threshold: float = 0.5
    max_length: int = 512

    def __post_init__(self):
        if self.problem_type not in PROBLEM_TYPES:
            raise ConfigError(f"problem_type {self.problem_type!r}: use one of {', '.join(PROBLEM_TYPES)}")
        if len(self.labels) != self.num_labels:
            raise ConfigError(f"{len(self.labels)} label names for num_labels={self.num_labels}")

    def to_json(self) -> dict:
        d = asdict(self)
        d["labels"] = list(self.labels)
        return d


HeadFn = Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]
HEADS: Registry[tuple[str, HeadFn]] = Registry("classifier head")  # model_type -> (pooling name, head)


def _modernbert(task: nn.Module, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    if task.config.classifier_pooling == "cls":
        pooled = hidden[:, 0]
    else:  # "mean", written as HF writes it so the numbers are the same
        pooled = (hidden * mask.unsqueeze(-1)).sum(dim=1) / mask.sum(dim=1, keepdim=True)
    return task.classifier(task.drop(task.head(pooled)))


def _bert(task: nn.Module, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return task.classifier(task.dropout(task.bert.pooler(hidden)))


def _roberta(task: nn.Module, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return task.classifier(hidden)  # RobertaClassificationHead: [CLS] -> dense -> tanh -> out_proj


def _distilbert(task: nn.Module, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return task.classifier(task.dropout(torch.relu(task.pre_classifier(hidden[:, 0]))))


HEADS.register("modernbert", ("per classifier_pooling", _modernbert))
HEADS.register("bert", ("pooler", _bert))
HEADS.register("roberta", ("cls", _roberta))
HEADS.register("xlm-roberta", ("cls", _roberta))
HEADS.register("distilbert", ("cls", _distilbert))


def segment_ids(input_ids: torch.Tensor, attention_mask: torch.Tensor, sep_id: int) -> torch.Tensor:
    """token_type_ids as a tokenizer makes them for [CLS] A [SEP] B [SEP]: 1 after the first [SEP], 0 elsewhere
    (and on padding). Static: a cumulative sum, no data-dependent shape."""
    is_sep = (input_ids == sep_id).long()
    after_first = (torch.cumsum(is_sep, dim=1) - is_sep) > 0
    return (after_first & attention_mask.bool()).long()


class HFClassifier(nn.Module):
    """Same interface as `Detector` (backbone, spec, pool_and_head, forward), around a stock HF task model."""

    def __init__(self, task_model: nn.Module, spec: ClassifierSpec):
        super().__init__()
        mt = task_model.config.model_type
        if mt not in HEADS:
            raise UnsupportedArchitecture(f"no classifier head for model_type {mt!r}; supported: {', '.join(HEADS.names())}")
        self.task = task_model
        self.spec = spec
        self._head = HEADS.get(mt)[1]

    @property
    def backbone(self) -> nn.Module:  # a property, not a second registered name: state_dict keys stay HF's own
        return getattr(self.task, self.task.base_model_prefix)

    @property
    def config(self):
        return self.task.config

    @property
    def model_type(self) -> str:
        return self.task.config.model_type

    def extra_inputs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict:
        sep = getattr(self.task.config, SEGMENT_KEY, None)
        return {} if sep is None else {"token_type_ids": segment_ids(input_ids, attention_mask, int(sep))}

    def pool_and_head(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self._head(self.task, hidden, attention_mask)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.task(input_ids=input_ids, attention_mask=attention_mask,
                         **self.extra_inputs(input_ids, attention_mask)).logits

    def save_pretrained(self, directory: str | os.PathLike, tokenizer=None) -> Path:
        """A standard HF directory (config.json with architectures + id2label, model.safetensors)."""
        from safetensors.torch import save_file

        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        atomic_write(out / CONFIG_NAME, self.task.config.to_json_string())
        state = {k: v.detach().contiguous() for k, v in self.task.state_dict().items()}
        save_with(out / WEIGHTS_NAME, lambda tmp: save_file(state, str(tmp), metadata={"format": "pt"}))
        if tokenizer is not None:
            tokenizer.save_pretrained(str(out))
        return out


def is_sequence_classifier(raw_config: dict) -> bool:
    return any(str(a).endswith("ForSequenceClassification") for a in raw_config.get("architectures") or [])


def spec_of(config, max_length: int) -> ClassifierSpec:
    n = int(config.num_labels)
    problem = config.problem_type or (REGRESSION if n == 1 else SINGLE)
    id2label = {int(k): str(v) for k, v in (config.id2label or {}).items()}
    labels = tuple(id2label.get(i, f"LABEL_{i}") for i in range(n))
    pooling = HEADS.get(config.model_type)[0]
    if config.model_type == "modernbert":
        pooling = config.classifier_pooling
    return ClassifierSpec(num_labels=n, labels=labels, problem_type=problem, pooling=pooling, max_length=max_length,
                          head=f"hf:{(config.architectures or ['?'])[0]}")


def build_classifier(config, state: dict | None, where: Path | str = "") -> HFClassifier:
    """The task model from its config, its weights loaded strictly: a head must be in the checkpoint."""
    from transformers import AutoModelForSequenceClassification

    if config.model_type not in HEADS:
        raise UnsupportedArchitecture(f"no classifier head for model_type {config.model_type!r}; supported: "
                                      f"{', '.join(HEADS.names())}")
    task = AutoModelForSequenceClassification.from_config(config, attn_implementation="sdpa")
    if state is not None:
        own = task.state_dict()
        missing = [k for k in own if k not in state and "position_ids" not in k and "inv_freq" not in k]
        unexpected = [k for k in state if k not in own]
        head_missing = [k for k in missing if not k.startswith(task.base_model_prefix + ".")]
        if head_missing:
            raise ModelLoadError(f"{where} says {config.architectures[0]} but its weights have no classification head "
                                 f"({head_missing[:3]}); pass --new-head to start one for training")
        if missing or unexpected:
            raise ModelLoadError(f"{where}: {len(missing)} missing / {len(unexpected)} unexpected weights, e.g. "
                                 f"{(missing + unexpected)[:3]}: is it the right model?")
        task.load_state_dict(state, strict=False)

    spec = spec_of(config, max_positions_of(config))
    return HFClassifier(task.eval(), spec).eval()


def headless_error(where: Path, raw: dict) -> ModelLoadError:
    arch = ", ".join(raw.get("architectures") or []) or f"a {raw.get('model_type')} backbone"
    return ModelLoadError(
        f"{where} is {arch} with no classification head; porting a random head would prove nothing. Port a fine-tuned "
        "*ForSequenceClassification checkpoint, or pass --new-head to start a new head (e.g. for `npuport detector "
        "train --init`)")

