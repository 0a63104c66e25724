"""Where the model runs, as the HTTP app sees it: `tokenize(items)` and `infer(rows)`. One process (`LocalPool`: the
engine and its micro-batcher in this event loop) or Ray Serve model replicas (`fleet.RayPool`), behind one interface
so every route and protocol behaves the same on both.
"""

from __future__ import annotations

import os
from typing import Protocol

import numpy as np
from prometheus_client import CollectorRegistry

from .engine import Batcher, Encoded, Engine, Front
from .metrics import BatchMetrics


class ReplicaLost(Exception):
    """The model replica that held a request died before answering. The request is answered 503 with Retry-After:
    the fleet replaces the replica, and a retry goes to a live one."""


class Pool(Protocol):
    front: Front  # manifest, tokenizer, threshold: what shaping the answers needs
    ready: bool  # a model that computes is there (the app answers 503 "loading" until then)

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def tokenize(self, items: list) -> list[Encoded]: ...

    # logits, buckets, replica, timing (Batcher.submit's: queued s, batch s, batch number, batch rows)
    async def infer(self, rows: list[np.ndarray]) -> tuple[np.ndarray, list[int], str, tuple]: ...

    async def metrics_text(self) -> bytes: ...  # model-side series beyond the app's own registry


class LocalPool:
    """The model in this process: one engine (hash-checked, warmed up) and its micro-batcher."""

    def __init__(self, cfg, registry: CollectorRegistry, engine: Engine | None = None):
        self.cfg, self.registry = cfg, registry
        self.front = engine or Front(cfg.artifact_dir, cfg.runtime, cfg.threshold, cfg.truncate, cfg.reject_long,
                                     allow_unverified=cfg.allow_unverified, require_signature=cfg.require_signature)
        self.engine = engine
        self.replica = f"local-{os.getpid()}"
        self.batcher: Batcher | None = None
        self.ready = False

    async def start(self) -> None:
        cfg = self.cfg
        if self.engine is None:
            self.engine = Engine(cfg.artifact_dir, cfg.runtime, cfg.threshold, cfg.truncate, cfg.reject_long,
                                 allow_unverified=cfg.allow_unverified, require_signature=cfg.require_signature,
                                 threads=cfg.threads)
            self.front = self.engine
        self.engine.warm_up()
        self.batcher = Batcher(self.engine, cfg.max_batch, cfg.max_wait_ms, BatchMetrics(self.registry),
                               max_tokens=cfg.max_batch_tokens)
        self.batcher.start()
        self.ready = True

    async def stop(self) -> None:
        if self.batcher:
            await self.batcher.stop()

    async def tokenize(self, items: list) -> list[Encoded]:
        return await self.batcher.tokenize(items)

    async def infer(self, rows: list[np.ndarray]) -> tuple[np.ndarray, list[int], str, tuple]:
        logits, buckets, timing = await self.batcher.submit(rows)
        return logits, buckets, self.replica, timing

    async def metrics_text(self) -> bytes:
        return b""  # the batcher records into the app's registry


