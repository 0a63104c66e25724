"""Triton's statistics extension (`GET /v2/models[/{name}[/versions/1]]/stats`, tritonclient's
get_inference_statistics): cumulative counts and nanoseconds per phase, kept by the serving process for the requests
it answered (on a fleet: the ingress, over every replica).

    success          requests answered, and their time from tokenizing to the answers
    fail             requests that ended in an error after admission (too long, replica lost, deadline)
    queue            time each request waited in its replica's micro-batcher
    compute_input    tokenization
    compute_infer    the batch's execution on the runtime, for each request in it
    compute_output   shaping the answers from the logits
    inference_count  items answered (Triton counts every item of a batched request)
    execution_count  runtime executions (micro-batches): a batch counts once however many requests it joined
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field

PHASES = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output", "cache_hit", "cache_miss")
_RECENT_BATCHES = 4096  # batch keys remembered to count each execution once (requests of one batch finish together)


@dataclass
class ModelStats:
    counts: dict = field(default_factory=lambda: {p: [0, 0] for p in PHASES})  # phase -> [count, ns]
    inference_count: int = 0
    execution_count: int = 0
    last_inference_ms: int = 0
    by_batch_size: dict = field(default_factory=dict)  # rows -> [executions, ns]
    _seen: OrderedDict = field(default_factory=OrderedDict)

    def add(self, phase: str, seconds: float) -> None:
        c = self.counts[phase]
        c[0] += 1
        c[1] += int(seconds * 1e9)

    def answered(self, items: int, *, total_s: float, tokenize_s: float, output_s: float, replica: str,
                 timing: tuple) -> None:
        """One request answered by `replica`. timing: (queue_s, infer_s, batch_no, batch_rows) from that replica's
        batcher; a batch is one execution however many requests it answered, so it counts once per (replica, batch)."""
        queue_s, infer_s, batch_no, rows = timing
        key = (replica, batch_no)
        self.add("success", total_s)
        self.add("compute_input", tokenize_s)
        self.add("queue", queue_s)
        self.add("compute_infer", infer_s)
        self.add("compute_output", output_s)
        self.inference_count += items
        self.last_inference_ms = int(time.time() * 1e3)
        if key not in self._seen:
            self._seen[key] = None
            if len(self._seen) > _RECENT_BATCHES:
                self._seen.popitem(last=False)
            self.execution_count += 1
            b = self.by_batch_size.setdefault(int(rows), [0, 0])
            b[0] += 1
            b[1] += int(infer_s * 1e9)

    def failed(self, seconds: float) -> None:
        self.add("fail", seconds)

    def to_json(self, name: str) -> dict:
        return {"name": name, "version": "1", "last_inference": self.last_inference_ms,
                "inference_count": self.inference_count, "execution_count": self.execution_count,
                "inference_stats": {p: {"count": c, "ns": ns} for p, (c, ns) in self.counts.items()},
                # per batch size, the executions and their runtime time (input and output are per request above)
                "batch_stats": [{"batch_size": rows, "compute_infer": {"count": n, "ns": ns}}
                                for rows, (n, ns) in sorted(self.by_batch_size.items())],
                "memory_usage": []}
