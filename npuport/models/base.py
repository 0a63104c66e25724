"""Helpers every encoder model file shares (detector.py and classifier.py both use them; neither imports the other
for these)."""

from __future__ import annotations


def max_positions_of(cfg) -> int:
    """The longest input a Hugging Face encoder config accepts, in tokens."""
    n = getattr(cfg, "max_position_embeddings", None) or 512
    if cfg.model_type in ("xlm-roberta", "roberta"):
        n -= 2  # RoBERTa position ids start after padding_idx
    return int(n)
