"""The bucket router: each input goes to the smallest compiled sequence bucket that fits, and rows of one bucket
are packed onto the compiled batch sizes (missing rows are all-padding and dropped from the result)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .runtimes.base import Session, feeds_of


@dataclass
class Routed:
    logits: np.ndarray  # (N, 2) float32, in input order
    buckets: list[int]
    truncated: list[bool]


class BucketRouter:
    def __init__(self, shapes: list[tuple[int, int]], pad_id: int):
        self.batch_sizes = sorted({b for b, _ in shapes})
        self.buckets = sorted({t for _, t in shapes})
        self.pad_id = int(pad_id)

    @property
    def max_len(self) -> int:
        return self.buckets[-1]

    def bucket_for(self, length: int) -> int:
        for t in self.buckets:
            if length <= t:
                return t
        return self.buckets[-1]

    def plan(self, n: int) -> list[int]:
        """Split n rows into compiled batch sizes: the largest that fits, then the smallest that covers the rest."""
        out = []
        while n > 0:
            fits = [b for b in self.batch_sizes if b <= n]
            b = fits[-1] if fits else self.batch_sizes[0]
            out.append(b)
            n -= min(b, n)
        return out

    def pack(self, rows: list[np.ndarray], bucket: int, batch: int) -> dict[str, np.ndarray]:
        ids = np.full((batch, bucket), self.pad_id, dtype=np.int64)
        mask = np.zeros((batch, bucket), dtype=np.int64)
        for r, tokens in enumerate(rows):
            n = min(len(tokens), bucket)
            ids[r, :n] = tokens[:n]
            mask[r, :n] = 1
        return feeds_of(ids, mask)

    def run(self, session: Session, token_rows: list[np.ndarray]) -> Routed:
        n = len(token_rows)
        logits = None  # (n, num_labels): the width comes from the first answer
        buckets = [self.bucket_for(len(t)) for t in token_rows]
        truncated = [len(t) > self.max_len for t in token_rows]
        for bucket in sorted(set(buckets)):
            idx = [i for i in range(n) if buckets[i] == bucket]
            start = 0
            for b in self.plan(len(idx)):
                chunk = idx[start : start + b]
                start += len(chunk)
                out = session.run(self.pack([token_rows[i] for i in chunk], bucket, b))
                if logits is None:
                    logits = np.zeros((n, out.shape[-1]), dtype=np.float32)
                logits[chunk] = out[: len(chunk)]
        if logits is None:
            logits = np.zeros((0, 0), dtype=np.float32)
        return Routed(logits=logits, buckets=buckets, truncated=truncated)
