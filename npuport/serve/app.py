"""HTTP service on a compiled artifact: POST /v1/detect, GET /healthz, /v1/model, /metrics, OpenAPI docs at /docs,
and a playground page at /. Bad input always gets a JSON 4xx body; the artifact is hash-checked (and its parity
must have passed) before serving.

Access policy with --api-key-file: every route needs the key (X-API-Key or Authorization: Bearer) except /healthz
(for probes) and the playground page / (static HTML that holds no model data and asks for the key); /metrics opens
to a scraper with --public-metrics. Requests whose Host header is not this service's (DNS rebinding) are refused
unless --allowed-hosts lists them. POST bodies must be application/json (no cross-origin "simple" requests).
"""

import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Union

from fastapi import FastAPI, Request  # module level: FastAPI resolves handler annotations from module globals
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from ..detector.data import Example
from ..errors import ConfigError
from . import tei, v2
from .engine import Engine
from .guard import Guard, error, parse_json
from .metrics import RequestMetrics, exposition
from .pool import LocalPool, Pool
from .schemas import (
    BatchResponse,
    ClassifyBatchResponse,
    ClassifyResponse,
    DetectResponse,
    ErrorBody,
    explain,
    make_request_models,
)
from .service import REPLICA_HEADER, Service

PAGE = Path(__file__).with_name("page.html")
LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True, kw_only=True)
class ServeConfig:
    artifact_dir: str
    runtime: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    max_batch: int = 8
    max_batch_tokens: int = 4096  # rows x bucket length per runtime batch
    max_wait_ms: float = 5.0
    threshold: float | None = None
    api_key_file: str | None = None
    public_metrics: bool = False
    allowed_hosts: tuple[str, ...] = ()  # beyond loopback and --host; "*" allows any Host header
    max_items: int = 64
    max_body_bytes: int = 1 << 20
    max_chars: int = 20_000
    max_concurrent_requests: int = 64  # beyond it: 429 with Retry-After
    request_timeout_s: float = 30.0  # beyond it: 504
    truncate: str = "tail"
    reject_long: bool = False
    allow_unverified: bool = False
    require_signature: str | None = None  # public key: serve only an artifact signed with its private key
    model_name: str | None = None  # the KServe V2 model name (default: detector, or classifier)
    threads: int | None = None  # the runtime's threads (default: the artifact's, else the runtime's own)
    grpc_port: int | None = None  # also KServe V2 over gRPC on this port (serve/v2_grpc.py)

    def __post_init__(self):
        if not (0 < self.port < 65536):
            raise ConfigError(f"--port {self.port} must be in 1..65535")
        if self.grpc_port is not None and not (0 < self.grpc_port < 65536 and self.grpc_port != self.port):
            raise ConfigError(f"--grpc-port {self.grpc_port} must be in 1..65535 and differ from --port {self.port}")
        if self.max_items < 1 or self.max_body_bytes < 1024:
            raise ConfigError("--max-items must be >= 1 and the body limit >= 1024 bytes")
        if self.max_concurrent_requests < 1 or self.request_timeout_s <= 0 or self.max_batch_tokens < 1:
            raise ConfigError("--max-concurrent-requests, --request-timeout and --max-batch-tokens must be positive")

    def api_key(self) -> str | None:
        if not self.api_key_file:
            return None
        p = Path(self.api_key_file)
        if not p.is_file():
            raise ConfigError(f"--api-key-file {p} does not exist")
        key = p.read_text(encoding="utf-8").strip()
        if len(key) < 16:
            raise ConfigError(f"the API key in {p} is shorter than 16 characters")
        return key

    def hosts(self) -> set[str] | None:
        """Host names this service answers to; None = any."""
        if "*" in self.allowed_hosts:
            return None
        return {*LOOPBACK, self.host, *self.allowed_hosts}


def create_app(cfg: ServeConfig, engine: Engine | None = None, pool: Pool | None = None):
    """The service's FastAPI app. `pool` is where the model runs: this process by default (`LocalPool`, on `engine`
    if given), or Ray Serve model replicas (`fleet.RayPool`). Routes, limits and policies are the same on both."""
    key = cfg.api_key()
    registry = CollectorRegistry()
    metrics = RequestMetrics(registry)
    pool = pool or LocalPool(cfg, registry, engine)
    # The artifact decides the API: the detector judges {persona, user?, reply} at /v1/detect, a stock classifier
    # reads {text, text_pair?} at /v1/classify (and TEI's /predict); both speak KServe V2 under --model-name.
    is_detector = pool.front.task.is_detector
    svc = Service(cfg, pool, metrics, cfg.model_name or ("detector" if is_detector else "classifier"))

    grpc_v2 = grpc_module() if cfg.grpc_port else None  # before binding anything: the extra must be installed

    @asynccontextmanager
    async def lifespan(app):
        # gRPC binds first: a port in use fails the start before the model loads
        server = await grpc_v2.start(svc, cfg.host, cfg.grpc_port, key, cfg.max_body_bytes) if grpc_v2 else None
        try:
            await pool.start()
            svc.started = True
            yield
        finally:
            svc.started = False
            if server is not None:
                await server.stop(grace=5)
            await pool.stop()

    errors = {code: {"model": ErrorBody} for code in (400, 401)}
    what = ("npuport persona-deviation detector", "Flags replies in which an AI character broke persona.") if is_detector \
        else ("npuport sequence classifier", "Classifies text with a fine-tuned Hugging Face classifier's own head.")
    app = FastAPI(title=what[0], version="1", lifespan=lifespan, responses=errors,
                  description=f"{what[1]} Served from a compiled, hash-checked artifact whose parity with the eager model "
                  "was proven when it was ported. Also speaks KServe V2 (/v2/models/{name}/infer)"
                  + ("." if is_detector else " and text-embeddings-inference's /predict."))
    open_routes = {"/healthz", "/v2/health/live", "/v2/health/ready", ("GET", "/"),
                   *(("/health",) if not is_detector else ()), *(("/metrics",) if cfg.public_metrics else ())}
    app.add_middleware(Guard, cfg=cfg, key=key, allowed=cfg.hosts(), open_routes=open_routes, metrics=metrics,
                       svc=svc)
    _info_routes(app, svc, registry, key)
    Item, Batch = make_request_models(cfg.max_chars, cfg.max_items, detector=is_detector)
    _detect_route(app, svc, Item, Batch)
    v2.add_routes(app, svc)
    if not is_detector:
        tei.add_routes(app, svc)
    _document_bodies(app, Item, Batch)
    return app


