"""Decoder LM (RoPE, SwiGLU, RMSNorm, grouped-query attention) in one file, config dataclass on top.

Written so that one forward can be captured as a static graph in two flavours:
- standard: token embedding by index (Gather), RoPE by `rotate_half` (Slice/Concat);
- `gather_free=True` ("NPU-friendly"): embedding as a one-hot matmul, RoPE's rotation as a fixed (D, D) matmul.
Both compute the same numbers (the one-hot row picks exactly one weight row; the rotation matrix has one ±1
per column), so a run may switch flavours and the loss curve does not move.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConfigError
from .presets import LM_PRESETS as PRESETS  # the table is torch-free, for the CLI


@dataclass(frozen=True, kw_only=True)
class LMConfig:
    vocab_size: int = 96
    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 8
    n_kv_heads: int = 2  # GQA: n_heads / n_kv_heads query heads share one K/V head
    ffn_hidden: int = 704
    max_seq_len: int = 256
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = False
    init_std: float = 0.02

    def __post_init__(self):
        for f in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "ffn_hidden", "max_seq_len"):
            if getattr(self, f) < 1:
                raise ConfigError(f"{f}={getattr(self, f)}: must be a positive integer")
        if self.d_model % self.n_heads:
            raise ConfigError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ConfigError(f"n_heads={self.n_heads} is not divisible by n_kv_heads={self.n_kv_heads}")
        if (self.d_model // self.n_heads) % 2:
            raise ConfigError(f"head_dim={self.d_model // self.n_heads} must be even for RoPE")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "LMConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"unknown LM config keys {unknown}; known: {sorted(known)}")
        return cls(**d)


def preset_config(name: str, vocab_size: int, **overrides) -> LMConfig:
    if name not in PRESETS:
        raise ConfigError(f"unknown LM preset {name!r}; known: {sorted(PRESETS)}")
    return LMConfig(**{**PRESETS[name], "vocab_size": vocab_size, **overrides})


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # Written out (not F.rms_norm) so every exporter sees plain Pow/ReduceMean/Rsqrt/Mul.
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * weight  # x*x: Pow is slow in runtimes


def rope_tables(cfg: LMConfig, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of shape (T, head_dim), rotate-half layout (frequencies repeated over both halves)."""
    half = cfg.head_dim // 2
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, half, dtype=torch.float64) / half))
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float64), inv_freq)  # (T, half)
    angles = torch.cat([angles, angles], dim=-1)  # (T, D)
    return angles.cos().float(), angles.sin().float()


def rotation_matrix(head_dim: int) -> torch.Tensor:
    """R with x @ R == rotate_half(x) == cat(-x[D/2:], x[:D/2]): one ±1 per column, so the matmul is exact."""
    half = head_dim // 2
    r = torch.zeros(head_dim, head_dim)
    idx = torch.arange(half)
    r[idx + half, idx] = -1.0  # out[:, j] = -x[:, j + half]  for j < half
    r[idx, idx + half] = 1.0  # out[:, j + half] = x[:, j]
    return r


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


class Block(nn.Module):
    def __init__(self, cfg: LMConfig):
        super().__init__()
        d, hd = cfg.d_model, cfg.head_dim
        self.attn_norm = nn.Parameter(torch.ones(d))
        self.wq = nn.Linear(d, cfg.n_heads * hd, bias=False)
        self.wk = nn.Linear(d, cfg.n_kv_heads * hd, bias=False)
        self.wv = nn.Linear(d, cfg.n_kv_heads * hd, bias=False)
        self.wo = nn.Linear(cfg.n_heads * hd, d, bias=False)
        self.mlp_norm = nn.Parameter(torch.ones(d))
        self.w_gate = nn.Linear(d, cfg.ffn_hidden, bias=False)
        self.w_up = nn.Linear(d, cfg.ffn_hidden, bias=False)
        self.w_down = nn.Linear(cfg.ffn_hidden, d, bias=False)
        self.cfg = cfg

    def forward(self, x, cos, sin, rot, mask):  # x: (B, T, C); mask: (rep*T, T) additive
        cfg = self.cfg
        B, T, _ = x.shape
        h = rms_norm(x, self.attn_norm, cfg.norm_eps)
        q = self.wq(h).view(B, T, cfg.n_heads, cfg.head_dim).transpose(1, 2)  # (B, H, T, D)
        k = self.wk(h).view(B, T, cfg.n_kv_heads, cfg.head_dim).transpose(1, 2)  # (B, Hkv, T, D)
        v = self.wv(h).view(B, T, cfg.n_kv_heads, cfg.head_dim).transpose(1, 2)
        # Flattened to a 2-D matmul: a 4-D @ 2-D product is captured as Expand + batched MatMul of the constant,
        # which OpenVINO 2026.4 then folds wrongly in the backward (see train/capture.untie_transposed_constants).
        rh = (lambda t: (t.reshape(-1, cfg.head_dim) @ rot).view(t.shape)) if rot is not None else rotate_half
        q = q * cos + rh(q) * sin
        k = k * cos + rh(k) * sin
        # GQA without repeating K/V: the `rep` query heads of one K/V head are stacked along the sequence axis,
        # (B, Hkv, rep*T, D), against K/V of (B, Hkv, T, D); the causal mask is tiled to (rep*T, T). Same dot
        # products as repeat-then-attend, without materialising rep copies of K and V (and their backward sums).
        rep = cfg.n_heads // cfg.n_kv_heads
        qg = q.reshape(B, cfg.n_kv_heads, rep * T, cfg.head_dim)
        # Additive 0/-inf mask rather than is_causal: the math path (what a graph captures) then adds a constant
        # instead of a masked_fill, whose forward and backward are Where ops over (B, H, T, T).
        a = F.scaled_dot_product_attention(qg, k, v, attn_mask=mask).reshape(B, cfg.n_heads, T, cfg.head_dim)
        x = x + self.wo(a.transpose(1, 2).reshape(B, T, cfg.n_heads * cfg.head_dim))
        h = rms_norm(x, self.mlp_norm, cfg.norm_eps)
        return x + self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))


