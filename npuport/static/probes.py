"""Inputs for proofs and calibration: random-token probes at a compiled shape, and the user's rows cut to it.

Probes: n distinct (input_ids, attention_mask) pairs per shape (no padding, half, heavy padding), so a proof sees
different tokens and padding lengths. Calibration: static int8 / int16 fixes every activation's range ahead of time,
so the rows that set those ranges should look like what the model will see: `--calibration-data`, else
`--eval-data`. Without either, random-token probes still exercise every path; the manifest names which one was used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from ..models.detector import Detector


def make_probes(model: Detector, batch: int, seq: int, seed: int = 0, n: int = 3) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """n distinct (input_ids, attention_mask) pairs of shape (batch, seq): no padding, half, heavy padding.

    Rows within a batch get different lengths too, so batching bugs show. Token ids avoid special ids.
    """
    cfg = model.config
    vocab = cfg.vocab_size
    pad = cfg.pad_token_id if cfg.pad_token_id is not None else 0
    cls_id = getattr(cfg, "cls_token_id", None) or getattr(cfg, "bos_token_id", None) or 1
    sep_id = getattr(cfg, "sep_token_id", None) or getattr(cfg, "eos_token_id", None) or 2
    g = torch.Generator().manual_seed(seed * 1000 + seq * 7 + batch)
    fractions = [1.0, 0.5, 0.1, 0.8, 0.3][: max(n, 3)]
    probes = []
    for k, frac in enumerate(fractions):
        ids = torch.randint(10, vocab, (batch, seq), generator=g)
        mask = torch.zeros(batch, seq, dtype=torch.long)
        for r in range(batch):
            length = max(2, int(round(seq * frac)) - r * max(1, seq // (4 * batch)))
            length = min(seq, length)
            mask[r, :length] = 1
            ids[r, 0] = cls_id
            ids[r, length - 1] = sep_id
            ids[r, length:] = pad
        probes.append((ids, mask))
    return probes


MAX_ROWS = 64  # enough rows to settle min/max and percentile ranges; more only slows the compile


def calibration_batches(model, shape: tuple[int, int], rows=(), max_rows: int = MAX_ROWS) -> list[tuple[torch.Tensor, torch.Tensor]]:
    b, t = shape
    if not len(rows):
        return make_probes(model, b, t, seed=0, n=5) + make_probes(model, b, t, seed=1, n=5)
    pad = int(model.config.pad_token_id or 0)
    rows = list(rows)[:max_rows]
    out = []
    for i in range(0, len(rows), b):
        chunk = rows[i:i + b]
        chunk = [chunk[k % len(chunk)] for k in range(b)]  # a short last batch repeats its own rows
        ids = np.full((b, t), pad, dtype=np.int64)
        mask = np.zeros((b, t), dtype=np.int64)
        for r, row in enumerate(chunk):
            row = np.asarray(row, dtype=np.int64)[:t]
            ids[r, : len(row)], mask[r, : len(row)] = row, 1
        out.append((torch.from_numpy(ids), torch.from_numpy(mask)))
    return out
