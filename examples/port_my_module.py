"""Port your own PyTorch module from Python: a ModernBERT backbone, attention pooling and a two-layer head, exactly
as you wrote it. npuport adapts the backbone inside (on a copy), proves the captured graph equals your module, compiles
for ONNX Runtime and OpenVINO at buckets planned from your rows, and hands the artifact back as a Python callable.

    python examples/port_my_module.py -o out-module

Self-contained: the backbone is built from a config (random weights) and its tokenizer is trained on npuport's demo
rows; with your own model, load both from your directory (AutoModel / AutoTokenizer.from_pretrained(DIR)).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn
from transformers import AutoConfig, AutoModel

import npuport


class PersonaDetector(nn.Module):
    """Backbone + attention pooling + two-layer head: forward(input_ids, attention_mask) -> logits (B, 2)."""

    def __init__(self, backbone: nn.Module):
        super().__init__()
        self.encoder = backbone
        h = backbone.config.hidden_size
        self.score = nn.Linear(h, 1)  # one attention weight per token
        self.head = nn.Sequential(nn.Linear(h, h), nn.GELU(), nn.Dropout(0.1), nn.Linear(h, 2))

    def forward(self, input_ids, attention_mask):
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (B, T, H)
        w = self.score(hidden).squeeze(-1).masked_fill(attention_mask == 0, -1e4).softmax(-1)  # (B, T)
        return self.head((w.unsqueeze(-1) * hidden).sum(1))  # (B, 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", required=True, help="output directory (must not exist, or be npuport's)")
    args = ap.parse_args()

    from npuport.detector.generate import build_dataset
    from npuport.detector.tokenizer import train_tokenizer

    data = build_dataset(seed=0, per_persona=6, procedural=60, per_procedural=2)
    tokenizer = train_tokenizer([r["persona"] + " " + r["reply"] for r in data["train"]], vocab_size=2000)
    config = AutoConfig.for_model("modernbert", vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                                  num_hidden_layers=3, num_attention_heads=4, max_position_embeddings=512,
                                  global_attn_every_n_layers=3, local_attention=32, pad_token_id=tokenizer.pad_token_id,
                                  cls_token_id=tokenizer.cls_token_id, sep_token_id=tokenizer.sep_token_id,
                                  bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id)
    torch.manual_seed(0)
    model = PersonaDetector(AutoModel.from_config(config))

    with tempfile.TemporaryDirectory() as tmp:
        rows = Path(tmp) / "val.jsonl"
        rows.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in data["val"]), encoding="utf-8")
        report = npuport.port(model, tokenizer, args.out, runtimes=("onnxruntime", "openvino"), buckets="auto",
                              max_buckets=3, eval_data=str(rows), labels=("in_persona", "deviation"))
    print("capture proof (max |Δlogit| vs your module):",
          {m: p["max_abs_diff"] for m, p in report["capture"].items()})
    print("buckets:", report["bucket_plan"]["buckets"], f"({report['bucket_plan']['saving_vs_pad_to_max']:.1%} fewer "
          "padded tokens than padding to the longest)")

    session = npuport.load(Path(args.out) / "openvino-fp32")
    sample = data["test"][:4]
    logits = session(sample)  # persona rows in, logits out

    with torch.no_grad():
        ids = [session.token_rows([r])[0] for r in sample]
        ref = np.stack([model.eval()(torch.tensor(t)[None], torch.ones(1, len(t), dtype=torch.long))[0].numpy()
                        for t in ids])
    diff = float(np.abs(logits - ref).max())
    ok = npuport.verify(args.out)["pass"]
    print(f"npuport.load(...)(rows): max |Δlogit| vs your module {diff:.2e}; npuport.verify: {ok}")
    raise SystemExit(0 if report["pass"] and diff <= 1e-4 else 1)


if __name__ == "__main__":
    main()