def grpc_module():
    try:
        from . import v2_grpc
    except ImportError as e:
        raise ConfigError(f"--grpc-port needs gRPC and the KServe protocol's stubs ({e.name} is missing): "
                          'pip install "npuport[grpc]"') from None
    return v2_grpc


def _info_routes(app: FastAPI, svc: Service, registry, key: str | None) -> None:
    """/healthz, /v1/model, /metrics and the playground page."""
    from prometheus_client import CONTENT_TYPE_LATEST

    @app.get("/healthz", responses={503: {"model": ErrorBody}})
    async def healthz():
        if not svc.ready:
            return error(503, "loading")
        return {"status": "ok"}

    @app.get("/v1/model", responses={503: {"model": ErrorBody}})
    async def model():
        if not svc.ready:
            return error(503, "loading")
        return svc.front.model_card()

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics_page():
        text = exposition(registry) + await svc.pool.metrics_text()
        return PlainTextResponse(text, media_type=CONTENT_TYPE_LATEST)

    @app.get("/", response_class=HTMLResponse)
    async def page():
        if not svc.is_detector:  # the playground is the detector's; a classifier's API is documented at /docs
            return HTMLResponse('<!doctype html><title>npuport</title><p>POST {"text": ...} to <code>/v1/classify</code>; '
                                'see <a href="/docs">/docs</a>.</p>')
        return HTMLResponse(PAGE.read_text(encoding="utf-8").replace("__NEEDS_KEY__", "true" if key else "false"))


def _detect_route(app: FastAPI, svc: Service, Item, Batch) -> None:
    """POST /v1/detect (detector) or /v1/classify (stock classifier): one item or {items: [...]}, validated, batched."""
    cfg, is_detector = svc.cfg, svc.is_detector
    route = "/v1/detect" if is_detector else "/v1/classify"
    detect_errors = {code: {"model": ErrorBody} for code in (413, 415, 422, 429, 503, 504)}
    answer = Union[DetectResponse, BatchResponse] if is_detector else Union[ClassifyResponse, ClassifyBatchResponse]

    @app.post(route, response_model=answer, responses=detect_errors,
              openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": {
                  "oneOf": [{"$ref": "#/components/schemas/Item"}, {"$ref": "#/components/schemas/Batch"}]}}}}})
    async def detect(request: Request):
        return await svc.respond(lambda: _detect(request))

    async def _detect(request: Request):
        t0 = time.perf_counter()
        body, problem = parse_json(await request.body())
        if problem:
            return error(400, problem)
        if not isinstance(body, dict):
            return error(422, "the body must be a JSON object: {persona, user?, reply} or {items: [...]}")
        is_batch = "items" in body
        try:
            parsed = (Batch if is_batch else Item).model_validate(body)
        except ValidationError as e:
            return error(*explain(e, is_batch, cfg.max_chars, cfg.max_items))
        given = parsed.items if is_batch else [parsed]
        items = ([Example(persona=it.persona, reply=it.reply, user=it.user or None) for it in given] if is_detector
                 else [(it.text, it.text_pair or None) for it in given])
        results, replica = await svc.run(items)
        m = svc.front.manifest
        out = {"model": m.source["sha256"][:16], "backend": m.runtime.name,
               "latency_ms": round((time.perf_counter() - t0) * 1e3, 3)}
        return JSONResponse({**out, "items": results} if is_batch else {**out, **results[0]},
                            headers={REPLICA_HEADER: replica})


def _document_bodies(app: FastAPI, Item, Batch) -> None:
    """OpenAPI: the request bodies' schemas come from the very pydantic models that validate them."""
    _orig = app.openapi

    def openapi():
        if app.openapi_schema is None:
            schema = _orig()  # FastAPI builds and caches it in app.openapi_schema
            comps = schema.setdefault("components", {}).setdefault("schemas", {})
            for m in (Item, Batch):
                js = m.model_json_schema(ref_template="#/components/schemas/{model}")
                comps.update(js.pop("$defs", {}))
                comps[m.__name__] = js
        return app.openapi_schema

    app.openapi = openapi


def serve(cfg: ServeConfig) -> None:
    import uvicorn

    # fail fast, before binding: hashes, parity, tokenizer
    engine = Engine(cfg.artifact_dir, cfg.runtime, cfg.threshold, cfg.truncate, cfg.reject_long,
                    allow_unverified=cfg.allow_unverified, require_signature=cfg.require_signature, threads=cfg.threads)
    uvicorn.run(create_app(cfg, engine), host=cfg.host, port=cfg.port, log_level="info", timeout_graceful_shutdown=30)
