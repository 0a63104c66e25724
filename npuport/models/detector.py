"""Persona-deviation detector: any HF encoder backbone + masked mean pooling + Linear(hidden, 2).

Stored as a standard Hugging Face directory: `config.json` (the backbone config plus an `npuport_detector`
block), `model.safetensors` (keys `backbone.*`, `head.*`) and tokenizer files.

`load_detector` also loads what users bring: a stock `*ForSequenceClassification` checkpoint keeps its own head
(`models/classifier.py`); a plain backbone (e.g. a downloaded mmBERT directory) is refused unless `new_head=True`
(`--new-head`) asks for a new random head to train, because a port of a random head proves nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import ConfigError, ModelLoadError
from ..fsio import atomic_write, save_with
from .base import BackboneView, max_positions_of
from .mapped import assign_state
from .presets import PRESETS, Preset  # noqa: F401 - re-exported: callers import them from here

log = logging.getLogger(__name__)

LABELS = ("in_persona", "deviation")  # index 1 = the reply broke persona
WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "config.json"
DETECTOR_KEY = "npuport_detector"
SUPPORTED_MODEL_TYPES = ("modernbert", "bert", "xlm-roberta", "roberta", "distilbert")


@dataclass(frozen=True, kw_only=True)
class DetectorSpec:
    """Detector fields kept in config.json next to the backbone config."""

    num_labels: int = 2
    pooling: str = "mean"
    max_length: int = 512
    threshold: float = 0.5
    labels: tuple[str, ...] = LABELS
    problem_type: str = "single_label_classification"
    head: str = "npuport:mean-linear"

    def __post_init__(self):
        if self.num_labels != 2:
            raise ConfigError(f"num_labels={self.num_labels}: the detector is binary, use 2")
        if self.pooling != "mean":
            raise ConfigError(f"pooling={self.pooling!r}: only masked 'mean' pooling is implemented")
        if not 0.0 < self.threshold < 1.0:
            raise ConfigError(f"threshold={self.threshold}: must be in (0, 1)")
        if self.problem_type != "single_label_classification" or self.head != "npuport:mean-linear":
            raise ConfigError(f"a detector is single-label with npuport's mean-linear head, not {self.problem_type} / {self.head}")

    def to_json(self) -> dict:
        d = asdict(self)
        d["labels"] = list(self.labels)
        return d


def masked_mean(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T, C), (B, T) -> (B, C): mean over real tokens only; padding never leaks into the pooled vector."""
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)  # (B, T, 1)
    summed = (hidden * m).sum(dim=1)  # (B, C)
    count = m.sum(dim=1).clamp(min=1.0)  # (B, 1); clamp keeps an all-padding row finite
    return summed / count


class Detector(BackboneView, nn.Module):
    """`forward` is the eager reference: the HF backbone exactly as a user runs it (SDPA attention)."""

    def __init__(self, backbone_config: Any, spec: DetectorSpec | None = None):
        super().__init__()
        from transformers import AutoModel

        self.spec = spec or DetectorSpec()
        self.backbone = AutoModel.from_config(backbone_config, attn_implementation="sdpa")
        hidden = backbone_config.hidden_size if hasattr(backbone_config, "hidden_size") else backbone_config.dim
        self.head = nn.Linear(hidden, self.spec.num_labels)

    def extra_inputs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict:
        return {}  # the detector's backbone reads ids and mask only (segment ids stay 0, as in training)

    def pool_and_head(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.head(masked_mean(hidden, attention_mask))  # (B, 2)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        out = self.backbone(input_ids=input_ids, attention_mask=attention_mask)
        return self.pool_and_head(out.last_hidden_state, attention_mask)

    # -- persistence -------------------------------------------------------------------------------------
    def save_pretrained(self, directory: str | os.PathLike, tokenizer: Any = None) -> Path:
        from safetensors.torch import save_file

        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        cfg = self.backbone.config.to_dict()
        cfg[DETECTOR_KEY] = self.spec.to_json()
        cfg["architectures"] = ["NpuportPersonaDetector"]
        atomic_write(out / CONFIG_NAME, json.dumps(cfg, indent=2, sort_keys=True))
        state = {k: v.detach().contiguous() for k, v in self.state_dict().items()}
        save_with(out / WEIGHTS_NAME, lambda tmp: save_file(state, str(tmp), metadata={"format": "pt", "npuport": "detector"}))
        if tokenizer is not None:
            tokenizer.save_pretrained(str(out))
        return out

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike) -> "Detector":
        return load_detector(directory)


