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


def test_weights_load_as_private_views_of_their_file(tmp_path):
    """load_detector maps the safetensors file (copy-on-write) instead of reading it: every dtype comes back equal,
    the tensors live inside the file's mapping (so untouched rows of an embedding table cost no memory), and an
    in-place update - a training step - never reaches the file."""
    from safetensors.torch import save_file

    from npuport.models.mapped import map_safetensors

    ref = {"emb": torch.randn(300, 64), "bf": torch.randn(7).to(torch.bfloat16), "ids": torch.arange(5),
           "empty": torch.zeros(0), "u8": torch.randint(0, 9, (3,), dtype=torch.uint8)}
    path = tmp_path / "w.safetensors"
    save_file(ref, str(path))
    before = path.read_bytes()
    got = map_safetensors(path)
    assert {k: (v.dtype, v.shape) for k, v in got.items()} == {k: (v.dtype, v.shape) for k, v in ref.items()}
    assert all(torch.equal(got[k], ref[k]) for k in ref)
    spans = [tuple(int(x, 16) for x in line.split()[0].split("-")) for line in open("/proc/self/maps")
             if line.rstrip().endswith(str(path))]
    assert any(lo <= got["emb"].data_ptr() < hi for lo, hi in spans), "not a view of the file's mapping"
    got["emb"].add_(1.0)
    assert path.read_bytes() == before


def test_loaded_detector_runs_on_mapped_weights_and_keeps_tied_ones_tied(tmp_path):
    from npuport.models.detector import build_preset, load_detector
    from npuport.models.mapped import assign_state

    m = build_preset("tiny-bert", seed=3)
    m.save_pretrained(tmp_path / "d")
    loaded = load_detector(tmp_path / "d")
    ids = torch.randint(5, 500, (2, 12))
    mask = torch.ones_like(ids)
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids, mask), m.eval()(ids, mask), rtol=0, atol=0)
    # a module with one parameter under two names loads by copy: assigning each name would untie them
    tied = torch.nn.Module()
    tied.a = torch.nn.Linear(4, 4, bias=False)
    tied.b = torch.nn.Linear(4, 4, bias=False)
    tied.b.weight = tied.a.weight
    assign_state(tied, {"a.weight": torch.ones(4, 4), "b.weight": torch.ones(4, 4)})
    assert tied.a.weight is tied.b.weight and torch.equal(tied.a.weight, torch.ones(4, 4))
