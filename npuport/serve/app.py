"""HTTP service on a compiled artifact: POST /v1/detect, GET /healthz, /v1/model, /metrics, OpenAPI docs at /docs,
and a playground page at /. Bad input always gets a JSON 4xx body; the artifact is hash-checked before serving."""

import hmac
import json
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from fastapi import FastAPI, Request  # module level: FastAPI resolves handler annotations from module globals
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse

from ..detector.data import Example
from ..errors import ConfigError
from .engine import Batcher, Engine, TooLong

PAGE = Path(__file__).with_name("page.html")


@dataclass(frozen=True, kw_only=True)
class ServeConfig:
    artifact_dir: str
    backend: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    max_batch: int = 8
    max_wait_ms: float = 5.0
    threshold: float | None = None
    api_key_file: str | None = None
    max_items: int = 64
    max_body_bytes: int = 1 << 20
    max_chars: int = 20_000
    truncate: str = "tail"
    reject_long: bool = False

    def __post_init__(self):
        if not (0 < self.port < 65536):
            raise ConfigError(f"--port {self.port} must be in 1..65535")
        if self.max_items < 1 or self.max_body_bytes < 1024:
            raise ConfigError("--max-items must be >= 1 and the body limit >= 1024 bytes")

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


def _error(status: int, message: str, **extra):
    return JSONResponse({"error": message, **extra}, status_code=status)


def _validate(body: object, max_items: int, max_chars: int) -> tuple[list[Example], bool] | tuple[None, tuple[int, str]]:
    """-> (items, is_batch) or (None, (status, message)). Strict types: no coercion of numbers to strings."""
    if not isinstance(body, dict):
        return None, (422, "the body must be a JSON object: {persona, user?, reply} or {items: [...]}")
    is_batch = "items" in body
    if is_batch:
        if set(body) - {"items"}:
            return None, (422, f"unexpected fields beside 'items': {sorted(set(body) - {'items'})}")
        raw = body["items"]
        if not isinstance(raw, list) or not raw:
            return None, (422, "'items' must be a non-empty list")
        if len(raw) > max_items:
            return None, (413, f"{len(raw)} items; at most {max_items} per request")
    else:
        raw = [body]
    items = []
    for i, it in enumerate(raw):
        where = f"items[{i}]" if is_batch else "body"
        if not isinstance(it, dict):
            return None, (422, f"{where} must be an object")
        extra = set(it) - {"persona", "user", "reply"}
        if extra:
            return None, (422, f"{where}: unknown fields {sorted(extra)}")
        for key in ("persona", "reply"):
            v = it.get(key)
            if v is None:
                return None, (422, f"{where}: missing field {key!r}")
            if not isinstance(v, str):
                return None, (422, f"{where}.{key} must be a string, got {type(v).__name__}")
            if not v.strip():
                return None, (422, f"{where}.{key} is empty")
            if len(v) > max_chars:
                return None, (413, f"{where}.{key} has {len(v)} characters; at most {max_chars}")
        user = it.get("user")
        if user is not None and not isinstance(user, str):
            return None, (422, f"{where}.user must be a string or absent, got {type(user).__name__}")
        if user is not None and len(user) > max_chars:
            return None, (413, f"{where}.user has {len(user)} characters; at most {max_chars}")
        items.append(Example(persona=it["persona"], reply=it["reply"], user=user or None))
    return items, is_batch


