"""Decoder LM and character data: shapes, presets, graph flavours, loaders and their errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from npuport.errors import ConfigError, DataError
from npuport.models.lm import (
    LMConfig,
    build_lm,
    count_parameters,
    cross_entropy,
    preset_config,
    rotate_half,
    rotation_matrix,
)
from npuport.train.data import DEMO_CORPUS, Batches, CharVocab, encode_documents, read_documents, split_stream


def test_preset_sizes():
    assert count_parameters(build_lm(preset_config("tiny", 64))) < 50_000
    assert 2e6 < count_parameters(build_lm(preset_config("small", 96))) < 5e6
    n = count_parameters(build_lm(preset_config("vkore-46m", 96)))
    assert 45e6 < n < 48e6, n  # "≈46M"; the dimensions are documented in models/lm.py


def test_flavours_compute_identical_logits_and_loss():
    m = build_lm(preset_config("tiny", 50), seed=2).requires_grad_(False)
    x = torch.randint(0, 50, (3, 20))
    y = torch.randint(0, 50, (3, 20))
    ref = m(x)
    for kw in ({"gather_free": True}, {"rope_matmul": True}):
        out = m(x, **kw)
        assert torch.equal(out, ref), kw  # bit-identical: one-hot rows and ±1 rotation are exact
    # one-hot picks the same log-probabilities; only the summation order of the mean may differ
    torch.testing.assert_close(cross_entropy(ref, y), cross_entropy(ref, y, gather_free=True), rtol=1e-7, atol=0)
    want = torch.nn.functional.cross_entropy(ref.flatten(0, 1), y.flatten())
    torch.testing.assert_close(cross_entropy(ref, y), want, rtol=1e-6, atol=0)


def test_rotation_matrix_is_rotate_half():
    x = torch.randn(5, 16)
    assert torch.equal(x @ rotation_matrix(16), rotate_half(x))


def test_causal_no_future_leak():
    m = build_lm(preset_config("tiny", 30), seed=0)
    x = torch.randint(0, 30, (1, 16))
    x2 = x.clone()
    x2[0, 10:] = (x2[0, 10:] + 1) % 30
    torch.testing.assert_close(m(x)[0, :10], m(x2)[0, :10], rtol=0, atol=1e-6)


def test_gqa_matches_repeated_heads():
    """Stacked-query GQA equals the textbook repeat-K/V attention."""
    cfg = preset_config("tiny", 30)
    m = build_lm(cfg, seed=0)
    blk = m.blocks[0]
    x = torch.randn(2, 12, cfg.d_model)
    B, T, H, Hkv, D = 2, 12, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    cos, sin = m.rope_cos[:T], m.rope_sin[:T]
    mask = m.causal_mask[:T, :T].repeat(H // Hkv, 1)
    got = blk(x, cos, sin, None, mask)
    from npuport.models.lm import rms_norm

    h = rms_norm(x, blk.attn_norm, cfg.norm_eps)
    q = blk.wq(h).view(B, T, H, D).transpose(1, 2)
    k = blk.wk(h).view(B, T, Hkv, D).transpose(1, 2).repeat_interleave(H // Hkv, dim=1)
    v = blk.wv(h).view(B, T, Hkv, D).transpose(1, 2).repeat_interleave(H // Hkv, dim=1)
    q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
    a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    xx = x + blk.wo(a.transpose(1, 2).reshape(B, T, H * D))
    h2 = rms_norm(xx, blk.mlp_norm, cfg.norm_eps)
    want = xx + blk.w_down(torch.nn.functional.silu(blk.w_gate(h2)) * blk.w_up(h2))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_config_errors():
    with pytest.raises(ConfigError, match="divisible"):
        LMConfig(d_model=30, n_heads=4)
    with pytest.raises(ConfigError, match="n_kv_heads"):
        LMConfig(n_heads=8, n_kv_heads=3)
    with pytest.raises(ConfigError, match="known"):
        preset_config("huge", 10)
    with pytest.raises(ConfigError, match="max_seq_len"):
        build_lm(preset_config("tiny", 10))(torch.zeros(1, 65, dtype=torch.long))


def test_same_seed_same_init_regardless_of_global_rng():
    torch.manual_seed(123)
    a = build_lm(preset_config("tiny", 20), seed=5)
    torch.manual_seed(999)
    b = build_lm(preset_config("tiny", 20), seed=5)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


# ---------------------------------------------------------------- data

def test_demo_corpus_is_shipped_and_large_enough():
    assert DEMO_CORPUS.stat().st_size >= 30_000
    docs = read_documents(DEMO_CORPUS)
    assert len(docs) >= 50 and all("<|endoftext|>" not in d for d in docs)


def test_formats(tmp_path):
    t = tmp_path / "a.txt"
    t.write_text("Once upon a time.\n\nThe end.\n", encoding="utf-8")
    assert read_documents(t) == ["Once upon a time.\n\nThe end.\n"]
    s = tmp_path / "s.txt"
    s.write_text("Story one.\n<|endoftext|>\nStory two.\n<|endoftext|>\n", encoding="utf-8")
    assert read_documents(s) == ["Story one.", "Story two."]
    j = tmp_path / "d.jsonl"
    j.write_text('{"text": "alpha"}\n\n{"text": "beta"}\n', encoding="utf-8")
    assert read_documents(j) == ["alpha", "beta"]


def test_jsonl_errors_name_every_bad_line(tmp_path):
    j = tmp_path / "bad.jsonl"
    j.write_text('{"text": "ok"}\nnot json\n{"txt": "x"}\n[1]\n', encoding="utf-8")
    with pytest.raises(DataError) as e:
        read_documents(j)
    msg = str(e.value)
    assert "3 bad line(s)" in msg and "bad.jsonl:2" in msg and "bad.jsonl:3" in msg and "bad.jsonl:4" in msg


def test_empty_and_missing_and_binary_corpus(tmp_path):
    e = tmp_path / "empty.txt"
    e.write_text("  \n\n", encoding="utf-8")
    with pytest.raises(DataError, match="empty"):
        read_documents(e)
    with pytest.raises(DataError, match="no such corpus"):
        read_documents(tmp_path / "nope.txt")
    b = tmp_path / "bin.txt"
    b.write_bytes(b"\xff\xfe\x00abc")
    with pytest.raises(DataError, match="UTF-8"):
        read_documents(b)


def test_vocab_roundtrip_and_unknown_policies():
    v = CharVocab.build(["hello world", "abc"])
    assert v.decode(v.encode("hello")) == "hello"
    assert CharVocab.from_json(json.loads(json.dumps(v.to_json()))) == v
    with pytest.raises(DataError, match="'Z'"):
        v.encode("hello Z")
    assert v.decode(v.encode("heZllo", policy="skip")) == "hello"
    assert list(v.encode("hZ", policy="replace"))[1] == 1  # <unk>
    with pytest.raises(DataError, match="policy"):
        CharVocab(("a",), "ignore")


def test_batches_depend_only_on_seed_and_step():
    toks = np.arange(5000) % 50
    a, b = Batches(toks, 8, 32, seed=1), Batches(toks, 8, 32, seed=1)
    x1, y1 = a.get(7)
    a.get(3)
    x2, y2 = b.get(7)
    assert np.array_equal(x1, x2) and np.array_equal(y1[:, :-1], x1[:, 1:])
    assert not np.array_equal(a.get(8)[0], x1)
    # worker shards of the global batch, in order
    assert np.array_equal(np.concatenate([a.get(7, slice(0, 4))[0], a.get(7, slice(4, 8))[0]]), x1)


def test_corpus_shorter_than_a_sequence():
    with pytest.raises(DataError, match="fewer than one sequence"):
        Batches(np.arange(10), 2, 32, seed=0)


def test_split_keeps_the_tail_for_validation():
    v = CharVocab.build(["abc"])
    toks = encode_documents(["abc"] * 100, v)
    tr, va = split_stream(toks, 0.1)
    assert len(tr) + len(va) == len(toks) and len(va) == pytest.approx(0.1 * len(toks), abs=1)
