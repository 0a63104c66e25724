"""ModernBERT's q, k, v projected separately during NPU compiles (npuport/runtimes/_qkv_layout.py): HF's values bit
for bit on whole detectors (with RoPE in token layout too, as the Ethos-U compile runs them), and HF's forward back
in place afterwards. The compile under it keeps its exact proof (test_ethosu.py)."""

import pytest
import torch
from transformers.models.modernbert import modeling_modernbert as mm

from npuport.models.detector import build_preset
from npuport.runtimes._qkv_layout import separate_qkv_projections
from npuport.runtimes._rope_layout import rope_in_token_layout


@pytest.mark.parametrize("preset", ["tiny-modernbert", "demo-modernbert"])
def test_separate_projections_give_hfs_logits_bit_for_bit(preset):
    original = mm.ModernBertAttention.forward
    det = build_preset(preset, seed=2).eval()
    ids = torch.randint(5, 500, (2, 40), generator=torch.Generator().manual_seed(4))
    mask = torch.ones_like(ids)
    mask[0, 29:] = 0
    with torch.no_grad():
        want = torch.as_tensor(det(ids, mask))
        with separate_qkv_projections() as used, rope_in_token_layout():
            got = torch.as_tensor(det(ids, mask))
            with separate_qkv_projections() as inner:  # nested: the outer swap stays
                again = torch.as_tensor(det(ids, mask))
    assert used == [True] and inner == []
    assert mm.ModernBertAttention.forward is original
    assert torch.equal(got, want) and torch.equal(again, want)


def test_training_mode_keeps_hfs_forward():
    det = build_preset("tiny-modernbert", seed=2).train()
    ids = torch.randint(5, 500, (1, 16), generator=torch.Generator().manual_seed(4))
    with separate_qkv_projections() as used:
        det(ids, torch.ones_like(ids))
    assert used == []
