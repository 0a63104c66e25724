"""Character-level data for LM training: corpus loaders, the vocabulary, deterministic batches.

Corpus formats (`--corpus-format`, default auto):
- `text`: the whole file is one document.
- `tinystories`: documents separated by `<|endoftext|>` lines; a file without them (TinyStories' newline-separated
  dumps) stays one stream with its newlines, which is what a character model trains on anyway.
- `jsonl`: one `{"text": ...}` object per line; bad lines are reported as file:line.
Auto picks jsonl for *.jsonl, tinystories when the separator occurs, text otherwise.

Documents are joined with the end-of-text token `<eot>` (id 0). Batches depend only on (seed, step), so a
resumed run, a second backend and every data-parallel worker see exactly the same samples.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import DataError

EOT = "<eot>"
UNK = "<unk>"
SEPARATOR = "<|endoftext|>"
FORMATS = ("auto", "text", "tinystories", "jsonl")
UNKNOWN_POLICIES = ("error", "replace", "skip")
DEMO_CORPUS = Path(__file__).with_name("stories.txt")


def read_documents(path: str | Path, fmt: str = "auto") -> list[str]:
    path = Path(path)
    if fmt not in FORMATS:
        raise DataError(f"corpus format {fmt!r}: choose one of {', '.join(FORMATS)}")
    if not path.exists():
        raise DataError(f"{path}: no such corpus file (pass --corpus FILE, or --demo-corpus for the embedded stories)")
    if path.is_dir():
        raise DataError(f"{path} is a directory; --corpus takes one text, TinyStories or JSONL file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text ({e}); convert it with iconv -t utf-8") from e
    except OSError as e:
        raise DataError(f"{path}: cannot be read ({e.strerror})") from None
    if not text.strip():
        raise DataError(f"{path} is empty: a corpus needs text to train on")
    if fmt == "auto":
        fmt = "jsonl" if path.suffix == ".jsonl" else ("tinystories" if SEPARATOR in text else "text")
    if fmt == "jsonl":
        docs, errors = [], []
        for i, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                errors.append(f"{path}:{i}: invalid JSON ({e.msg})")
                continue
            except RecursionError:
                errors.append(f"{path}:{i}: JSON nested too deeply (one object per line)")
                continue
            if not isinstance(row, dict) or not isinstance(row.get("text"), str):
                errors.append(f"{path}:{i}: expected an object with a string field \"text\"")
                continue
            docs.append(row["text"])
        if errors:
            more = f"\n… and {len(errors) - 20} more" if len(errors) > 20 else ""
            raise DataError(f"{len(errors)} bad line(s) in {path}:\n" + "\n".join(errors[:20]) + more)
    elif fmt == "tinystories":
        docs = [d.strip("\n") for d in text.split(SEPARATOR)]
    else:
        docs = [text]
    docs = [d for d in docs if d.strip()]
    if not docs:
        raise DataError(f"{path}: the corpus is empty (no non-blank text); give a file with some text in it")
    return docs


@dataclass(frozen=True)
class CharVocab:
    """id 0 = <eot>, id 1 = <unk>, then the corpus's characters in code-point order."""

    chars: tuple[str, ...]
    unknown: str = "error"  # what encode() does with a character outside the vocabulary

    @classmethod
    def build(cls, docs: list[str], unknown: str = "error") -> "CharVocab":
        return cls(tuple(sorted(set().union(*map(set, docs)))), unknown)

    def __post_init__(self):
        if self.unknown not in UNKNOWN_POLICIES:
            raise DataError(f"unknown-character policy {self.unknown!r}: choose one of {', '.join(UNKNOWN_POLICIES)}")
        object.__setattr__(self, "_index", {c: i + 2 for i, c in enumerate(self.chars)})

    @property
    def size(self) -> int:
        return len(self.chars) + 2

    def encode(self, text: str, *, policy: str | None = None) -> np.ndarray:
        policy = policy or self.unknown
        idx = self._index  # type: ignore[attr-defined]
        missing = sorted({c for c in text if c not in idx})
        if missing and policy == "error":
            shown = ", ".join(repr(c) for c in missing[:10]) + (" …" if len(missing) > 10 else "")
            raise DataError(
                f"{len(missing)} character(s) not in the model's vocabulary: {shown}. Remove them, or use the "
                "'replace' (map to <unk>) or 'skip' policy"
            )
        if policy == "skip":
            return np.array([idx[c] for c in text if c in idx], dtype=np.int64)
        return np.array([idx.get(c, 1) for c in text], dtype=np.int64)

    def decode(self, ids) -> str:
        out = []
        for i in ids:
            i = int(i)
            out.append("\n" if i == 0 else ("\ufffd" if i == 1 else self.chars[i - 2]))
        return "".join(out)

    def to_json(self) -> dict:
        return {"kind": "char", "specials": [EOT, UNK], "chars": "".join(self.chars), "unknown": self.unknown}

    @classmethod
    def from_json(cls, d: dict) -> "CharVocab":
        if d.get("kind") != "char" or not isinstance(d.get("chars"), str):
            raise DataError("vocab.json is not a character vocabulary written by npuport")
        return cls(tuple(d["chars"]), d.get("unknown", "error"))

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.to_json(), sort_keys=True).encode()).hexdigest()[:16]


def encode_documents(docs: list[str], vocab: CharVocab) -> np.ndarray:
    """One stream: doc <eot> doc <eot> …"""
    parts = []
    for d in docs:
        parts.append(vocab.encode(d))
        parts.append(np.zeros(1, dtype=np.int64))
    return np.concatenate(parts)


def split_stream(tokens: np.ndarray, val_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """Hold out the tail of the stream (the last documents) for validation."""
    if not 0.0 < val_fraction < 0.5:
        raise DataError(f"val_fraction={val_fraction}: must be in (0, 0.5)")
    cut = int(len(tokens) * (1.0 - val_fraction))
    return tokens[:cut], tokens[cut:]


class Batches:
    """x, y windows of `seq_len` drawn from `tokens`; batch `step` depends only on (seed, step)."""

    def __init__(self, tokens: np.ndarray, batch: int, seq_len: int, seed: int, *, name: str = "train"):
        if len(tokens) < seq_len + 1:
            raise DataError(
                f"the {name} split has {len(tokens)} tokens, fewer than one sequence of {seq_len}+1; use a longer "
                f"corpus or a smaller --seq-len"
            )
        self.tokens, self.batch, self.seq_len, self.seed = tokens, batch, seq_len, seed

    def starts(self, step: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, step])
        return rng.integers(0, len(self.tokens) - self.seq_len, size=self.batch)

    def get(self, step: int, rows: slice = slice(None)) -> tuple[np.ndarray, np.ndarray]:
        """(B, T) inputs and next-character targets; `rows` takes one worker's shard of the global batch."""
        s = self.starts(step)[rows]
        idx = s[:, None] + np.arange(self.seq_len)[None, :]
        return self.tokens[idx], self.tokens[idx + 1]

    def fixed(self, n_batches: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Evaluation batches: non-overlapping windows from the start, the same every time."""
        T, B = self.seq_len, self.batch
        usable = (len(self.tokens) - 1) // T
        n = min(n_batches * B, usable)
        out = []
        for i in range(0, n - n % B if n >= B else n, B):
            starts = np.arange(i, min(i + B, n)) * T
            idx = starts[:, None] + np.arange(T)[None, :]
            out.append((self.tokens[idx], self.tokens[idx + 1]))
        return out


def corpus_fingerprint(docs: list[str]) -> str:
    h = hashlib.sha256()
    for d in docs:
        h.update(d.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()[:16]
