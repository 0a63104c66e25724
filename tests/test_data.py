"""Persona data loader: every bad row is reported as file:line with its reason; nothing dropped silently."""

import json

import pytest

from npuport.detector.data import Example, context_text, load_examples
from npuport.errors import DataError


def write(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_good_jsonl_and_csv(tmp_path):
    p = write(tmp_path / "d.jsonl", [json.dumps({"persona": "P", "user": "u", "reply": "r", "label": 1}),
                                      json.dumps({"persona": "P2", "reply": "r2", "label": 0})])
    ex = load_examples(p, require_label=True)
    assert ex == [Example("P", "r", "u", 1), Example("P2", "r2", None, 0)]
    c = write(tmp_path / "d.csv", ["persona,user,reply,label", "P,,\"a, b\",1", "Q,hi,yo,0"])
    assert load_examples(c) == [Example("P", "a, b", None, 1), Example("Q", "yo", "hi", 0)]
    assert context_text(ex[0]) == "P\n\nUser: u"


@pytest.mark.parametrize("row,reason", [
    ({"reply": "r", "label": 0}, "missing field 'persona'"),
    ({"persona": "p", "label": 0}, "missing field 'reply'"),
    ({"persona": "p", "reply": "r", "label": 2}, "label must be 0 or 1"),
    ({"persona": "p", "reply": "r", "label": True}, "label must be 0 or 1"),
    ({"persona": "p", "reply": "   ", "label": 0}, "empty reply"),
    ({"persona": 5, "reply": "r", "label": 0}, "field 'persona' must be a string"),
    ({"persona": "p", "reply": "r", "user": ["x"], "label": 0}, "field 'user' must be a string"),
    ({"persona": "p", "reply": "r"}, "missing field 'label'"),
])
def test_each_bad_row_kind(tmp_path, row, reason):
    p = write(tmp_path / "d.jsonl", [json.dumps({"persona": "ok", "reply": "ok", "label": 0}), json.dumps(row)])
    with pytest.raises(DataError) as e:
        load_examples(p, require_label=True)
    assert f"{p}:2: {reason}" in str(e.value)


def test_all_bad_rows_listed_not_just_first(tmp_path):
    p = write(tmp_path / "d.jsonl", ["{bad json", json.dumps({"persona": "p", "reply": "r", "label": 0}), "[1,2]"])
    with pytest.raises(DataError) as e:
        load_examples(p)
    msg = str(e.value)
    assert "2 bad row(s)" in msg and f"{p}:1: invalid JSON" in msg and f"{p}:3: expected a JSON object" in msg


def test_invalid_utf8_names_line(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_bytes(json.dumps({"persona": "p", "reply": "r", "label": 0}).encode() + b"\n" + b'{"persona": "\xff"}\n')
    with pytest.raises(DataError, match=r"d.jsonl:2: invalid UTF-8"):
        load_examples(p)


def test_csv_bad_label_line_number(tmp_path):
    p = write(tmp_path / "d.csv", ["persona,reply,label", "a,b,0", "a,b,yes"])
    with pytest.raises(DataError, match=r"d.csv:3: label must be 0 or 1"):
        load_examples(p)


def test_missing_and_unknown_format(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        load_examples(tmp_path / "x.jsonl")
    (tmp_path / "x.txt").write_text("hi")
    with pytest.raises(DataError, match="unknown data format"):
        load_examples(tmp_path / "x.txt")
