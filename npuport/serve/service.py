"""What every route shares, whatever protocol it speaks (npuport's /v1, KServe V2, TEI): readiness, the request
deadline, the one path items take (tokenize -> pool -> answers) and the one mapping of failures to HTTP answers.

    not ready yet                   503 "loading"
    an item longer than the buckets 413 (with --reject-long)
    the model replica died          503 with Retry-After: the fleet replaces it; a retry goes to a live replica
    no answer within the deadline   504
"""

from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable

from fastapi.responses import JSONResponse

from .engine import Front, TooLong
from .guard import error
from .metrics import RequestMetrics
from .pool import Pool, ReplicaLost
from .stats import ModelStats

REPLICA_HEADER = "X-Npuport-Replica"  # which replica computed the answer (one process: local-PID)
RETRY_AFTER_S = 1


class Service:
    FAILURES = (TooLong, ReplicaLost)  # what `run` raises after admission besides the deadline: see `failure`
    def __init__(self, cfg, pool: Pool, metrics: RequestMetrics, name: str):
        self.cfg, self.pool, self.metrics, self.name = cfg, pool, metrics, name
        self.started = False  # the app's lifespan has begun (and not ended)
        self.stats = ModelStats()  # Triton's statistics extension (serve/stats.py)
        self.inflight = 0  # requests running the model, over HTTP and gRPC alike (--max-concurrent-requests)

    def admit(self) -> str | None:
        """Admission control for a request that runs the model, whatever protocol it came by: None when admitted
        (then `release` when it ends), else why not (HTTP 429 / gRPC RESOURCE_EXHAUSTED, Retry-After 1)."""
        if self.inflight >= self.cfg.max_concurrent_requests:
            return f"{self.inflight} requests in flight (limit {self.cfg.max_concurrent_requests}); retry shortly"
        self.inflight += 1
        self.metrics.inflight.inc()
        return None

    def release(self) -> None:
        self.inflight -= 1
        self.metrics.inflight.dec()

    @property
    def ready(self) -> bool:
        """Ready to answer: started, and the pool has a model that computes (on Ray: a model replica answered;
        the ingress is up long before its replicas finish loading and warming their shapes)."""
        return self.started and self.pool.ready

    @property
    def front(self) -> Front:
        return self.pool.front

    @property
    def is_detector(self) -> bool:
        return self.front.task.is_detector

    async def run(self, items: list, *, logits: bool = False) -> tuple[list[dict], str]:
        """Answers for items (detector: Example; classifier: (text, pair or None)), and the replica that computed
        them; `logits`: each answer also holds its row of raw logits (TEI's raw_scores). Raises TooLong and
        ReplicaLost; `respond` turns them into HTTP answers."""
        t0 = time.perf_counter()
        try:
            enc = await self.pool.tokenize(items)
            tokenized = time.perf_counter()
            self.metrics.tokenization.observe(tokenized - t0)
            rows, buckets, replica, timing = await self.pool.infer([x.tokens for x in enc])
        except Exception:  # too long, a lost replica, a runtime error: counted, then answered by `respond`
            self.stats.failed(time.perf_counter() - t0)
            raise
        t1 = time.perf_counter()
        front = self.front
        out = [{**answer(front, z), "threshold": front.threshold, "bucket": int(b), "truncated": x.truncated,
                **({"logits": [float(v) for v in z]} if logits else {})}
               for z, b, x in zip(rows, buckets, enc)]
        t2 = time.perf_counter()
        self.stats.answered(len(items), total_s=t2 - t0, tokenize_s=tokenized - t0, output_s=t2 - t1, replica=replica,
                            timing=timing)
        return out, replica

    async def respond(self, handler: Callable[[], Awaitable[JSONResponse]]) -> JSONResponse:
        """Run a route's handler under readiness, the deadline and the failure table above."""
        if not self.ready:
            return error(503, "loading")
        try:
            return await asyncio.wait_for(handler(), self.cfg.request_timeout_s)
        except (asyncio.TimeoutError, *self.FAILURES) as e:
            return error(*self.failure(e))

    def failure(self, e: Exception) -> tuple[int, str, dict | None]:
        """The table above for a request that failed after admission: (HTTP status, message, headers). gRPC maps the
        same statuses to its codes (serve/v2_grpc.py)."""
        if isinstance(e, asyncio.TimeoutError):
            self.stats.failed(self.cfg.request_timeout_s)
            return 504, (f"no answer within {self.cfg.request_timeout_s:g} s (--request-timeout); the service is "
                         "overloaded"), None
        if isinstance(e, TooLong):
            return 413, str(e), None
        return 503, (f"the model replica computing this request was lost ({e}); retry: the fleet replaces it"), \
            {"Retry-After": str(RETRY_AFTER_S)}


def answer(front: Front, logits_row) -> dict:
    if front.task.is_detector:  # the detector's view: P(deviation) against the threshold chosen on validation
        p = float(front.task.scores(logits_row[None])[0, 1])
        return {"deviation_probability": p, "label": front.labels[1] if p >= front.threshold else front.labels[0]}
    return front.task.describe(logits_row)
