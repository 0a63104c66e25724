"""The serving engine: a verified artifact, its tokenizer, the bucket router, and a micro-batcher.

Requests are tokenized on arrival on a tokenizer thread; a single worker collects them for up to `max_wait_ms`,
`max_batch` rows or `max_tokens` padded tokens, the router sends each row to the smallest bucket that fits and
packs rows of one bucket onto the compiled batch sizes, and the runtime call happens on one dedicated thread, so
the event loop never blocks. Requests whose caller gave up (timeout) are dropped before they are computed.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..artifact import find_artifacts, load_session, read_manifest
from ..detector.data import Example, encode
from ..errors import CheckFailed, ConfigError
from ..models.detector import load_tokenizer
from ..router import BucketRouter
from ..task import Task


class TooLong(Exception):
    def __init__(self, index: int, tokens: int, limit: int):
        super().__init__(f"item {index} has {tokens} tokens; the largest compiled bucket is {limit} (server runs with --reject-long)")


@dataclass
class Encoded:
    tokens: np.ndarray
    truncated: bool


class UnverifiedArtifact(CheckFailed):
    """The artifact's parity check failed, or never ran."""


def check_verified(manifest, where) -> None:
    parity = manifest.parity
    if not parity:
        raise UnverifiedArtifact(f"{where} carries no parity figures (its port stopped before the check?); re-run "
                                 "`npuport port`, or pass --allow-unverified to serve it anyway")
    failed = {k: v for k, v in parity.items() if not v.get("pass")}
    if failed:
        figs = "; ".join(f"{k}: max|Δlogit| {v.get('max_abs_logit_diff')}, agreement {v.get('decision_agreement')}"
                         for k, v in failed.items())
        raise UnverifiedArtifact(f"{where} failed its parity check ({figs}); refusing to serve it (--allow-unverified "
                                 "overrides)")


def select_artifact(artifact_dir: str, runtime: str | None = None) -> Path:
    """The artifact `serve` answers from: the first under artifact_dir, or the first of `runtime`."""
    arts = find_artifacts(artifact_dir)
    if runtime:
        arts = [a for a in arts if read_manifest(a).runtime.name == runtime]
        if not arts:
            raise ConfigError(f"no {runtime!r} artifact under {artifact_dir}")
    return Path(arts[0])


class Front:
    """What answering a request needs without running the model: the manifest, the tokenizer, the bucket limits and
    the threshold. An ingress that hands inference to model replicas (Ray Serve) holds only this."""

    def __init__(self, artifact_dir: str, runtime: str | None = None, threshold: float | None = None,
                 truncate: str = "tail", reject_long: bool = False, *, allow_unverified: bool = False,
                 require_signature: str | None = None, require_tokenizer: bool = True):
        if truncate not in ("head", "tail"):
            raise ConfigError(f"--truncate {truncate!r}: use head or tail")
        art = select_artifact(artifact_dir, runtime)
        self.artifact = art
        self.manifest = read_manifest(art)
        if require_signature:
            from ..signing import check_signature

            check_signature(art, require_signature)
        if not allow_unverified:
            check_verified(self.manifest, art)
        self.tokenizer = load_tokenizer(art / "tokenizer") if (art / "tokenizer").is_dir() else None
        if self.tokenizer is None and require_tokenizer:
            raise ConfigError(f"{art} has no tokenizer: port it with one (a model directory with its tokenizer files, "
                              "or npuport.port(model, tokenizer, ...))")
        self.router = BucketRouter(self.manifest.shapes, self.manifest.pad_token_id)
        self.threshold = float(threshold if threshold is not None else self.manifest.threshold)
        if not 0.0 < self.threshold < 1.0:
            raise ConfigError(f"--threshold {self.threshold} must be in (0, 1)")
        self.truncate, self.reject_long = truncate, reject_long
        self.labels = self.manifest.labels
        task = self.manifest.task
        self.task = Task(problem_type=task.problem_type, labels=task.labels, threshold=self.threshold)

    def model_card(self) -> dict:
        m = self.manifest
        return {
            # never a local path: the directory's name at most
            "model_sha256": m.source["sha256"], "source": {k: (Path(v).name if k == "path" else v) for k, v in m.source.items()},
            "backend": m.runtime.name, "runtime": m.runtime.name,
            "executes": m.runtime.executes, "backend_versions": m.runtime.versions, "device": m.device,
            "precision": m.precision,
            "buckets": sorted({t for _, t in self.manifest.shapes}),
            "batch_sizes": sorted({b for b, _ in self.manifest.shapes}),
            "threshold": self.threshold, "labels": self.labels, "problem_type": self.task.problem_type,
            "kind": "persona-deviation detector" if self.task.is_detector else "sequence classifier",
            "proof": {k: v.get("max_abs_diff") for k, v in m.capture["proof"].items()},
            "parity": {k: {f: v[f] for f in ("max_abs_logit_diff", "max_abs_prob_diff", "decision_agreement", "n")}
                       for k, v in m.parity.items()},
            "npuport_version": m.npuport_version,
        }

    def _token_rows(self, items: list) -> list[np.ndarray]:
        if self.task.is_detector:  # Example: [CLS] persona (+ user) [SEP] reply [SEP]
            return encode(self.tokenizer, items, max_length=1 << 20)
        # a stock classifier: (text, text_pair or None), tokenized as its own tokenizer does
        return [np.asarray(self.tokenizer(t, p)["input_ids"], dtype=np.int64) for t, p in items]

    def encode(self, items: list) -> list[Encoded]:
        limit = self.router.max_len
        out = []
        for i, row in enumerate(self._token_rows(items)):
            if len(row) <= limit:
                out.append(Encoded(row, False))
                continue
            if self.reject_long:
                raise TooLong(i, len(row), limit)
            if self.truncate == "tail":  # keep the beginning, drop the end, keep the closing separator
                row = np.concatenate([row[: limit - 1], row[-1:]])
            else:  # keep the end (the reply's last words), keep the leading [CLS]
                row = np.concatenate([row[:1], row[-(limit - 1):]])
            out.append(Encoded(row, True))
        return out



