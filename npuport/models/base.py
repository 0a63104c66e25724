"""Helpers every encoder model file shares (detector.py and classifier.py both use them; neither imports the other
for these)."""

from __future__ import annotations


def max_positions_of(cfg) -> int:
    """The longest input a Hugging Face encoder config accepts, in tokens."""
    n = getattr(cfg, "max_position_embeddings", None) or 512
    if cfg.model_type in ("xlm-roberta", "roberta"):
        n -= 2  # RoBERTa position ids start after padding_idx
    return int(n)


class BackboneView:
    """`config` and `model_type` read from the model's `backbone`: the detector's own, or the one inside a user's
    module (models/custom.py). A mixin before nn.Module: nn.Module resolves `backbone` as a submodule or property."""

    @property
    def config(self):
        return self.backbone.config

    @property
    def model_type(self) -> str:
        return self.backbone.config.model_type
