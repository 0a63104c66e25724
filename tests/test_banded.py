"""`--attention banded`: sliding-window layers compute only their band of scores. Same visible keys as the dense
sliding mask (exactly), same logits as the unmodified HF model to fp32 rounding, really used where it applies, and
refused where it cannot apply."""

import json
import shutil

import onnx
import pytest
import torch

from npuport.api import BenchConfig, ModelSource, PortConfig, bench, port
from npuport.cli import main
from npuport.errors import ConfigError
from npuport.models.detector import build_preset
from npuport.spec import ShapeSpec
from npuport.static import banded
from npuport.static.adapters import adapt, padding_masks
from npuport.static.capture import capture, make_probes


def _dense_from_band(band: torch.Tensor, seq: int) -> torch.Tensor:
    """(B, 1, nb, b, 3b) band mask -> the (B, 1, T, T) mask it stands for (keys outside the band: not visible)."""
    B, _, nb, b, _ = band.shape
    out = torch.zeros(B, 1, nb * b, nb * b + 2 * b, dtype=torch.bool)  # key axis shifted by b: key k sits at k + b
    for i in range(nb):
        out[:, :, i * b:(i + 1) * b, i * b:i * b + 3 * b] = band[:, :, i]
    return out[:, :, :seq, b:b + seq]


@pytest.mark.parametrize("seq,window,pad", [(24, 4, 0), (30, 4, 7), (33, 8, 20), (64, 8, 63)])
def test_band_mask_is_the_dense_sliding_mask(seq, window, pad):
    """Every (query, key) pair the band can see is visible exactly when the dense sliding mask says so, lengths that
    are not a multiple of the block included; pairs outside the band are outside the window."""
    mask = torch.ones(2, seq, dtype=torch.long)
    if pad:
        mask[1, seq - pad:] = 0
    _, sliding = padding_masks(mask, window)
    assert torch.equal(_dense_from_band(banded.banded_mask(mask, window), seq), sliding)


def test_applies_only_where_it_computes_fewer_scores():
    assert not banded.applies(24, 8) and banded.applies(25, 8)
    assert banded.applies(512, 64) and not banded.applies(192, 64)


@pytest.mark.parametrize("buckets,why", [((32, 64), "one compiled length"), ((24,), "changes nothing at length 24")])
def test_port_refuses_banded_where_it_cannot_apply(buckets, why):
    from npuport.static.adapters import check_attention

    model = build_preset("tiny-modernbert")
    with pytest.raises(ConfigError, match=why):
        check_attention(model, "banded", buckets)
    check_attention(model, "dense", buckets)  # dense applies everywhere


@pytest.mark.parametrize("batch,seq", [(1, 8), (3, 33), (5, 96)])
def test_banded_equals_hf_to_fp32_rounding(batch, seq, monkeypatch):
    model = build_preset("tiny-modernbert")  # local_attention 16: window 8, banded above 24 tokens
    window = model.config.local_attention // 2
    with torch.no_grad():
        refs = [model(ids, mask) for ids, mask in make_probes(model, batch, seq)]
    static, report = adapt(model, "banded")
    assert any("banded" in a for a in report.actions)
    calls = []
    real = banded.banded_mask
    monkeypatch.setattr(banded, "banded_mask", lambda *a: calls.append(a) or real(*a))
    for (ids, mask), ref in zip(make_probes(model, batch, seq), refs):
        with torch.no_grad():
            assert torch.equal(model(ids, mask), ref)  # registering the function leaves HF's own forward alone
            got = static(ids, mask)
            with static.onnx_masks():
                got_additive = static(ids, mask)
        assert not torch.isnan(got).any()
        torch.testing.assert_close(got, ref, rtol=0, atol=1e-5)
        torch.testing.assert_close(got_additive, ref, rtol=0, atol=1e-5)
    assert bool(calls) == banded.applies(seq, window)


def test_the_band_is_in_the_onnx_graph(tmp_path):
    """At a compiled length where it applies, the sliding layers' softmax runs over (B, H, T/b, b, 3b) in the ONNX
    file; the global layers keep theirs over (B, H, T, T)."""
    model = build_preset("tiny-modernbert")
    layers = model.config.layer_types
    c = capture(model, ShapeSpec(buckets=(64,)), tmp_path, attention="banded")
    m = onnx.shape_inference.infer_shapes(onnx.load(str(c.onnx()), load_external_data=False))
    ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in m.graph.value_info}
    softmax_ranks = sorted(ranks.get(n.input[0]) for n in m.graph.node if n.op_type == "Softmax")
    assert softmax_ranks == sorted([4] * layers.count("full_attention") + [5] * layers.count("sliding_attention"))


def test_banded_refused_for_global_attention_models():
    with pytest.raises(ConfigError, match="--attention dense"):
        adapt(build_preset("tiny-bert"), "banded")
    with pytest.raises(ConfigError, match="dense, banded"):
        adapt(build_preset("tiny-modernbert"), "sparse")


def test_port_cli_banded_records_its_proof(tmp_path, capsys):
    out = tmp_path / "out"
    # two batch sizes: the graph keeps a symbolic batch (the band's reshapes leave it as -1), proven at both
    assert main(["-q", "port", "--preset", "tiny-modernbert", "--random-init", "--runtime", "onnxruntime",
                 "--seq-len", "48", "--batch-sizes", "1,2", "--attention", "banded", "-o", str(out)]) == 0
    manifest = json.loads((out / "onnxruntime-fp32" / "manifest.json").read_text())
    assert any("banded" in a for a in manifest["adapter"]["actions"])
    proof = manifest["capture"]["proof"]
    for method in ("adapter", "trace", "export", "onnx"):
        assert proof[method]["max_abs_diff"] <= 1e-5, (method, proof[method])
        assert set(proof[method]["per_shape"]) == {"1x48", "2x48"}
    # bench tells the two forms apart when they sit side by side (the label says which ran)
    dense = port(PortConfig(source=ModelSource(preset="tiny-modernbert", random_init=True), out=str(tmp_path / "dense"),
                            runtimes=("onnxruntime",), shapes=ShapeSpec(batch_sizes=(1, 2), buckets=(48,)), capture_methods=(),
                            bench_runs=1))
    assert dense["adapter"]["attention"] == "dense"
    shutil.move(str(out / "onnxruntime-fp32"), str(tmp_path / "dense" / "onnxruntime-fp32-banded"))
    res = bench(BenchConfig(artifact_dir=str(tmp_path / "dense"), vs=("eager",), runs=2, warmup=0))
    assert set(res["results"]) == {"eager", "onnxruntime", "onnxruntime-banded"}
    capsys.readouterr()
    assert main(["-q", "port", "--preset", "tiny-bert", "--random-init", "--runtime", "onnxruntime", "--seq-len", "48",
                 "--attention", "banded", "-o", str(tmp_path / "bert")]) == 2
    assert "--attention dense" in capsys.readouterr().err
    assert not (tmp_path / "bert").exists()  # refused before anything was written
