"""P10 #1: stock Hugging Face sequence classifiers keep their own head.

Each test model is a real architecture at a small size, fine-tuned a few steps (so its head is not its random
init), saved with `save_pretrained` next to a trained tokenizer, exactly as a user's checkpoint would be. The proof
is against Hugging Face itself: `AutoModelForSequenceClassification.from_pretrained(dir)` on real sentence pairs,
tokenized with token type ids, and every compiled artifact must give the same logits.
"""

import json

import numpy as np
import pytest
import torch
from conftest import PERSONA_TEXTS

from npuport.cli import main

ARCHS = {  # preset -> extra config (ModernBERT's mean pooling, not its default CLS, to test the masked path)
    "tiny-modernbert": {"classifier_pooling": "mean"},
    "tiny-bert": {},
    "tiny-xlm-roberta": {},
    "tiny-distilbert": {},
}
LABELS = {0: "negative", 1: "neutral", 2: "positive"}
PAIRS = [("The harbour was quiet tonight.", "Aye, the winds be fair."), ("I'm sorry, but I can't help.", None),
         ("あなたは江戸時代の茶屋の娘です。", "Great question! Here are five steps."), ("Who built the golem?", "My grandfather.")]


def fine_tuned(root, preset: str, problem_type: str = "single_label_classification", num_labels: int = 3,
               **extra):
    """A fine-tuned classifier directory: config.json (architectures, id2label), model.safetensors, tokenizer."""
    from transformers import AutoConfig, AutoModelForSequenceClassification

    from npuport.detector.tokenizer import train_tokenizer
    from npuport.models.detector import PRESETS

    tok = train_tokenizer(PERSONA_TEXTS * 3 + [a + " " + (b or "") for a, b in PAIRS], vocab_size=300)
    p = PRESETS.get(preset)
    if p.model_type == "bert":  # as BERT's own tokenizer: segment ids for pairs
        tok.model_input_names = ["input_ids", "token_type_ids", "attention_mask"]
    id2label = {i: LABELS.get(i, f"tag_{i}") for i in range(num_labels)}
    cfg = AutoConfig.for_model(p.model_type, **{**p.config, **ARCHS.get(preset, {}), **extra, "vocab_size": len(tok),
                                                 "pad_token_id": tok.pad_token_id}, num_labels=num_labels,
                               id2label=id2label, label2id={v: k for k, v in id2label.items()}, problem_type=problem_type)
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_config(cfg)
    head_before = {k: v.clone() for k, v in model.state_dict().items() if "classifier" in k}
    enc = tok([a for a, _ in PAIRS] * 2, [b or "" for _, b in PAIRS] * 2, padding=True, return_tensors="pt")
    if problem_type == "regression":
        y = torch.linspace(-1, 1, len(enc["input_ids"]))[:, None]
    elif problem_type == "multi_label_classification":
        y = (torch.arange(len(enc["input_ids"]) * num_labels).reshape(-1, num_labels) % 3 == 0).float()
    else:
        y = torch.arange(len(enc["input_ids"])) % num_labels
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(8):
        loss = model(**enc, labels=y).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    assert any(not torch.equal(v, model.state_dict()[k]) for k, v in head_before.items()), "the head did not train"
    d = root / preset
    model.save_pretrained(d)
    tok.save_pretrained(str(d))
    return d


