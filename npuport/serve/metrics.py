"""The service's Prometheus metrics, named after what text-embeddings-inference exports: the queue, each runtime
batch (rows and padded tokens) and where a request's time goes (queue, tokenization, inference), as histograms.

One process keeps them in a registry of its own (several apps in one process stay apart). Under Ray Serve every
model replica keeps its own, labelled `replica`, and the ingress's /metrics gathers them: one series per replica.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

SECONDS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5)
ROWS = (1, 2, 4, 8, 16, 32, 64)
TOKENS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)


class RequestMetrics:
    """What the HTTP front door records: requests by route and status, their latency, those in flight."""

    def __init__(self, registry: CollectorRegistry):
        self.requests = Counter("npuport_requests", "HTTP requests", ["route", "status"], registry=registry)
        self.latency = Histogram("npuport_request_latency_seconds", "request latency", ["route"], registry=registry,
                                 buckets=(0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5))
        self.inflight = Gauge("npuport_inflight_requests", "inference requests being served", registry=registry)
        self.tokenization = Histogram("npuport_tokenization_duration_seconds", "time to tokenize a request",
                                      registry=registry, buckets=SECONDS)


class BatchSeries:
    """What a micro-batcher records, whatever holds the series: queue (a gauge), batch_rows, batch_tokens,
    queue_time, infer_time (histograms with `observe`)."""

    queue = batch_rows = batch_tokens = queue_time = infer_time = None

    def on_batch(self, rows: int, padded_tokens: int, buckets, queue_waits: list[float], infer_s: float) -> None:
        self.batch_rows.observe(rows)
        self.batch_tokens.observe(padded_tokens)
        self.infer_time.observe(infer_s)
        for w in queue_waits:
            self.queue_time.observe(w)


class BatchMetrics(BatchSeries):
    """The micro-batcher's series in a Prometheus registry. `replica` labels every series (empty in one process)."""

    def __init__(self, registry: CollectorRegistry, replica: str = ""):
        labels = ["replica"]
        self.replica = replica
        mk = lambda cls, name, doc, **kw: cls(name, doc, labels, registry=registry, **kw).labels(replica=replica)  # noqa: E731
        self.queue = mk(Gauge, "npuport_queue_size", "requests waiting for the next runtime batch")
        self.batch_rows = mk(Histogram, "npuport_batch_rows", "rows per runtime batch", buckets=ROWS)
        self.batch_tokens = mk(Histogram, "npuport_batch_padded_tokens", "padded tokens per runtime batch (rows x "
                               "bucket length)", buckets=TOKENS)
        self.queue_time = mk(Histogram, "npuport_queue_duration_seconds", "time a request waited for its batch",
                             buckets=SECONDS)
        self.infer_time = mk(Histogram, "npuport_inference_duration_seconds", "runtime time per batch", buckets=SECONDS)
        self._bucket = Counter("npuport_bucket_rows", "rows routed per sequence bucket", ["replica", "bucket"],
                               registry=registry)

    def on_batch(self, rows: int, padded_tokens: int, buckets, queue_waits: list[float], infer_s: float) -> None:
        super().on_batch(rows, padded_tokens, buckets, queue_waits, infer_s)
        for b in buckets:
            self._bucket.labels(replica=self.replica, bucket=str(b)).inc()


def exposition(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
