"""ModernBERT's rotary embedding applied before the head transpose, for NPU compilers that move permutes.

HF's ModernBERT attention transposes q and k to (B, H, T, D) and then applies RoPE, so every layer's rotation
(two multiplies, an add, and rotate_half's slices and concat, for q and for k) runs on a permuted tensor. ExecuTorch's
Arm backend then moves those permutes through the rotation one rewrite at a time, retracing the whole graph between
dependent rewrites: the retraces grow with the layer count, so their cost grows with its square, and it was the
largest share of an Ethos-U compile of mmBERT-small (`benchmarks/ethosu_profile.py`). Applying the same rotation in
the (B, T, H, D) layout the projection produces, and transposing after it, leaves nothing to move there.

The rotation is elementwise, so the result is the same values bit for bit in any layout (tests/test_rope_layout.py
checks it against HF's function); the swap is made only while an NPU compile exports the model, and undone after.
"""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def rope_in_token_layout():
    """Yields a list that holds True once the model used the token-layout rotation (a ModernBERT was exported)."""
    used: list[bool] = []
    try:
        from transformers.models.modernbert import modeling_modernbert as mm
    except ImportError:  # a transformers without ModernBERT: nothing to change
        yield used
        return
    original = mm.apply_rotary_pos_emb
    if getattr(original, "npuport_token_layout", False):  # already inside
        yield used
        return

    def rotate_in_token_layout(q, k, cos, sin, unsqueeze_dim=1):
        if unsqueeze_dim != 1 or q.dim() != 4:
            return original(q, k, cos, sin, unsqueeze_dim)
        used[:] = [True]
        q_rot, k_rot = original(q.transpose(1, 2), k.transpose(1, 2), cos, sin, unsqueeze_dim=2)
        return q_rot.transpose(1, 2), k_rot.transpose(1, 2)

    rotate_in_token_layout.npuport_token_layout = True
    mm.apply_rotary_pos_emb = rotate_in_token_layout
    try:
        yield used
    finally:
        mm.apply_rotary_pos_emb = original