def hf_logits(d, pairs, length):
    """What Hugging Face gives for these texts (padded to the artifact's length, token type ids included)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(d))
    model = AutoModelForSequenceClassification.from_pretrained(str(d)).eval()
    enc = tok([a for a, _ in pairs], [b for _, b in pairs] if all(b for _, b in pairs) else None, padding="max_length",
              max_length=length, return_tensors="pt")
    assert ("token_type_ids" in enc) == (model.config.model_type == "bert")
    with torch.no_grad():
        return model(**enc).logits.numpy(), enc


COMPILERS = ("openvino", "inductor", "iree")  # what compiles a graph of its own (each compile is tens of seconds)


def runtimes_for(preset: str, names: list[str]) -> list[str]:
    """ModernBERT (the detector's family) on every runtime; each other architecture on eager, ONNX Runtime and one of
    the compilers in turn, so that every compiler meets a second family (CI time: the full product was 4 x 5 ports)."""
    if preset == "tiny-modernbert":
        return names
    turn = COMPILERS[(list(ARCHS).index(preset) - 1) % len(COMPILERS)]
    return [n for n in names if n not in COMPILERS or n == turn]


@pytest.mark.parametrize("preset", list(ARCHS))
def test_fine_tuned_classifier_keeps_its_head_on_the_runtimes(tmp_path, preset):
    from npuport.artifact import find_artifacts, load_session
    from npuport.runtimes import get_runtime, runtime_names

    d = fine_tuned(tmp_path, preset)
    names = runtimes_for(preset, [n for n in runtime_names(ports=True) if get_runtime(n).executes == "executes"
                                  and get_runtime(n).available()[0] and "cuda" not in n])
    out = tmp_path / "out"
    assert main(["-q", "port", str(d), "-o", str(out), "--seq-len", "32", "--backend", ",".join(names),
                 "--bench-runs", "1"]) == 0
    with_pairs = [p for p in PAIRS if p[1]]
    ref, enc = hf_logits(d, with_pairs, 32)
    arts = find_artifacts(out)
    assert len(arts) == len(names)
    for art in arts:
        manifest, session = load_session(art)
        assert manifest.labels == [LABELS[i] for i in range(3)]
        assert manifest.detector["head"].startswith("hf:") and manifest.detector["problem_type"] == "single_label_classification"
        got = np.concatenate([session.run({"input_ids": enc["input_ids"][i:i + 1].numpy(),
                                           "attention_mask": enc["attention_mask"][i:i + 1].numpy()})
                              for i in range(len(with_pairs))])
        session.close()
        assert np.abs(got - ref).max() < 1e-4, (art.name, np.abs(got - ref).max())


@pytest.mark.parametrize("problem", ["multi_label_classification", "regression"])
def test_problem_types_ported_and_served(tmp_path, problem):
    from fastapi.testclient import TestClient

    from npuport.serve.app import ServeConfig, create_app

    n = 1 if problem == "regression" else 4
    d = fine_tuned(tmp_path, "tiny-bert", problem_type=problem, num_labels=n)
    out = tmp_path / "out"
    assert main(["-q", "port", str(d), "-o", str(out), "--seq-len", "32", "--backend", "onnxruntime",
                 "--bench-runs", "1"]) == 0
    ref, _ = hf_logits(d, [PAIRS[1]], 32)
    with TestClient(create_app(ServeConfig(artifact_dir=str(out))), base_url="http://127.0.0.1") as c:
        card = c.get("/v1/model").json()
        assert card["problem_type"] == problem and card["kind"] == "sequence classifier"
        assert c.post("/v1/detect", json={"persona": "x", "reply": "y"}).status_code == 404  # not a detector
        r = c.post("/v1/classify", json={"text": PAIRS[1][0]})
        assert r.status_code == 200, r.text
        body = r.json()
    names = [LABELS.get(i, f"tag_{i}") for i in range(n)]
    assert list(body["scores"]) == names
    if problem == "regression":
        assert abs(body["scores"][names[0]] - ref[0, 0]) < 1e-4 and body.get("label") is None
    else:
        sig = 1 / (1 + np.exp(-ref[0]))
        assert np.allclose([body["scores"][k] for k in names], sig, atol=1e-5)
        assert body["labels"] == [k for k, s in zip(names, sig) if s >= 0.5]


def test_serve_classifier_answers_with_its_own_labels(tmp_path):
    from fastapi.testclient import TestClient

    from npuport.serve.app import ServeConfig, create_app

    d = fine_tuned(tmp_path, "tiny-xlm-roberta")
    out = tmp_path / "out"
    assert main(["-q", "port", str(d), "-o", str(out), "--seq-len", "32", "--backend", "onnxruntime",
                 "--bench-runs", "1"]) == 0
    ref, _ = hf_logits(d, [PAIRS[0]], 32)
    with TestClient(create_app(ServeConfig(artifact_dir=str(out))), base_url="http://127.0.0.1") as c:
        r = c.post("/v1/classify", json={"text": PAIRS[0][0], "text_pair": PAIRS[0][1]})
        assert r.status_code == 200, r.text
        probs = np.exp(ref[0] - ref[0].max()) / np.exp(ref[0] - ref[0].max()).sum()
        assert r.json()["label"] == LABELS[int(probs.argmax())]
        assert np.allclose([r.json()["scores"][LABELS[i]] for i in range(3)], probs, atol=1e-5)
        bad = c.post("/v1/classify", json={"text": "x", "reply": "y"})
        assert bad.status_code == 422 and "unknown fields" in bad.json()["error"]
        assert "/v1/classify" in c.get("/openapi.json").json()["paths"]


def test_headless_checkpoint_is_refused_and_new_head_is_explicit(tmp_path, capsys):
    from safetensors.torch import load_file, save_file

    d = fine_tuned(tmp_path, "tiny-bert")
    bare = tmp_path / "bare"
    bare.mkdir()
    cfg = json.loads((d / "config.json").read_text())
    cfg["architectures"] = ["BertModel"]
    (bare / "config.json").write_text(json.dumps(cfg))
    state = load_file(str(d / "model.safetensors"))
    save_file({k[len("bert."):]: v for k, v in state.items() if k.startswith("bert.")}, str(bare / "model.safetensors"))
    out = tmp_path / "out"
    assert main(["-q", "port", str(bare), "-o", str(out), "--seq-len", "16", "--backend", "onnxruntime"]) == 2
    err = capsys.readouterr().err
    assert "no classification head" in err and "--new-head" in err and not out.exists()
    # a config that claims a classifier whose weights lack the head is refused too
    lying = tmp_path / "lying"
    lying.mkdir()
    (lying / "config.json").write_text((d / "config.json").read_text())
    save_file({k: v for k, v in state.items() if k.startswith("bert.")}, str(lying / "model.safetensors"))
    assert main(["-q", "port", str(lying), "-o", str(out), "--seq-len", "16", "--backend", "onnxruntime"]) == 2
    assert "no classification head" in capsys.readouterr().err
    assert main(["-q", "port", str(bare), "--new-head", "-o", str(out), "--seq-len", "16", "--backend", "onnxruntime",
                 "--bench-runs", "1"]) == 0
    manifest = json.loads(next(out.glob("*/manifest.json")).read_text())
    assert manifest["source"]["new_head"] is True and manifest["detector"]["head"] == "npuport:mean-linear"


def test_eval_data_of_text_rows_for_a_classifier(tmp_path, capsys):
    """--eval-data for a stock classifier is {text, text_pair?} rows, tokenized as its tokenizer does; persona rows
    are refused with the expected shape named."""
    d = fine_tuned(tmp_path, "tiny-distilbert")
    texts = tmp_path / "texts.jsonl"
    texts.write_text("".join(json.dumps({"text": a, **({"text_pair": b} if b else {}), "label": i % 3}, ensure_ascii=False)
                             + "\n" for i, (a, b) in enumerate(PAIRS)))
    out = tmp_path / "out"
    assert main(["-q", "port", str(d), "-o", str(out), "--seq-len", "32", "--backend", "onnxruntime", "--eval-data",
                 str(texts), "--bench-runs", "1"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["backends"]["onnxruntime"]["fp32"]["parity"]["data"]["n"] == len(PAIRS)
    assert main(["-q", "verify", str(out), "--eval-data", str(texts)]) == 0
    persona = tmp_path / "persona.jsonl"
    persona.write_text(json.dumps({"persona": "x", "reply": "y", "label": 0}) + "\n")
    assert main(["-q", "verify", str(out), "--eval-data", str(persona)]) == 2
    assert "field 'text' must be a non-empty string" in capsys.readouterr().err