_BACKBONE_PREFIXES = ("model.", "bert.", "roberta.", "distilbert.", "encoder_model.")


# Structural sizes a model is built from: a non-integer here would fail deep inside torch with a bare traceback.
_INT_FIELDS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size",
               "max_position_embeddings", "dim", "n_layers", "n_heads", "hidden_dim")


def _config_validation_error() -> type[Exception]:
    """transformers 5 validates configs through huggingface_hub's strict dataclasses (not a ValueError)."""
    try:
        from huggingface_hub.errors import StrictDataclassError

        return StrictDataclassError
    except ImportError:
        return ValueError


def _check_config_types(config, where: Path) -> None:
    for f in _INT_FIELDS:
        v = getattr(config, f, None)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v <= 0):
            raise ValueError(f"{f} = {v!r} in {where} must be a positive integer")


def load_detector(directory: str | os.PathLike, *, new_head: bool = False):
    """A detector directory -> Detector; a stock `*ForSequenceClassification` checkpoint -> HFClassifier with its
    own head; a plain backbone -> Detector with a new random head only when `new_head`, else ModelLoadError."""
    from .classifier import build_classifier, headless_error, is_sequence_classifier

    d = Path(directory)
    raw = _read_config(d)
    weights = d / WEIGHTS_NAME
    if not weights.is_file():
        hint = " (pickle checkpoints such as pytorch_model.bin are never loaded; convert to safetensors)" if (
            d / "pytorch_model.bin"
        ).exists() else ""
        raise ModelLoadError(f"{weights} is missing{hint}")
    spec_raw = raw.pop(DETECTOR_KEY, None)
    config, spec = _parse_config(raw, spec_raw, d)
    state = _read_weights(weights)
    if spec_raw is None and is_sequence_classifier(raw) and not new_head:
        _segment_rule(config, d)
        return build_classifier(config, state, d)
    if spec_raw is None and not new_head:
        raise headless_error(d, raw)
    if spec_raw is not None and not any(k.startswith("head.") for k in state):
        raise ModelLoadError(f"{weights} has no head.* weights though {d}/{CONFIG_NAME} describes a detector")
    model = Detector(config, spec)
    if spec_raw is not None:
        missing, unexpected = assign_state(model, state)
    else:
        log.info("%s: loading the backbone only, new head initialised at random (--new-head)", d)
        missing, unexpected = assign_state(model.backbone, _backbone_state(state, model.backbone))
    # Buffers such as rotary inv_freq are recomputed from config; real weights must all be present.
    missing = [k for k in missing if "inv_freq" not in k and "position_ids" not in k]
    if spec_raw is None:  # a new head on a backbone that ships no BERT pooler (e5): the detector never reads it
        missing = [k for k in missing if not k.startswith("pooler.")]
    if missing:
        raise ModelLoadError(f"{weights} lacks {len(missing)} weights, e.g. {missing[:3]}: is it the right model?")
    if unexpected:
        raise ModelLoadError(f"{weights} has {len(unexpected)} unexpected weights, e.g. {list(unexpected)[:3]}")
    return model.eval()


