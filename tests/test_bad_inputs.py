"""Loader boundaries (P8 #14): each malformed input found by attacking the CLI is a one-line error with exit code 2
and writes nothing — never a traceback. Real files, the real CLI in a subprocess."""

from __future__ import annotations

import json
import shutil

from test_cli import one_line_error, run


def test_config_json_that_is_a_list(tmp_path, tiny_model_dir):
    d = tmp_path / "m"
    shutil.copytree(tiny_model_dir, d)
    (d / "config.json").write_text("[1, 2, 3]")
    one_line_error(run("port", str(d), "-o", str(tmp_path / "o"), "--backend", "onnxruntime"), "must hold a JSON object")
    assert not (tmp_path / "o").exists()


def test_non_integer_layer_count(tmp_path, tiny_model_dir):
    d = tmp_path / "m"
    shutil.copytree(tiny_model_dir, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["num_hidden_layers"] = "two"
    (d / "config.json").write_text(json.dumps(cfg))
    one_line_error(run("port", str(d), "-o", str(tmp_path / "o"), "--backend", "onnxruntime"), "num_hidden_layers")


def test_lm_train_output_is_a_file(tmp_path):
    f = tmp_path / "run.txt"
    f.write_text("keep")
    one_line_error(run("lm", "train", "--demo-corpus", "--preset", "tiny", "--steps", "1", "--backend", "eager",
                       "-o", str(f)), "is a file")
    assert f.read_text() == "keep"


def test_empty_corpus_is_called_empty():
    one_line_error(run("lm", "train", "--corpus", "/dev/null", "--preset", "tiny", "--steps", "1", "--backend", "eager",
                       "-o", "/nonexistent-npuport-run"), "is empty")


def test_deeply_nested_jsonl(tmp_path, tiny_model_dir):
    data = tmp_path / "deep.jsonl"
    data.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    one_line_error(run("detector", "eval", str(tiny_model_dir), "--data", str(data)), "nested too deeply")
    corpus = tmp_path / "deep_corpus.jsonl"
    corpus.write_text("[" * 100_000 + "]" * 100_000 + "\n" + json.dumps({"text": "hi"}) + "\n")
    one_line_error(run("lm", "train", "--corpus", str(corpus), "--preset", "tiny", "--steps", "1", "--backend", "eager",
                       "-o", str(tmp_path / "r")), "nested too deeply")


def test_csv_field_over_the_limit(tmp_path, tiny_model_dir):
    data = tmp_path / "long.csv"
    data.write_text("persona,reply,label\n" + "p," + "x" * 200_000 + ",1\n")
    one_line_error(run("detector", "eval", str(tiny_model_dir), "--data", str(data)), "unreadable CSV")
