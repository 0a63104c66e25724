"""npuport.port(module, tokenizer, out): a user's own nn.Module ported as it is, npuport.verify / npuport.load from
Python, and the clear errors for what it cannot port."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import PERSONA_TEXTS, fixed_tokenizer
from torch import nn

import npuport
from npuport.errors import ConfigError, UnsupportedArchitecture
from npuport.models.detector import state_fingerprint


def _modernbert(vocab=300):
    from transformers import AutoConfig, AutoModel

    cfg = AutoConfig.for_model("modernbert", vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                               num_attention_heads=4, max_position_embeddings=256, global_attn_every_n_layers=3,
                               local_attention=16, pad_token_id=0, bos_token_id=2, eos_token_id=3, cls_token_id=2,
                               sep_token_id=3)
    return AutoModel.from_config(cfg)


class AttnPoolDetector(nn.Module):
    """What the field report's team wrote: a ModernBERT backbone, attention pooling, a two-layer head."""

    def __init__(self):
        super().__init__()
        self.encoder = _modernbert()
        self.score = nn.Linear(64, 1)
        self.head = nn.Sequential(nn.Linear(64, 32), nn.GELU(), nn.Dropout(0.1), nn.Linear(32, 2))

    def forward(self, input_ids, attention_mask):
        h = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (B, T, C)
        s = self.score(h).squeeze(-1).masked_fill(attention_mask == 0, -1e4)  # (B, T)
        w = torch.softmax(s, dim=-1).unsqueeze(-1)
        return self.head((w * h).sum(1))


class TwoHeadsCLS(nn.Module):
    """BERT called positionally, CLS pooling, two heads concatenated (3 logits)."""

    def __init__(self):
        super().__init__()
        from transformers import AutoConfig, AutoModel

        self.bert = AutoModel.from_config(AutoConfig.for_model(
            "bert", vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
            max_position_embeddings=128, pad_token_id=0))
        self.a, self.b = nn.Linear(32, 2), nn.Linear(32, 1)

    def forward(self, input_ids, attention_mask):
        cls = self.bert(input_ids, attention_mask)[0][:, 0]
        return torch.cat([self.a(cls), self.b(cls)], dim=-1)


@pytest.fixture(scope="module")
def tokenizer():
    return fixed_tokenizer(PERSONA_TEXTS * 3, vocab_size=300)


@pytest.fixture(scope="module")
def ported(tmp_path_factory, tokenizer, eval_jsonl):
    torch.manual_seed(0)
    model = AttnPoolDetector().train()  # left in training mode by its owner: the port must not care, nor change it
    before = state_fingerprint(model)
    out = tmp_path_factory.mktemp("module") / "out"
    report = npuport.port(model, tokenizer, out, runtimes=("onnxruntime", "openvino"), buckets=(16, 32, 64),
                          eval_data=str(eval_jsonl), labels=("in_persona", "deviation"), capture_methods=("trace",))
    return model, before, out, report


def test_a_users_module_ports_as_written_and_reproduces_its_logits(ported, tokenizer, eval_jsonl):
    model, before, out, report = ported
    assert report["pass"], report
    assert report["capture"]["trace"]["exact"] and report["capture"]["adapter"]["exact"]
    assert report["source"]["kind"] == "module" and report["source"]["class"].endswith("AttnPoolDetector")
    assert report["source"]["backbone"] == "encoder"
    for name in ("onnxruntime", "openvino"):
        assert report["backends"][name]["fp32"]["max_abs_logit_diff"] <= 1e-4
    # the user's object is untouched: same weights, still in training mode, no hook left on its backbone
    assert state_fingerprint(model) == before and model.training
    assert not model.encoder._forward_pre_hooks
    # npuport.load(out) from Python: persona rows and token batches give the module's own logits
    from npuport.detector.data import encode, load_examples

    examples = [e for e in load_examples(eval_jsonl) if len(encode(tokenizer, [e], 1 << 20)[0]) <= 64]  # none cut
    assert len(examples) >= 6
    rows = encode(tokenizer, examples, 64)
    model.eval()
    with torch.no_grad():
        ref = np.stack([model(torch.tensor(r)[None], torch.ones(1, len(r), dtype=torch.long))[0].numpy() for r in rows])
    model.train()
    for art in ("onnxruntime-fp32", "openvino-fp32"):
        with npuport.load(out / art) as session:
            got = session([e.to_json() for e in examples])
            assert got.shape == ref.shape
            np.testing.assert_allclose(got, ref, atol=1e-4, rtol=0)
            ids = np.zeros((2, 64), dtype=np.int64)
            mask = np.zeros_like(ids)
            for i, r in enumerate(rows[:2]):
                ids[i, : len(r)], mask[i, : len(r)] = r, 1
            np.testing.assert_allclose(session({"input_ids": ids, "attention_mask": mask}), ref[:2], atol=1e-4, rtol=0)
            assert np.allclose(session.scores([examples[0].to_json()]).sum(-1), 1.0, atol=1e-5)
            with pytest.raises(ConfigError, match="persona"):
                session(["a bare string is not a persona row"])