def create_app(cfg: ServeConfig, engine: Engine | None = None):
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

    key = cfg.api_key()
    registry = CollectorRegistry()
    m_requests = Counter("npuport_requests", "HTTP requests", ["route", "status"], registry=registry)
    m_latency = Histogram("npuport_request_latency_seconds", "request latency", ["route"], registry=registry,
                          buckets=(0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5))
    m_batch = Histogram("npuport_batch_rows", "rows per runtime batch", registry=registry, buckets=(1, 2, 4, 8, 16, 32, 64))
    m_bucket = Counter("npuport_bucket_rows", "rows routed per sequence bucket", ["bucket"], registry=registry)
    state: dict = {"ready": False}

    def on_batch(n, buckets):
        m_batch.observe(n)
        for b in buckets:
            m_bucket.labels(bucket=str(b)).inc()

    @asynccontextmanager
    async def lifespan(app):
        state["engine"] = engine or Engine(cfg.artifact_dir, cfg.backend, cfg.threshold, cfg.truncate, cfg.reject_long)
        state["engine"].warm_up()
        state["batcher"] = Batcher(state["engine"], cfg.max_batch, cfg.max_wait_ms, on_batch)
        state["batcher"].start()
        state["ready"] = True
        yield
        state["ready"] = False
        await state["batcher"].stop()

    app = FastAPI(title="npuport persona-deviation detector", version="1", lifespan=lifespan,
                  description="Flags replies in which an AI character broke persona. Served from a compiled, hash-checked artifact.")

    class Guard:
        """Body-size limit, API key, and metrics for every request, as a plain ASGI middleware: Starlette's
        `@app.middleware("http")` (BaseHTTPMiddleware) wraps each call in an extra task and stream, which cost
        about a fifth of the per-request CPU of this service under load."""

        def __init__(self, app):
            self.app = app

        async def __call__(self, scope, receive, send):
            if scope["type"] != "http":
                return await self.app(scope, receive, send)
            t0 = time.perf_counter()
            route = scope["path"]
            headers = dict(scope["headers"])
            if scope["method"] == "POST":
                n = headers.get(b"content-length")
                if n is not None and (not n.isdigit() or int(n) > cfg.max_body_bytes):
                    m_requests.labels(route=route, status="413").inc()
                    return await _error(413, f"body larger than {cfg.max_body_bytes} bytes")(scope, receive, send)
            if key and route.startswith("/v1/"):
                auth = headers.get(b"authorization", b"").decode("latin-1").removeprefix("Bearer ").strip()
                given = headers.get(b"x-api-key", b"").decode("latin-1") or auth
                if not hmac.compare_digest(given.encode(), key.encode()):
                    m_requests.labels(route=route, status="401").inc()
                    resp = _error(401, "missing or wrong API key (send X-API-Key or Authorization: Bearer)")
                    return await resp(scope, receive, send)
            status = {"code": 500}

            async def send_and_record(message):
                if message["type"] == "http.response.start":
                    status["code"] = message["status"]
                await send(message)

            try:
                await self.app(scope, receive, send_and_record)
            finally:
                m_requests.labels(route=route, status=str(status["code"])).inc()
                m_latency.labels(route=route).observe(time.perf_counter() - t0)

    app.add_middleware(Guard)

    @app.get("/healthz")
    async def healthz():
        if not state["ready"]:
            return _error(503, "loading")
        return {"status": "ok"}

    @app.get("/v1/model")
    async def model():
        if not state["ready"]:
            return _error(503, "loading")
        return state["engine"].model_card()

    @app.get("/metrics")
    async def metrics():
        return PlainTextResponse(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/", response_class=HTMLResponse)
    async def page():
        return HTMLResponse(PAGE.read_text(encoding="utf-8").replace("__NEEDS_KEY__", "true" if key else "false"))

    @app.post("/v1/detect", openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": {
        "oneOf": [{"$ref": "#/components/schemas/Item"}, {"type": "object", "required": ["items"], "properties": {
            "items": {"type": "array", "minItems": 1, "items": {"$ref": "#/components/schemas/Item"}}}}]}}}}})
    async def detect(request: Request):
        if not state["ready"]:
            return _error(503, "loading")
        t0 = time.perf_counter()
        raw = await request.body()
        if len(raw) > cfg.max_body_bytes:
            return _error(413, f"body larger than {cfg.max_body_bytes} bytes")
        try:
            body = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            return _error(400, "the body is not valid UTF-8")
        except json.JSONDecodeError as e:
            return _error(400, f"malformed JSON: {e.msg} at line {e.lineno} column {e.colno}")
        items, info = _validate(body, cfg.max_items, cfg.max_chars)
        if items is None:
            return _error(*info)
        is_batch = info
        eng: Engine = state["engine"]
        try:
            enc = eng.encode(items)
        except TooLong as e:
            return _error(413, str(e))
        probs, buckets = await state["batcher"].submit([x.tokens for x in enc])
        results = [{"deviation_probability": float(p), "label": eng.labels[1] if p >= eng.threshold else eng.labels[0],
                    "threshold": eng.threshold, "bucket": int(b), "truncated": x.truncated}
                   for p, b, x in zip(probs, buckets, enc)]
        out = {"model": eng.manifest.source["sha256"][:16], "backend": eng.manifest.runtime.name,
               "latency_ms": round((time.perf_counter() - t0) * 1e3, 3)}
        return JSONResponse({**out, "items": results} if is_batch else {**out, **results[0]})

    app.openapi_schema = None
    _orig = app.openapi

    def openapi():
        schema = _orig()
        schema.setdefault("components", {}).setdefault("schemas", {})["Item"] = {
            "type": "object", "required": ["persona", "reply"], "additionalProperties": False,
            "properties": {"persona": {"type": "string", "minLength": 1}, "user": {"type": "string"},
                           "reply": {"type": "string", "minLength": 1}}}
        return schema

    app.openapi = openapi
    return app


def serve(cfg: ServeConfig) -> None:
    import uvicorn

    engine = Engine(cfg.artifact_dir, cfg.backend, cfg.threshold, cfg.truncate, cfg.reject_long)  # fail fast, before binding
    uvicorn.run(create_app(cfg, engine), host=cfg.host, port=cfg.port, log_level="info", timeout_graceful_shutdown=30)
