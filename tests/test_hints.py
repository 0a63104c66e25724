"""Every hint an error prints must work on the command that printed it: the flags an error message names exist on
that command (users copy them). Checked two ways: statically, every flag named in a `raise` anywhere in npuport
exists on some command; and by running commands that fail, every flag their message names is one that command takes.
"""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

import pytest

from npuport.cli import build_parser, main

PKG = Path(__file__).resolve().parents[1] / "npuport"
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*[a-z0-9]")
# Flags of other programs that npuport's messages quote (install commands), not npuport's own
FOREIGN = {"--extra-index-url", "--index-url", "--upgrade", "--pre"}


def _subparsers(p: argparse.ArgumentParser):
    return [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]


def command_flags() -> dict[tuple[str, ...], set[str]]:
    """(command words) -> every option string it accepts, the global ones (--debug, --quiet) included."""
    root = build_parser()
    common = {s for a in root._actions for s in a.option_strings}
    out: dict[tuple[str, ...], set[str]] = {}

    def walk(p, words):
        subs = _subparsers(p)
        if not subs:
            out[words] = common | {s for a in p._actions for s in a.option_strings}
        for sp in subs:
            for name, child in sp.choices.items():
                walk(child, (*words, name))

    walk(root, ())
    return out


def _raised_strings(tree: ast.AST):
    for n in ast.walk(tree):
        if isinstance(n, ast.Raise) and n.exc is not None:
            for c in ast.walk(n.exc):
                if isinstance(c, ast.Constant) and isinstance(c.value, str):
                    yield n.lineno, c.value


def test_every_flag_an_error_names_exists_on_some_command():
    every = set().union(*command_flags().values())
    missing = []
    for f in sorted(PKG.rglob("*.py")):
        for line, text in _raised_strings(ast.parse(f.read_text(encoding="utf-8"))):
            missing += [f"{f.relative_to(PKG.parent)}:{line}: {flag}" for flag in FLAG.findall(text)
                        if flag not in every and flag not in FOREIGN]
    assert not missing, "error messages name flags no command has:\n" + "\n".join(missing)


def test_the_flag_finder_finds_flags():
    assert FLAG.findall("pass --eval-data FILE, or --min-agreement 0; see doctor") == ["--eval-data", "--min-agreement"]
    assert "--min-agreement" in command_flags()[("port",)]


# (argv that fails with exit 2, a phrase of its message): each message's flags must exist on that very command
FAILING = [
    (["bench", "--preset", "tiny-bert", "--random-init", "--precision", "int8", "--buckets", "16", "--runtime",
      "onnxruntime", "--runs", "1"], "--min-agreement 0"),
    (["port", "--preset", "tiny-bert", "--random-init", "--precision", "int8", "--buckets", "16", "--runtime",
      "onnxruntime", "-o", "{tmp}/p"], "--eval-data"),
    (["port", "--preset", "tiny-bert", "--random-init", "--buckets", "16", "--runtime", "onnxruntime", "--precision",
      "int8", "--min-agreement", "0", "--quantization", "dynamic", "--runtime", "openvino", "-o", "{tmp}/q"],
     "quantise statically"),
    (["port", "--preset", "tiny-bert", "--random-init", "--buckets", "16", "--runtime", "openvino", "--precision",
      "int8", "--min-agreement", "0", "--calibration-method", "percentile", "-o", "{tmp}/c"], "runtimes that honour it"),
    (["port", "--preset", "tiny-bert", "--random-init", "--buckets", "16", "--runtime", "qnn", "--precision",
      "int8", "--min-agreement", "0", "--smooth-quant", "0.5", "-o", "{tmp}/s"], "cannot apply SmoothQuant"),
    (["port", "--preset", "tiny-bert", "--random-init", "--buckets", "16", "--runtime", "onnxruntime", "--precision",
      "int8", "--min-agreement", "0", "--smooth-quant", "0.5", "--calibration-method", "entropy", "-o", "{tmp}/s"],
     "minmax calibration"),
    (["port", "--preset", "tiny-bert", "--random-init", "--buckets", "16", "--runtime", "onnxruntime", "--precision",
      "int8", "--min-agreement", "0", "--per-token", "ffn_out", "-o", "{tmp}/t"], "quantise a group per token"),
    (["port", "--preset", "tiny-bert", "--random-init", "--buckets", "16", "--runtime", "openvino", "--precision",
      "int8", "--min-agreement", "0", "--per-token", "none,ffn_out", "-o", "{tmp}/t"], "name it alone"),
    (["lm", "sample", "{tmp}", "--prompt", "Once", "--temperature", "-1"], "--temperature"),
    (["detector", "train", "--data", "{tmp}/none.jsonl", "--init", "{tmp}", "--buckets", "16", "-o", "{tmp}/d"],
     "need --runtime"),
    (["detector", "train", "--data", "{tmp}/none.jsonl", "--init", "{tmp}", "--qat", "ethos-u", "--runtime",
      "onnxruntime", "-o", "{tmp}/d"], "belong to plain training"),
    (["detector", "train", "--data", "{tmp}/none.jsonl", "--init", "{tmp}", "--qat", "onnxruntime", "-o", "{tmp}/d"],
     "targets that have one"),
]


@pytest.mark.parametrize("argv,phrase", FAILING, ids=[" ".join(a[:2]) + f" [{p}]" for a, p in FAILING])
def test_flags_in_a_failure_exist_on_the_command_that_printed_it(argv, phrase, tmp_path, capsys):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(["-q", *argv]) == 2
    err = capsys.readouterr().err
    assert phrase in err, err
    words = tuple(argv[:2]) if argv[0] in ("lm", "detector") else (argv[0],)
    takes = command_flags()[words]
    named = FLAG.findall(err)
    assert named, err
    assert set(named) <= takes, f"{' '.join(words)} printed {sorted(set(named) - takes)}, which it does not take: {err}"


def test_bench_refusal_hint_works_on_bench(tmp_path, capsys):
    """The issue's case: bench of a preset at int8 was refused with a hint bench did not accept. Following the hint
    (--min-agreement 0, no data for a random-init preset) now benchmarks it."""
    argv = FAILING[0][0]
    assert main(["-q", *argv]) == 2
    assert main(["-q", *argv, "--min-agreement", "0", "--json", str(tmp_path / "b.json")]) == 0
    assert "int8" in (tmp_path / "b.json").read_text()
