"""CLI error paths: each bad input is a one-line error and exit code 2 (or argparse's 2), never a traceback."""

import json
import subprocess
import sys

import pytest

from npuport.cli import main


def run(*argv):
    return subprocess.run([sys.executable, "-m", "npuport.cli", *argv], capture_output=True, text=True, timeout=600)


def one_line_error(res, *needles):
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr
    err = res.stderr.strip().splitlines()[-1]
    for n in needles:
        assert n in err, (n, err)


def test_help_lists_commands():
    res = run("--help")
    assert res.returncode == 0
    for c in ("doctor", "port", "verify"):
        assert c in res.stdout


def test_doctor_json():
    res = run("doctor", "--json")
    assert res.returncode == 0
    info = json.loads(res.stdout)
    assert info["runtimes"]["onnxruntime"]["available"]
    assert not info["runtimes"]["rbln"]["available"] and "pip install" in info["runtimes"]["rbln"]["reason"]
    # what each runtime trains in, its own first (qnn's HTP: fp16 with loss scaling); none for those that cannot
    tp = {n: r["train_precisions"] for n, r in info["runtimes"].items()}
    assert tp["openvino"] == ["fp32", "bf16"] and tp["qnn"] == ["fp16"] and tp["rbln"] == []


def test_unknown_backend(tmp_path):
    one_line_error(run("port", "--preset", "tiny-bert", "--random-init", "--backend", "tensorflow", "-o", str(tmp_path / "o")),
                   "unknown runtime 'tensorflow'", "onnxruntime")


def test_unknown_preset(tmp_path):
    res = run("port", "--preset", "gpt-9", "--random-init", "-o", str(tmp_path / "o"))
    assert res.returncode == 2 and "invalid choice" in res.stderr and "mmbert-base" in res.stderr


def test_preset_needs_random_init(tmp_path):
    one_line_error(run("port", "--preset", "tiny-bert", "-o", str(tmp_path / "o")), "--random-init")


def test_missing_model_dir(tmp_path):
    one_line_error(run("port", str(tmp_path / "nope"), "-o", str(tmp_path / "o")), "does not exist")


def test_corrupt_model_dir(tmp_path, tiny_model_dir):
    import shutil

    d = tmp_path / "m"
    shutil.copytree(tiny_model_dir, d)
    (d / "model.safetensors").write_bytes(b"garbage" * 10)
    one_line_error(run("port", str(d), "-o", str(tmp_path / "o"), "--backend", "onnxruntime"), "safetensors")
    (d / "config.json").write_text("{")
    one_line_error(run("port", str(d), "-o", str(tmp_path / "o2")), "not valid JSON")


def test_pickle_is_never_loaded(tmp_path, tiny_model_dir):
    import shutil

    d = tmp_path / "m"
    shutil.copytree(tiny_model_dir, d)
    (d / "model.safetensors").rename(d / "pytorch_model.bin")
    one_line_error(run("port", str(d), "-o", str(tmp_path / "o")), "never loaded")


def test_unsupported_architecture(tmp_path):
    d = tmp_path / "gpt"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    one_line_error(run("port", str(d), "-o", str(tmp_path / "o")), "gpt2", "supported: modernbert")


@pytest.mark.parametrize("value", ["0", "-5", "abc"])
def test_bad_seq_len(tmp_path, value):
    res = run("port", "--preset", "tiny-bert", "--random-init", "--seq-len", value, "-o", str(tmp_path / "o"))
    assert res.returncode == 2 and "--seq-len" in res.stderr


def test_too_long_seq_len(tmp_path):
    one_line_error(run("port", "--preset", "tiny-bert", "--random-init", "--seq-len", "4096", "-o", str(tmp_path / "o"),
                       "--backend", "onnxruntime"), "exceeds the model's 512 positions")


def test_absent_sdk(tmp_path):
    one_line_error(run("port", "--preset", "tiny-bert", "--random-init", "--backend", "rbln", "-o", str(tmp_path / "o")),
                   "rbln", "pip install rebel-compiler")


def test_non_empty_output_dir_is_not_clobbered(tmp_path):
    o = tmp_path / "o"
    o.mkdir()
    (o / "precious.txt").write_text("keep me")
    one_line_error(run("port", "--preset", "tiny-bert", "--random-init", "-o", str(o), "--backend", "onnxruntime"),
                   "not empty")
    assert (o / "precious.txt").read_text() == "keep me"


def test_verify_missing_artifact(tmp_path):
    one_line_error(run("verify", str(tmp_path / "nothing")), "does not exist")  # tampering: test_port_and_verify_in_process


def test_debug_shows_traceback(tmp_path):
    res = run("--debug", "port", str(tmp_path / "nope"), "-o", str(tmp_path / "o"))
    assert res.returncode == 2 and "Traceback" in res.stderr


def test_port_and_verify_in_process(tmp_path, capsys):
    out = tmp_path / "o"
    assert main(["-q", "port", "--preset", "tiny-distilbert", "--random-init", "--seq-len", "24", "--backend",
                 "onnxruntime,openvino", "-o", str(out), "--bench-runs", "2"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["capture"]["export"]["max_abs_diff"] == 0.0
    assert main(["-q", "verify", str(out), "--json", str(tmp_path / "v.json")]) == 0
    assert json.loads((tmp_path / "v.json").read_text())["pass"]
    # tamper, then verify fails with a one-line error
    data = out / "openvino-fp32" / "model.bin"
    raw = bytearray(data.read_bytes())
    raw[100] ^= 1
    data.write_bytes(bytes(raw))
    assert main(["-q", "verify", str(out)]) == 1  # a failed check, not bad input (one exit-code table)
    assert "hash check" in capsys.readouterr().err


def test_internal_error_is_one_line_with_exit_3(monkeypatch, capsys, tmp_path):
    """An exception npuport did not foresee still ends in one line and its own exit code (never a traceback)."""
    import npuport.api

    def broken(*a, **k):
        raise ZeroDivisionError("division by zero somewhere deep")

    monkeypatch.setattr(npuport.api, "verify", broken)
    assert main(["-q", "verify", str(tmp_path)]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "internal error: ZeroDivisionError" in err[0] and "--debug" in err[0]
