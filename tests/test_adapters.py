"""The adapter changes nothing: adapted == unmodified HF model, exactly, with padding and sliding windows."""

import pytest
import torch

from npuport.errors import UnsupportedArchitecture
from npuport.models.detector import build_preset
from npuport.static.adapters import ADAPTERS, adapt, padding_masks
from npuport.static.capture import make_probes

TINY = ["tiny-modernbert", "tiny-bert", "tiny-xlm-roberta", "tiny-distilbert"]


@pytest.mark.parametrize("preset", TINY)
@pytest.mark.parametrize("batch,seq", [(1, 8), (3, 33), (5, 96)])
def test_adapted_equals_hf_exactly(preset, batch, seq):
    model = build_preset(preset)
    static, report = adapt(model)
    assert report.actions
    for ids, mask in make_probes(model, batch, seq):
        with torch.no_grad():
            ref, got = model(ids, mask), static(ids, mask)
        assert not torch.isnan(got).any()
        assert torch.equal(ref, got), (preset, batch, seq, (ref - got).abs().max())
        with torch.no_grad(), static.onnx_masks():  # the form the ONNX export takes: equal too
            got = static(ids, mask)
        assert torch.equal(ref, got), ("additive", preset, batch, seq, (ref - got).abs().max())


def test_sliding_window_is_preserved_and_matters():
    """At a length longer than the local window the adapter matches the unmodified HF model, and a model whose
    window covers everything gives different logits: so the window is really in the graph."""
    model = build_preset("tiny-modernbert")
    window = model.config.local_attention
    seq = 4 * window
    assert "sliding_attention" in model.config.layer_types and "full_attention" in model.config.layer_types
    static, _ = adapt(model)
    wide = build_preset("tiny-modernbert", local_attention=4 * seq)
    wide.load_state_dict(model.state_dict())
    ids, mask = make_probes(model, 1, seq)[0]  # no padding
    with torch.no_grad():
        ref, got = model(ids, mask), static(ids, mask)
        h = model.backbone(input_ids=ids, attention_mask=mask).last_hidden_state
        h_wide = wide.backbone(input_ids=ids, attention_mask=mask).last_hidden_state
    assert torch.equal(ref, got)
    assert (h - h_wide).abs().max() > 1e-2  # token states differ by O(1) when the window is removed


def test_masks_give_every_row_a_key():
    mask = torch.tensor([[1, 1, 0, 0, 0, 0]])
    full, sliding = padding_masks(mask, sliding_window=1)
    assert full.shape == (1, 1, 6, 6)
    assert sliding.any(dim=-1).all(), "a query row with no visible key gives NaN on OpenVINO"
    # real rows see exactly the real keys within the window
    assert sliding[0, 0, 0].tolist() == [True, True, False, False, False, False]


def test_registry_lists_supported_types():
    assert {"modernbert", "bert", "xlm-roberta", "distilbert"} <= set(ADAPTERS.names())


def test_unknown_architecture_raises():
    model = build_preset("tiny-bert")
    model.backbone.config.model_type = "gpt2"
    with pytest.raises(UnsupportedArchitecture, match="supported"):
        adapt(model)