class Engine(Front):
    """A Front with the loaded, hash-checked session: what runs the model (one process, or one model replica)."""

    def __init__(self, *args, threads: int | None = None, **kw):
        super().__init__(*args, **kw)
        # hash check before anything is served; threads: the runtime's intra-op threads (one replica per core)
        self.manifest, self.session = load_session(self.artifact, threads=threads)
        self.router = BucketRouter(self.session.shapes, self.manifest.pad_token_id)

    def infer(self, rows: list[np.ndarray]):
        """Logits (N, num_labels) and the bucket each row ran at; `task` says what they mean."""
        routed = self.router.run(self.session, rows)
        return routed.logits, routed.buckets

    def warm_up(self) -> None:
        for b, t in self.session.shapes:
            self.session.run(self.router.pack([np.array([1, 2])] * b, t, b))


class Batcher:
    """Collects rows for up to max_wait_ms / max_batch rows, then runs them in one router call."""

    def __init__(self, engine: Engine, max_batch: int, max_wait_ms: float, metrics=None, max_tokens: int = 1 << 30):
        if max_batch < 1 or max_wait_ms < 0:
            raise ConfigError(f"--max-batch must be >= 1 and --max-wait-ms >= 0 (got {max_batch}, {max_wait_ms})")
        self.engine, self.max_batch, self.max_wait = engine, max_batch, max_wait_ms / 1e3
        self.max_tokens = max_tokens
        self.queue: asyncio.Queue = asyncio.Queue()
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="npuport-runtime")
        self.tokenizer_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="npuport-tokenize")
        self.metrics = metrics  # BatchMetrics (serve/metrics.py) or None
        self._task: asyncio.Task | None = None
        self.batches = 0  # runtime executions so far

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
        self.pool.shutdown(wait=True)
        self.tokenizer_pool.shutdown(wait=True)

    async def tokenize(self, items: list[Example]) -> list[Encoded]:
        return await asyncio.get_running_loop().run_in_executor(self.tokenizer_pool, self.engine.encode, items)

    def _tokens(self, rows: list[np.ndarray]) -> int:
        """Padded tokens the rows cost: each is computed at its bucket's length."""
        return sum(self.engine.router.bucket_for(len(r)) for r in rows)

    async def submit(self, rows: list[np.ndarray]) -> tuple[np.ndarray, list[int], tuple]:
        """(logits, buckets, timing) for rows; timing: (seconds queued, seconds the batch ran, the batch's number
        in this batcher, rows in the batch), for the statistics route (serve/stats.py)."""
        fut = asyncio.get_running_loop().create_future()
        await self.queue.put((rows, fut, time.perf_counter()))
        self._queued()
        return await fut

    def _queued(self) -> None:
        if self.metrics:
            self.metrics.queue.set(self.queue.qsize())

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            first = await self.queue.get()
            self._queued()
            batch, n, tokens = [first], len(first[0]), self._tokens(first[0])
            deadline = time.perf_counter() + self.max_wait
            while n < self.max_batch and tokens < self.max_tokens:
                timeout = deadline - time.perf_counter()
                if timeout <= 0:
                    break
                try:
                    nxt = await asyncio.wait_for(self.queue.get(), timeout)
                except asyncio.TimeoutError:
                    break
                self._queued()
                batch.append(nxt)
                n += len(nxt[0])
                tokens += self._tokens(nxt[0])
            batch = [(req, fut, t) for req, fut, t in batch if not fut.done()]  # callers that timed out are gone
            if not batch:
                continue
            rows = [r for req, _, _ in batch for r in req]
            t0 = time.perf_counter()
            waits = [t0 - t for _, _, t in batch]
            try:
                logits, buckets = await loop.run_in_executor(self.pool, self.engine.infer, rows)
            except Exception as e:  # hand the runtime's error to every waiting request instead of hanging them
                for _, fut, _ in batch:
                    if not fut.done():
                        fut.set_exception(e)
                continue
            ran = time.perf_counter() - t0
            if self.metrics:
                self.metrics.on_batch(len(rows), self._tokens(rows), buckets, waits, ran)
            self.batches += 1
            k = 0
            for (req, fut, _), wait in zip(batch, waits):
                if not fut.done():
                    fut.set_result((logits[k : k + len(req)], buckets[k : k + len(req)],
                                    (wait, ran, self.batches, len(rows))))
                k += len(req)
