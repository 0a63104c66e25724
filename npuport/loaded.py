"""`npuport.load(out)`: an artifact as a Python callable, for users who never open a shell.

The same checks as `npuport serve`: file hashes against the manifest, and a parity record that passed (serve/engine.py
`Engine`). A call takes texts or token batches and returns logits (N, C) as float32 numpy, routed to the smallest
compiled bucket that fits each row, like the server:

    session = npuport.load("out")
    session(["a reply", "another"])                     # a classifier: texts (or (text, text_pair) tuples)
    session([{"persona": "...", "reply": "..."}])       # a persona-deviation detector: persona rows
    session({"input_ids": ids, "attention_mask": mask})  # token batches (numpy or torch, (B, T)); padding dropped
    session.scores(...)                                 # probabilities (softmax / sigmoid) instead of logits
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .errors import ConfigError
from .serve.engine import Engine


class Loaded:
    def __init__(self, out: str, *, runtime: str | None = None, threads: int | None = None):
        # hash check; refuses an artifact whose parity failed. Token batches need no tokenizer; texts do (_items).
        self.engine = Engine(out, runtime, threads=threads, require_tokenizer=False)
        self.manifest, self.task, self.labels = self.engine.manifest, self.engine.task, list(self.engine.labels)

    def __repr__(self) -> str:
        m = self.manifest
        return (f"<npuport artifact {self.engine.artifact.name}: {m.runtime.name} {m.precision}, buckets "
                f"{sorted({t for _, t in m.shapes})}, labels {self.labels}>")

    def token_rows(self, inputs) -> list[np.ndarray]:
        """Token id rows (no padding) from texts, persona rows or a token batch."""
        if isinstance(inputs, Mapping) and "input_ids" in inputs:
            ids = _array(inputs["input_ids"], "input_ids")
            mask = _array(inputs.get("attention_mask", np.ones_like(ids)), "attention_mask")
            if ids.shape != mask.shape:
                raise ConfigError(f"input_ids {ids.shape} and attention_mask {mask.shape} differ in shape")
            return [row[m.astype(bool)] for row, m in zip(ids, mask)]
        items = [inputs] if isinstance(inputs, (str, Mapping)) else list(inputs)
        if items and all(isinstance(x, (list, tuple, np.ndarray)) and len(x) and all(
                isinstance(t, (int, np.integer)) for t in x) for x in items):
            return [np.asarray(x, dtype=np.int64) for x in items]  # lists of token ids
        return [e.tokens for e in self.engine.encode(self._items(items))]

    def _items(self, items: list) -> list:
        from .detector.data import validate_row

        if self.engine.tokenizer is None:
            raise ConfigError(f"{self.engine.artifact} has no tokenizer (it was ported without one): pass token batches "
                              "{'input_ids': (B, T), 'attention_mask': (B, T)}, or port with npuport.port(model, "
                              "tokenizer, ...)")
        out = []
        for i, x in enumerate(items):
            if self.task.is_detector:
                ex, err = validate_row(x, require_label=False) if isinstance(x, Mapping) else (
                    None, f"a persona-deviation detector takes rows {{persona, reply, user?}}, not a {type(x).__name__}")
                if err:
                    raise ConfigError(f"item {i}: {err}")
                out.append(ex)
            elif isinstance(x, str):
                out.append((x, None))
            elif isinstance(x, tuple) and len(x) == 2 and all(isinstance(t, (str, type(None))) for t in x):
                out.append(x)
            elif isinstance(x, Mapping) and isinstance(x.get("text"), str):
                out.append((x["text"], x.get("text_pair")))
            else:
                raise ConfigError(f"item {i}: give a text, a (text, text_pair) tuple or {{text, text_pair?}}, "
                                  f"not a {type(x).__name__}")
        return out

    def __call__(self, inputs) -> np.ndarray:
        rows = self.token_rows(inputs)
        if not rows:
            return np.zeros((0, len(self.labels)), dtype=np.float32)
        limit = self.engine.router.max_len
        rows = [r if len(r) <= limit else np.concatenate([r[: limit - 1], r[-1:]]) for r in rows]  # as serve: tail cut
        logits, _ = self.engine.infer(rows)
        return logits

    def scores(self, inputs) -> np.ndarray:
        return self.task.scores(self(inputs)).astype(np.float32)

    def close(self) -> None:
        self.engine.session.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _array(x, name: str) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    a = np.asarray(x)
    if a.ndim != 2 or not np.issubdtype(a.dtype, np.integer):
        raise ConfigError(f"{name} must be an integer array (B, T), got {a.dtype} {a.shape}")
    return a.astype(np.int64)
