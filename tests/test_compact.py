"""Block-coded word embeddings (static/compact.py): exact or not used, smaller artifacts, same proofs."""

import json

import pytest
import torch

from npuport.models.detector import build_preset
from npuport.static.compact import BLOCK, MIN_WEIGHTS, BlockCodedEmbedding, block_codes, compact_embeddings

VOCAB = MIN_WEIGHTS // 64  # tiny presets have hidden 64: the smallest table worth compacting


def q4_table(rows: int, cols: int, seed: int = 0) -> torch.Tensor:
    """A table as a Q4_0 checkpoint dequantises it: (nibble - 8) * d, one fp16 d per 32 weights (either sign)."""
    g = torch.Generator().manual_seed(seed)
    k = torch.randint(0, 16, (rows, cols // BLOCK, BLOCK), generator=g).float() - 8
    k[..., 0] = -8  # Q4_0 puts -8 on the block's largest magnitude
    d = (torch.randn(rows, cols // BLOCK, 1, generator=g) * 0.01).half().float()
    return (k * d).reshape(rows, cols)


def q4_detector(preset: str, seed: int = 0):
    model = build_preset(preset, seed=seed, vocab_size=VOCAB)
    with torch.no_grad():
        model.backbone.get_input_embeddings().weight.copy_(q4_table(VOCAB, 64, seed))
    return model


def test_block_codes_exact_on_a_q4_table_and_none_otherwise():
    w = q4_table(300, 64)
    codes, scales = block_codes(w)
    assert codes.dtype == torch.int8 and scales.shape == (300, 64 // BLOCK)
    assert torch.equal((codes.float().reshape(300, 2, BLOCK) * scales[..., None]).reshape(300, 64), w)
    assert block_codes(torch.randn(300, 64)) is None  # a trained float table
    w2 = w.clone()
    w2[7, 3] += 1e-6  # one weight off the grid
    assert block_codes(w2) is None
    assert block_codes(w[:, :48]) is None  # not whole blocks
    assert block_codes(w.half()) is None


def test_block_coded_embedding_equals_the_table_bit_for_bit():
    w = q4_table(500, 64, seed=3)
    emb = BlockCodedEmbedding(*block_codes(w))
    ids = torch.randint(0, 500, (3, 17))
    assert torch.equal(emb(ids), torch.nn.functional.embedding(ids, w))


@pytest.mark.parametrize("preset", ["tiny-bert", "tiny-modernbert", "tiny-xlm-roberta", "tiny-distilbert"])
def test_compact_detector_is_exact_and_leaves_the_original_alone(preset):
    from npuport.static.adapters import adapt

    model = q4_detector(preset)
    table = model.backbone.get_input_embeddings()
    static, _ = adapt(model)
    coded, facts = compact_embeddings(static.detector)
    assert facts["exact"] and facts["bytes"] < facts["fp32_bytes"] / 3
    assert model.backbone.get_input_embeddings() is table  # the reference keeps its own table
    assert isinstance(coded.backbone.get_input_embeddings(), BlockCodedEmbedding)
    ids = torch.randint(5, VOCAB, (2, 24))
    mask = torch.ones_like(ids)
    mask[1, 15:] = 0
    from npuport.static.adapters import StaticDetector

    with torch.no_grad():
        assert torch.equal(StaticDetector(coded, static._masks)(ids, mask), static(ids, mask))


def test_compact_needs_an_exact_large_table():
    assert compact_embeddings(build_preset("tiny-bert", vocab_size=VOCAB)) is None  # random float init
    small = build_preset("tiny-bert")
    with torch.no_grad():
        small.backbone.get_input_embeddings().weight.copy_(q4_table(512, 64))
    assert compact_embeddings(small) is None  # too small to be worth it


def _port(model_dir, out, runtimes, precision=None):
    from npuport.api import ModelSource, PortConfig, port
    from npuport.runtimes import ShapeSpec

    return port(PortConfig(source=ModelSource(model_dir=str(model_dir)), out=str(out), runtimes=runtimes,
                           precision=precision, shapes=ShapeSpec(batch_sizes=(1,), buckets=(16,)), bench_runs=1))


def _size(d):
    return sum(f.stat().st_size for f in d.rglob("*") if f.is_file())


def test_port_stores_the_table_compact_with_its_proof(tmp_path):
    """ONNX Runtime and OpenVINO artifacts of a model whose table is Q4-exact: the compact form in the graph, the
    same proofs (adapter 0.0 against the unmodified model), parity within 1e-4, and less than half the disk."""
    from npuport.api import verify_path

    d = tmp_path / "model"
    q4_detector("tiny-bert").save_pretrained(d)
    rep = _port(d, tmp_path / "out", ("onnxruntime", "openvino"))
    assert rep["pass"]
    for name in ("onnxruntime-fp32", "openvino-fp32"):
        m = json.loads((tmp_path / "out" / name / "manifest.json").read_text())
        assert m["adapter"]["embeddings"]["exact"] is True
        assert m["capture"]["proof"]["adapter"]["max_abs_diff"] == 0.0
    assert verify_path(tmp_path / "out")["pass"]
    plain = tmp_path / "plain"
    build_preset("tiny-bert", vocab_size=VOCAB).save_pretrained(plain)  # same shape, a float table
    _port(plain, tmp_path / "out_plain", ("onnxruntime",))
    m = json.loads((tmp_path / "out_plain" / "onnxruntime-fp32" / "manifest.json").read_text())
    assert m["adapter"]["embeddings"] == {}
    assert _size(tmp_path / "out" / "onnxruntime-fp32") < _size(tmp_path / "out_plain" / "onnxruntime-fp32") / 2


def test_no_compact_form_where_a_runtime_or_precision_does_not_take_it(tmp_path):
    d = tmp_path / "model"
    q4_detector("tiny-bert").save_pretrained(d)
    _port(d, tmp_path / "fp16", ("openvino",), precision="fp16")  # a cast graph: its own proof, not this form
    m = json.loads((tmp_path / "fp16" / "openvino-fp16" / "manifest.json").read_text())
    assert m["adapter"]["embeddings"] == {}
    _port(d, tmp_path / "qnn", ("onnxruntime", "qnn"))  # one capture for both: qnn does not state it takes the form
    m = json.loads((tmp_path / "qnn" / "onnxruntime-fp32" / "manifest.json").read_text())
    assert m["adapter"]["embeddings"] == {}
