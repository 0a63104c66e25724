"""Calibration batches for static quantisation: the user's token rows cut to one compiled shape, else random probes.

Static int8 / int16 fixes every activation's range ahead of time, so the rows that set those ranges should look like
what the model will see: `--calibration-data`, else `--eval-data`. Without either, random-token probes (no padding,
half, heavy padding) still exercise every path; the manifest names which one was used.
"""

from __future__ import annotations

import numpy as np
import torch

from .capture import make_probes

MAX_ROWS = 64  # enough rows to settle min/max and percentile ranges; more only slows the compile


def batches(model, shape: tuple[int, int], rows=(), max_rows: int = MAX_ROWS) -> list[tuple[torch.Tensor, torch.Tensor]]:
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
