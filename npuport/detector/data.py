"""Persona data: JSONL or CSV rows {"persona": str, "user": str (optional), "reply": str, "label": 0|1}.

Every row is validated; every bad row is reported as `file:line: reason` and nothing is dropped silently.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import DataError

MAX_ERRORS_SHOWN = 20


@dataclass(frozen=True)
class Example:
    persona: str
    reply: str
    user: str | None = None
    label: int | None = None

    def to_json(self) -> dict:
        d = {"persona": self.persona}
        if self.user is not None:
            d["user"] = self.user
        d["reply"] = self.reply
        if self.label is not None:
            d["label"] = self.label
        return d


def validate_row(row: object, *, require_label: bool) -> tuple[Example | None, str | None]:
    if not isinstance(row, dict):
        return None, f"expected a JSON object, got {type(row).__name__}"
    for key in ("persona", "reply"):
        if key not in row:
            return None, f"missing field {key!r}"
        if not isinstance(row[key], str):
            return None, f"field {key!r} must be a string, got {type(row[key]).__name__}"
    if not row["reply"].strip():
        return None, "empty reply"
    if not row["persona"].strip():
        return None, "empty persona"
    user = row.get("user")
    if user is not None and not isinstance(user, str):
        return None, f"field 'user' must be a string, got {type(user).__name__}"
    label = row.get("label")
    if label is None or label == "":
        if require_label:
            return None, "missing field 'label'"
        label = None
    else:
        if isinstance(label, str) and label.strip() in ("0", "1"):
            label = int(label.strip())  # CSV cells are strings
        if isinstance(label, bool) or label not in (0, 1):
            return None, f"label must be 0 or 1, got {label!r}"
    return Example(persona=row["persona"], reply=row["reply"], user=user or None, label=label), None


def _read_text(path: Path) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise DataError(f"{path}:{line}: invalid UTF-8 (byte {e.start}); re-save the file as UTF-8") from None


def _read_rows(p: Path) -> tuple[list[tuple[int, object]], list[str]]:
    """(line number, parsed row) for every row of a JSONL or CSV file, and the lines that did not parse."""
    if not p.is_file():
        raise DataError(f"data file {str(p)!r} does not exist")
    if p.suffix.lower() not in (".jsonl", ".json", ".csv"):
        raise DataError(f"{p}: unknown data format {p.suffix!r}; use .jsonl or .csv")
    text = _read_text(p)
    rows: list[tuple[int, object]] = []
    errors: list[str] = []
    if p.suffix.lower() == ".csv":
        reader = csv.DictReader(io.StringIO(text))
        try:
            for rec in reader:
                rows.append((reader.line_num, {k: v for k, v in rec.items() if k is not None}))
        except csv.Error as e:  # e.g. a field over the csv module's limit (131,072 characters)
            raise DataError(f"{p}:{reader.line_num + 1}: unreadable CSV ({e}); fields are limited to "
                            f"{csv.field_size_limit():,} characters") from None
    else:
        for n, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                rows.append((n, json.loads(line)))
            except json.JSONDecodeError as e:
                errors.append(f"{p}:{n}: invalid JSON ({e.msg})")
            except RecursionError:
                errors.append(f"{p}:{n}: JSON nested too deeply (a row is one flat object)")
    return rows, errors


def _validated(p: Path, validate) -> list:
    rows, errors = _read_rows(p)
    out = []
    for n, row in rows:
        ex, err = validate(row)
        if err:
            errors.append(f"{p}:{n}: {err}")
        else:
            out.append(ex)
    if errors:
        shown = "\n  ".join(errors[:MAX_ERRORS_SHOWN])
        more = f"\n  … and {len(errors) - MAX_ERRORS_SHOWN} more" if len(errors) > MAX_ERRORS_SHOWN else ""
        raise DataError(f"{len(errors)} bad row(s) in {p}:\n  {shown}{more}")
    if not out:
        raise DataError(f"{p} has no rows")
    return out


def load_examples(path: str | Path, *, require_label: bool = False) -> list[Example]:
    """Persona rows {persona, user?, reply, label?} for the detector."""
    return _validated(Path(path), lambda row: validate_row(row, require_label=require_label))


def _text_row(row: object) -> tuple[tuple[str, str | None] | None, str | None]:
    if not isinstance(row, dict):
        return None, f"expected a JSON object, got {type(row).__name__}"
    text, pair = row.get("text"), row.get("text_pair")
    if not isinstance(text, str) or not text.strip():
        return None, "field 'text' must be a non-empty string (rows for a stock classifier: {text, text_pair?, label?})"
    if pair is not None and not isinstance(pair, str):
        return None, f"field 'text_pair' must be a string, got {type(pair).__name__}"
    return (text, pair or None), None


def load_texts(path: str | Path) -> list[tuple[str, str | None]]:
    """Text rows {text, text_pair?} for a stock classifier (labels, if present, are not needed for parity)."""
    return _validated(Path(path), _text_row)


def encode_texts(tokenizer, texts: list[tuple[str, str | None]], max_length: int) -> list[np.ndarray]:
    """As the classifier's own tokenizer encodes them, cut to max_length."""
    return [np.asarray(tokenizer(t, p, truncation=True, max_length=max_length)["input_ids"], dtype=np.int64) for t, p in texts]


def context_text(ex: Example) -> str:
    """Segment A: the persona, then the user's turn when there is one."""
    return ex.persona if not ex.user else f"{ex.persona}\n\nUser: {ex.user}"


DEFAULT_CONTEXT_TOKENS = 32


def encode(tokenizer, examples: list[Example], max_length: int, context_tokens: int | None = DEFAULT_CONTEXT_TOKENS) -> list[np.ndarray]:
    """Token ids per example (no padding): [CLS] persona (+ user) [SEP] reply [SEP].

    The reply is what is judged, so the context (persona card + user turn) is cut first, and to at most
    `context_tokens`: under masked mean pooling a 60-token card would otherwise outweigh a 15-token reply, and a
    small detector then learns which card it saw instead of how the reply sounds (measured: the same canned
    refusal scored 0.001 under one unseen card and 0.99 under another). None keeps the whole context."""
    rows = []
    n_special = tokenizer.num_special_tokens_to_add(pair=True)
    for ex in examples:
        limit = max_length
        if context_tokens is not None:
            n_reply = len(tokenizer(ex.reply, add_special_tokens=False)["input_ids"])
            limit = min(max_length, n_reply + context_tokens + n_special)
        try:
            enc = tokenizer(context_text(ex), ex.reply, truncation="only_first", max_length=limit)
        except Exception:  # the reply alone is longer than max_length: cut both sides
            enc = tokenizer(context_text(ex), ex.reply, truncation="longest_first", max_length=max_length)
        rows.append(np.asarray(enc["input_ids"], dtype=np.int64))
    return rows
