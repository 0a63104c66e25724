"""Banded attention for sliding-window layers (`--attention banded`): the same result as dense masked attention,
with a fraction of the arithmetic.

A sliding-window layer lets token q see keys with |q - k| <= w (ModernBERT: w = local_attention // 2). Dense
attention still computes all T x T scores and masks most of them away. Banded attention cuts the sequence into
blocks of b = w tokens; block i only needs keys of blocks i-1, i and i+1 (3b keys), so each layer computes
T x 3b scores instead of T x T (at T = 512, w = 64: 37.5 %). Global layers keep dense SDPA.

Not bit-exact: the masked keys dense attention drops contribute exactly 0 either way, but the GEMM that forms
the scores and the softmax's sum run over differently shaped operands, so results differ in the last bits
(fp32 rounding on logits; the capture proof records the figure, and `--attention dense`, the default,
stays exact).

Shapes stay static: the band is built from Python ints, so it applies only when the sequence length is a
concrete number at capture time (one compiled length). A symbolic length (one ONNX file shared by several
buckets) falls back to dense, as does any length where the band would not compute fewer scores (T <= 3b).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..errors import ConfigError
from ..spec import ATTENTION_FORMS  # noqa: F401 - where callers have found it

IMPLEMENTATION = "npuport_banded"  # the name registered with transformers' AttentionInterface


def applies(seq: object, window: int) -> bool:
    """Banded computes fewer scores than dense at this (concrete) length: T > 3 blocks of `window` tokens."""
    return isinstance(seq, int) and window >= 1 and seq > 3 * window


def check(model_type: str, layer_types, window: int | None, buckets: tuple[int, ...], tf_version: str) -> None:
    """Refuse `--attention banded` where it cannot apply, before anything is written (ConfigError names the fix).
    `buckets` empty: the model alone is checked (the adapter; the compiled lengths are checked at port time)."""
    if not tf_version.startswith(("5.", "6.")):
        raise ConfigError(f"--attention banded needs transformers >= 5 (this is {tf_version}, whose ModernBERT builds "
                          "its own masks); use --attention dense")
    if not layer_types or "sliding_attention" not in layer_types or window is None:
        raise ConfigError(f"--attention banded is for sliding-window models (ModernBERT, mmBERT); {model_type} "
                          "attends globally in every layer: use --attention dense")
    if len(buckets) > 1:
        raise ConfigError(f"--attention banded needs one compiled length (--seq-len N): buckets {','.join(map(str, buckets))} "
                          "share one graph with a symbolic length, where the band's block layout cannot be fixed; "
                          "use --attention dense with buckets, or port one length")
    if buckets and not applies(buckets[0], window):
        raise ConfigError(f"--attention banded changes nothing at length {buckets[0]}: it computes fewer scores only "
                          f"above {3 * window} tokens (3 x the half-window {window}); use --attention dense")


def _padded(seq: int, b: int) -> int:
    return -(-seq // b) * b


def _windows(x: torch.Tensor, b: int) -> torch.Tensor:
    """(B, ..., T, C) with T a multiple of b -> (B, ..., T/b, 3b, C): for block i, the rows of blocks i-1, i, i+1
    (zeros beyond either end). Pads, slices, reshapes and one concat, the batch left as -1 (a graph compiled for
    several batch sizes keeps it symbolic): every static-graph runtime lowers them."""
    T, C = x.shape[-2], x.shape[-1]
    nb = T // b
    blocks = (-1, *x.shape[1:-2], nb, b, C)
    xp = F.pad(x, (0, 0, b, b))  # (B, ..., T + 2b, C)
    prev = xp[..., 0:T, :].reshape(blocks)
    cur = x.reshape(blocks)
    nxt = xp[..., 2 * b:2 * b + T, :].reshape(blocks)
    return torch.cat([prev, cur, nxt], dim=-2)


def banded_mask(attention_mask: torch.Tensor, window: int) -> torch.Tensor:
    """(B, T) padding mask -> boolean (B, 1, T'/b, b, 3b) band mask, T' = T rounded up to a multiple of b = window.

    Key c of block i's window is token (i - 1) * b + c; query r of block i is token i * b + r; so q - k = r - c + b,
    the same for every block. Visible: a real key with |q - k| <= window, and always the query itself (the diagonal,
    as in `adapters.padding_masks`: a padding row then sees one key, never none)."""
    T = attention_mask.shape[1]
    b = window
    Tp = _padded(T, b)
    keys = F.pad(attention_mask.bool(), (0, Tp - T))  # (B, T'): tokens past T are padding
    kwin = _windows(keys[:, :, None], b)[..., 0]  # (B, T'/b, 3b)
    r = torch.arange(b, device=attention_mask.device)[:, None]
    c = torch.arange(3 * b, device=attention_mask.device)[None, :]
    band = (r - c + b).abs() <= window  # (b, 3b)
    diag = c == r + b
    return ((kwin[:, None, :, None, :] & band) | diag)  # (B, 1, T'/b, b, 3b)


def banded_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    """transformers AttentionInterface function: banded for a 5-D band mask (from `banded_mask`, boolean or
    additive), HF's own SDPA function for anything else (global layers, and every mask HF builds itself — so the
    unmodified model's own forward is unchanged by registering this)."""
    if not (isinstance(attention_mask, torch.Tensor) and attention_mask.dim() == 5):
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    _, H, T, D = query.shape  # (B, H, T, D); the batch stays -1 below
    b = attention_mask.shape[-2]
    Tp = attention_mask.shape[2] * b
    if Tp != T:  # zero rows past T: their keys are masked out, their outputs sliced off below
        query, key, value = (F.pad(t, (0, 0, 0, Tp - T)) for t in (query, key, value))
    q = query.reshape(-1, H, Tp // b, b, D)
    scale = D ** -0.5 if scaling is None else scaling
    scores = torch.matmul(q, _windows(key, b).transpose(-1, -2)) * scale  # (B, H, T'/b, b, 3b)
    if attention_mask.dtype == torch.bool:
        scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
    else:
        scores = scores + attention_mask
    probs = torch.softmax(scores, dim=-1)
    if dropout and module.training:
        probs = F.dropout(probs, p=dropout)
    out = torch.matmul(probs, _windows(value, b))  # (B, H, T'/b, b, D)
    out = out.reshape(-1, H, Tp, D)[:, :, :T]
    return out.transpose(1, 2).contiguous(), None  # (B, T, H, D), as HF's SDPA function returns it


def register() -> None:
    """Make `IMPLEMENTATION` a name `set_attn_implementation` accepts (idempotent). The mask HF builds for it is
    SDPA's: without that entry HF builds no mask at all for an unknown implementation (padding would leak)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    AttentionInterface.register(IMPLEMENTATION, banded_attention)
    AttentionMaskInterface.register(IMPLEMENTATION, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
