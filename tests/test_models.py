"""Detector persistence: HF directory round trip, plain backbone checkpoints, presets."""

import json

import pytest
import torch

from npuport.errors import ConfigError, ModelLoadError
from npuport.models.detector import PRESETS, build_preset, load_detector, load_tokenizer, masked_mean, state_fingerprint


def test_round_trip_is_bitwise(tmp_path, tiny_model_dir):
    m = load_detector(tiny_model_dir)
    m.save_pretrained(tmp_path / "again")
    m2 = load_detector(tmp_path / "again")
    assert state_fingerprint(m) == state_fingerprint(m2)
    cfg = json.loads((tmp_path / "again" / "config.json").read_text())
    assert cfg["npuport_detector"]["num_labels"] == 2 and cfg["model_type"] == "modernbert"
    assert load_tokenizer(tiny_model_dir) is not None


def test_plain_backbone_checkpoint_needs_new_head(tmp_path):
    """A HF ModernBertModel directory (as downloaded) is refused as a classifier (a random head proves nothing);
    with new_head it loads: backbone weights kept, head fresh."""
    from transformers import AutoConfig, AutoModel

    p = PRESETS.get("tiny-modernbert")
    backbone = AutoModel.from_config(AutoConfig.for_model(p.model_type, **p.config))
    backbone.save_pretrained(tmp_path / "hf")
    with pytest.raises(ModelLoadError, match="no classification head.*--new-head"):
        load_detector(tmp_path / "hf")
    m = load_detector(tmp_path / "hf", new_head=True)
    for k, v in backbone.state_dict().items():
        assert torch.equal(m.backbone.state_dict()[k], v), k


def test_presets_have_published_dims():
    base, small = PRESETS.get("mmbert-base").config, PRESETS.get("mmbert-small").config
    assert (base["hidden_size"], base["num_hidden_layers"], base["vocab_size"]) == (768, 22, 256000)
    assert (small["hidden_size"], small["num_attention_heads"]) == (384, 6)


def test_same_seed_same_weights():
    assert state_fingerprint(build_preset("tiny-bert", seed=3)) == state_fingerprint(build_preset("tiny-bert", seed=3))
    assert state_fingerprint(build_preset("tiny-bert", seed=3)) != state_fingerprint(build_preset("tiny-bert", seed=4))


def test_masked_mean_ignores_padding():
    h = torch.arange(12.0).view(1, 4, 3)
    mask = torch.tensor([[1, 1, 0, 0]])
    assert torch.equal(masked_mean(h, mask), h[0, :2].mean(0, keepdim=True))
    assert torch.isfinite(masked_mean(h, torch.zeros(1, 4))).all()


def test_missing_weights(tmp_path, tiny_model_dir):
    import shutil

    shutil.copytree(tiny_model_dir, tmp_path / "m")
    (tmp_path / "m" / "model.safetensors").unlink()
    with pytest.raises(ModelLoadError, match="model.safetensors is missing"):
        load_detector(tmp_path / "m")


def test_unknown_preset_lists_known():
    with pytest.raises(ConfigError, match="known: .*mmbert-base"):
        PRESETS.get("nope")