def test_verify_from_python_and_data_parity_needs_the_module_again(ported, eval_jsonl):
    model, _, out, _ = ported
    assert npuport.verify(out)["pass"]
    with pytest.raises(ConfigError, match=r"npuport\.verify\(OUT, eval_data=FILE, model=your_module\)"):
        npuport.verify(out, eval_data=str(eval_jsonl))
    res = npuport.verify(out, eval_data=str(eval_jsonl), model=model)
    assert res["pass"] and all("data" in r["parity"] for r in res["artifacts"].values())
    other = AttnPoolDetector()  # another module's weights: the source hash check refuses it
    with pytest.raises(Exception, match="compiled from model .* but the model given hashes to"):
        npuport.verify(out, eval_data=str(eval_jsonl), model=other)


def test_positional_backbone_call_cls_and_two_heads(tmp_path):
    torch.manual_seed(1)
    model = TwoHeadsCLS()
    report = npuport.port(model, None, tmp_path / "out", runtimes=("onnxruntime",), buckets=(8, 24),
                          capture_methods=("trace", "onnx"))
    assert report["pass"]
    assert report["head"]["num_labels"] == 3 and report["head"]["labels"] == ["LABEL_0", "LABEL_1", "LABEL_2"]
    session = npuport.load(tmp_path / "out" / "onnxruntime-fp32")
    ids = torch.randint(5, 300, (3, 20))
    with torch.no_grad():
        ref = model.eval()(ids, torch.ones_like(ids)).numpy()
    np.testing.assert_allclose(session(ids.tolist()), ref, atol=1e-4, rtol=0)
    with pytest.raises(ConfigError, match="no tokenizer"):
        session(["text needs a tokenizer"])


class GPT2Detector(nn.Module):
    def __init__(self):
        super().__init__()
        from transformers import GPT2Config, GPT2Model

        self.backbone = GPT2Model(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100, n_positions=64))
        self.head = nn.Linear(32, 2)

    def forward(self, input_ids, attention_mask):
        return self.head(self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state[:, -1])


class NoBackbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 8)

    def forward(self, input_ids, attention_mask):
        return self.emb(input_ids).mean(1)


class Hidden(AttnPoolDetector):
    def forward(self, input_ids, attention_mask):
        return self.encoder(input_ids=input_ids, attention_mask=attention_mask)


def test_what_cannot_be_ported_is_one_clear_error(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(UnsupportedArchitecture, match=r"GPT2Model \(model_type 'gpt2'\).*supported backbones: modernbert"):
        npuport.port(GPT2Detector(), None, out, runtimes=("onnxruntime",))
    with pytest.raises(UnsupportedArchitecture, match="holds no Hugging Face backbone"):
        npuport.port(NoBackbone(), None, out, runtimes=("onnxruntime",))
    with pytest.raises(ConfigError, match="must return logits.*ModelOutput|must return logits.*BaseModelOutput"):
        npuport.port(Hidden(), None, out, runtimes=("onnxruntime",))
    with pytest.raises(ConfigError, match="eager saves and runs the source model"):
        npuport.port(AttnPoolDetector(), None, out, runtimes=("eager",))
    with pytest.raises(ConfigError, match="labels given"):
        npuport.port(AttnPoolDetector(), None, out, runtimes=("onnxruntime",), labels=("a", "b", "c"))
    with pytest.raises(ConfigError, match=r"buckets='auto' plans .* pass eval_data=FILE"):
        npuport.port(AttnPoolDetector(), None, out, runtimes=("onnxruntime",), buckets="auto")
    from npuport.spec import QuantOptions  # the CLI's integer flags, from Python

    with pytest.raises(ConfigError, match="--int16 layernorm: onnxruntime cannot mix"):
        npuport.port(AttnPoolDetector(), None, out, runtimes=("onnxruntime",), precision="int8",
                     quant=QuantOptions(int16=("layernorm",), min_agreement=0))
    assert not out.exists()  # nothing written on any refusal


def test_the_python_surface_is_lazy_and_documented():
    import subprocess
    import sys

    code = "import sys, npuport; assert 'torch' not in sys.modules; print(json.dumps(sorted(npuport.__all__)))"
    r = subprocess.run([sys.executable, "-c", "import json; " + code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert {"port", "verify", "load", "plan_buckets"} <= set(json.loads(r.stdout))


def test_the_example_script_runs(tmp_path):
    """examples/port_my_module.py, as the README shows it: a ModernBERT + attention pooling + two-layer head module,
    onnxruntime and openvino, buckets planned from rows, npuport.load and npuport.verify from Python."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "examples" / "port_my_module.py"
    r = subprocess.run([sys.executable, str(script), "-o", str(tmp_path / "out")], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "npuport.verify: True" in r.stdout and "buckets:" in r.stdout
    assert json.loads((tmp_path / "out" / "onnxruntime-fp32" / "manifest.json").read_text())["bucket_plan"]["buckets"]