def _read_config(d: Path) -> dict:
    """config.json as a dict of a supported model_type, or a ModelLoadError / UnsupportedArchitecture naming why."""
    if not d.is_dir():
        raise ModelLoadError(f"model directory {str(d)!r} does not exist (give a HF model directory or --preset NAME)")
    if not (d / CONFIG_NAME).is_file():
        raise ModelLoadError(f"{d}/{CONFIG_NAME} is missing: a HF model directory needs config.json and model.safetensors")
    try:
        raw = json.loads((d / CONFIG_NAME).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise ModelLoadError(f"{d}/{CONFIG_NAME} is not valid JSON: {e}") from None
    if not isinstance(raw, dict):
        raise ModelLoadError(f"{d}/{CONFIG_NAME} must hold a JSON object (a HF config), not a {type(raw).__name__}")
    model_type = raw.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        from ..errors import UnsupportedArchitecture

        raise UnsupportedArchitecture(
            f"model_type {model_type!r} in {d}/{CONFIG_NAME} is not supported; supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    return raw


def _parse_config(raw: dict, spec_raw: dict | None, d: Path):
    """(HF config, DetectorSpec) from config.json's fields; a bad field is a ModelLoadError naming the file."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.for_model(**raw)
        _check_config_types(config, d / CONFIG_NAME)
        spec = DetectorSpec(**{**spec_raw, "labels": tuple(spec_raw.get("labels", LABELS))}) if spec_raw else DetectorSpec()
    except (TypeError, ValueError, KeyError, AttributeError, _config_validation_error()) as e:
        raise ModelLoadError(f"{d}/{CONFIG_NAME} is not a valid {raw.get('model_type')} config: {e}") from None
    return config, spec


def _read_weights(weights: Path) -> dict:
    from safetensors import SafetensorError

    from .mapped import map_safetensors

    try:
        return map_safetensors(weights)  # views of the file: see mapped.py
    except (SafetensorError, OSError) as e:
        raise ModelLoadError(f"{weights} is not a readable safetensors file: {e}") from None


def _segment_rule(config, d: Path) -> None:
    """Segment ids only where the model's own tokenizer makes them (BERT does, XLM-R does not); the config does not
    name [SEP], the tokenizer does. Recorded in the config so a saved copy keeps the rule."""
    from .classifier import SEGMENT_KEY

    if getattr(config, "type_vocab_size", 1) > 1 and getattr(config, SEGMENT_KEY, None) is None:
        tok = load_tokenizer(d)
        if tok is not None and "token_type_ids" in tok.model_input_names and tok.sep_token_id is not None:
            setattr(config, SEGMENT_KEY, int(tok.sep_token_id))


def _backbone_state(state: dict, backbone) -> dict:
    """--new-head: a task model's tensors with its prefix stripped, only those the backbone has."""
    own = backbone.state_dict()
    out = {}
    for k, v in state.items():
        for p in _BACKBONE_PREFIXES:
            if k.startswith(p):
                k = k[len(p):]
                break
        if k in own:
            out[k] = v
    return out


def load_tokenizer(directory: str | os.PathLike):
    """The tokenizer saved beside the model, or None when the directory has none."""
    d = Path(directory)
    if not any((d / f).exists() for f in ("tokenizer.json", "vocab.txt", "sentencepiece.bpe.model", "tokenizer.model")):
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(d))


def state_fingerprint(model: nn.Module) -> str:
    """sha256 over every tensor's name, dtype, shape and bytes: identical weights <=> identical hash."""
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        t = t.detach().contiguous().cpu()
        h.update(name.encode())
        h.update(str(t.dtype).encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


# -- presets (their table lives in presets.py, which the CLI's parser reads without importing torch) ----------

def build_preset(name: str, *, seed: int = 0, spec: DetectorSpec | None = None, **overrides) -> Detector:
    """A randomly initialised detector of a preset architecture; same (name, seed, overrides) -> same weights."""
    from transformers import AutoConfig

    preset = PRESETS.get(name)
    config = AutoConfig.for_model(preset.model_type, **{**preset.config, **overrides})
    torch.manual_seed(seed)
    return Detector(config, spec).eval()


def max_positions(model) -> int:
    return max_positions_of(model.config)
