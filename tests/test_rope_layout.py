"""ModernBERT's rotary embedding in token layout during NPU compiles (npuport/runtimes/_rope_layout.py): the same
values bit for bit, used by the model, and HF's function back in place afterwards. The Ethos-U compile that runs under
it keeps its exact proof (test_ethosu.py: fake-quantised PyTorch == the TOSA reference model, 0.0)."""

import torch
from transformers.models.modernbert import modeling_modernbert as mm

from npuport.models.detector import build_preset
from npuport.runtimes._rope_layout import rope_in_token_layout


def test_rotation_is_the_same_values_bit_for_bit():
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(2, 4, 16, 8, generator=g) * 3 for _ in range(2))  # (B, H, T, D), as HF passes them
    cos, sin = torch.randn(2, 16, 8, generator=g), torch.randn(2, 16, 8, generator=g)
    want = mm.apply_rotary_pos_emb(q, k, cos, sin)
    with rope_in_token_layout() as used:
        got = mm.apply_rotary_pos_emb(q, k, cos, sin)
    assert used == [True]
    for a, b in zip(got, want):
        assert a.shape == b.shape and torch.equal(a, b)


def test_a_modernbert_detector_gives_the_same_logits_and_hf_is_restored():
    original = mm.apply_rotary_pos_emb
    det = build_preset("tiny-modernbert", seed=3).eval()
    ids = torch.randint(5, 500, (2, 24), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, 17:] = 0
    with torch.no_grad():
        want = det(ids, mask)
        with rope_in_token_layout() as used:
            with rope_in_token_layout() as inner:  # nested: the outer swap stays, used once
                got = det(ids, mask)
            assert mm.apply_rotary_pos_emb is not original
    assert used == [True] and inner == []
    assert mm.apply_rotary_pos_emb is original
    assert torch.equal(torch.as_tensor(got), torch.as_tensor(want))