class LM(nn.Module):
    """forward(idx (B, T) int64) -> logits (B, T, V)."""

    def __init__(self, cfg: LMConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = nn.Parameter(torch.ones(cfg.d_model))
        self.head = None if cfg.tie_embeddings else nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        cos, sin = rope_tables(cfg, cfg.max_seq_len)
        # Buffers, not parameters: constants of the captured graph, never trained, never checkpointed.
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.register_buffer("rope_rot", rotation_matrix(cfg.head_dim), persistent=False)
        T = cfg.max_seq_len
        causal = torch.full((T, T), float("-inf")).triu(1)  # 0 on and below the diagonal
        self.register_buffer("causal_mask", causal, persistent=False)
        self.reset_parameters()

    def reset_parameters(self):
        std = self.cfg.init_std
        for name, p in self.named_parameters():
            if p.ndim >= 2:
                # Residual-output projections scaled by depth (GPT-2) so the stream's variance stays bounded.
                s = std / math.sqrt(2 * self.cfg.n_layers) if name.endswith(("wo.weight", "w_down.weight")) else std
                nn.init.normal_(p, mean=0.0, std=s)
            else:
                nn.init.ones_(p)

    def forward(self, idx: torch.Tensor, gather_free: bool = False, rope_matmul: bool | None = None) -> torch.Tensor:
        """rope_matmul (default: = gather_free) applies RoPE's rotation as x @ R instead of Slice/Concat. Captured
        step graphs always use it: exact (R has one ±1 per column) and, on ONNX Runtime, ~10% faster per step
        (the optimiser wraps the half-slices of rotate_half in 4-D Transposes)."""
        B, T = idx.shape
        if T > self.cfg.max_seq_len:
            raise ConfigError(f"sequence length {T} exceeds max_seq_len={self.cfg.max_seq_len}")
        if gather_free:  # one-hot (B, T, V) @ (V, C): a MatMul instead of a Gather
            x = one_hot(idx, self.cfg.vocab_size, self.embed.weight.dtype) @ self.embed.weight
        else:
            x = self.embed(idx)  # (B, T, C)
        cos, sin = self.rope_cos[:T], self.rope_sin[:T]  # (T, D), broadcast over (B, H)
        rot = self.rope_rot if (gather_free if rope_matmul is None else rope_matmul) else None
        mask = self.causal_mask[:T, :T].repeat(self.cfg.n_heads // self.cfg.n_kv_heads, 1)  # (rep*T, T)
        for blk in self.blocks:
            x = blk(x, cos, sin, rot, mask)
        x = rms_norm(x, self.norm, self.cfg.norm_eps)
        w = self.embed.weight if self.head is None else self.head.weight
        return x @ w.t()  # (B, T, V)


def one_hot(idx: torch.Tensor, n: int, dtype: torch.dtype) -> torch.Tensor:
    """(…,) int64 -> (…, n) by comparison with arange: an Equal op, no range check on data (F.one_hot reads
    the max index back to the host, which a static graph cannot)."""
    return (idx.unsqueeze(-1) == torch.arange(n, device=idx.device)).to(dtype)


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor, gather_free: bool = False) -> torch.Tensor:
    """Mean token cross-entropy, written out: log_softmax then pick the target's log-probability.

    Not F.cross_entropy: its ATen `nll_loss_forward` lowers through onnxscript with `total_weight` faked to 1,
    which leaves the loss right and every gradient B*T times too large.
    """
    logp = logits.float().log_softmax(dim=-1)  # (B, T, V)
    if gather_free:
        picked = (logp * one_hot(targets, logits.shape[-1], logp.dtype)).sum(-1)
    else:
        picked = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, T)
    return -picked.mean()


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def build_lm(cfg: LMConfig, seed: int = 0) -> LM:
    """Random init from a seed, independent of the global RNG so two runs with one seed start identical."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return LM(cfg)
