"""ModernBERT's q, k and v projected separately while an NPU compile exports the model.

HF's ModernBERT projects q|k|v with one linear layer and splits the result. On Ethos-U, ExecuTorch's Arm backend then
moves v's head transpose up through the split, so every layer transposes the whole q|k|v tensor to head-major only to
serve v, and transposes dominated the U85's cycles (`benchmarks/ethosu_compile_time.py`, its table). Projecting q, k
and v with the three row blocks of the same weight gives each its own tensor and its own transpose; the attention is
otherwise HF's (its attention interface, scaling, sliding window and output projection), with RoPE as HF applies it
(in token layout when `_rope_layout.rope_in_token_layout` is active too).

A linear layer's output rows do not depend on each other, so the values are HF's own (checked bit for bit on whole
detectors by tests/test_qkv_layout.py); every compile also records the float model in its compiled form against the
reference (`integer_form_vs_float_max_abs` in the manifest), which would show any difference.
"""

from __future__ import annotations

import contextlib

_NEEDS = ("Wqkv", "Wo", "out_drop", "head_dim", "config", "sliding_window", "deterministic_flash_attn")


def _separate_projections(mm, original):
    import torch.nn.functional as F

    def forward(self, hidden_states, position_embeddings=None, attention_mask=None, **kwargs):
        if self.training or not all(hasattr(self, a) for a in _NEEDS) or position_embeddings is None:
            return original(self, hidden_states, position_embeddings, attention_mask, **kwargs)
        input_shape = hidden_states.shape[:-1]
        w, b = self.Wqkv.weight, self.Wqkv.bias
        n = w.shape[0] // 3

        def project(i):  # (B, T, H, D), as HF's view + unbind gives it, from rows [i n, (i + 1) n) of Wqkv
            out = F.linear(hidden_states, w[i * n:(i + 1) * n], None if b is None else b[i * n:(i + 1) * n])
            return out.view(*input_shape, -1, self.head_dim).transpose(1, 2)

        query, key, value = project(0), project(1), project(2)
        cos, sin = position_embeddings
        query, key = mm.apply_rotary_pos_emb(query, key, cos, sin, unsqueeze_dim=1)
        attention = mm.ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation,
                                                             mm.eager_attention_forward)
        out, weights = attention(self, query, key, value, attention_mask, dropout=0.0, scaling=self.head_dim**-0.5,
                                 sliding_window=self.sliding_window, deterministic=self.deterministic_flash_attn,
                                 **kwargs)
        out = out.reshape(*input_shape, -1).contiguous()
        used[:] = [True]
        return self.out_drop(self.Wo(out)), weights

    used: list[bool] = []
    forward.npuport_separate_qkv = True
    return forward, used


@contextlib.contextmanager
def separate_qkv_projections():
    """Yields a list that holds True once a ModernBERT attention ran with separate projections."""
    try:
        from transformers.models.modernbert import modeling_modernbert as mm
    except ImportError:
        yield []
        return
    cls = mm.ModernBertAttention
    original = cls.forward
    if getattr(original, "npuport_separate_qkv", False) or not hasattr(mm, "ALL_ATTENTION_FUNCTIONS"):
        yield []  # already inside, or a transformers this was not written against
        return
    cls.forward, used = _separate_projections(mm, original)
    try:
        yield used
    finally:
        cls.forward = original
