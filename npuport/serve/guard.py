"""The service's front door, as a plain ASGI middleware: Host check, API key, content type, body-size limit
(counted as the bytes arrive, so chunked bodies are cut off too), admission control (429), and per-route metrics.

Starlette's `@app.middleware("http")` (BaseHTTPMiddleware) wraps each call in an extra task and stream, which cost
about a fifth of the per-request CPU of this service under load; this class does not.
"""

from __future__ import annotations

import hmac
import time

from fastapi.responses import JSONResponse

# Metrics are labelled by route template: any other path counts as "other" (no label per probed URL).
INFERENCE_ROUTES = ("/v1/detect", "/v1/classify")  # the detector's route, or a stock classifier's
ROUTES = ("/v1/detect", "/v1/classify", "/v1/model", "/healthz", "/metrics", "/", "/docs", "/docs/oauth2-redirect", "/openapi.json",
          "/redoc")


def error(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


class _TooLarge(Exception):
    pass


def _host_name(value: str) -> str:
    if value.startswith("["):  # [::1]:8000
        return value[1 : value.find("]")]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def _limited(receive, limit: int):
    """`receive` that counts body bytes as they arrive (chunked bodies have no Content-Length)."""
    seen = 0

    async def wrapped():
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise _TooLarge
        return message

    return wrapped


class Guard:
    def __init__(self, app, *, cfg, key: str | None, allowed: set[str] | None, open_routes: set[str], metrics: dict):
        self.app, self.cfg, self.key, self.allowed, self.open_routes = app, cfg, key, allowed, open_routes
        self.m = metrics  # {"requests": Counter, "latency": Histogram, "inflight": Gauge}
        self.inflight = 0

    def _refusal(self, scope, headers) -> tuple | None:
        """(status, message[, headers]) for a request turned away before it reaches the app, else None."""
        cfg, path = self.cfg, scope["path"]
        host = headers.get(b"host", b"").decode("latin-1")
        if self.allowed is not None and _host_name(host) not in self.allowed:
            return 400, f"unknown Host header {host!r}; start the service with --allowed-hosts NAME to answer to it"
        if self.key and path not in self.open_routes:
            auth = headers.get(b"authorization", b"").decode("latin-1").removeprefix("Bearer ").strip()
            given = headers.get(b"x-api-key", b"").decode("latin-1") or auth
            if not hmac.compare_digest(given.encode(), self.key.encode()):
                return 401, "missing or wrong API key (send X-API-Key or Authorization: Bearer)"
        if scope["method"] == "POST":
            ctype = headers.get(b"content-type", b"").decode("latin-1").split(";")[0].strip().lower()
            if ctype != "application/json":
                return 415, f"Content-Type must be application/json, not {ctype or 'absent'!r}"
            n = headers.get(b"content-length")
            if n is not None and (not n.isdigit() or int(n) > cfg.max_body_bytes):
                return 413, f"body larger than {cfg.max_body_bytes} bytes"
        if path in INFERENCE_ROUTES and self.inflight >= cfg.max_concurrent_requests:  # cheapest answer: no body read
            return 429, (f"{self.inflight} requests in flight (limit {cfg.max_concurrent_requests}); retry shortly",
                         {"Retry-After": "1"})
        return None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = time.perf_counter()
        path = scope["path"]
        status = {"code": 500, "started": False}

        async def send_and_record(message):
            if message["type"] == "http.response.start":
                status["code"], status["started"] = message["status"], True
            await send(message)

        async def reject(code, message):
            text, extra = message if isinstance(message, tuple) else (message, None)
            await error(code, text, extra)(scope, receive, send_and_record)

        try:
            refused = self._refusal(scope, dict(scope["headers"]))
            if refused:
                return await reject(*refused)
            if scope["method"] == "POST":
                receive = _limited(receive, self.cfg.max_body_bytes)
            admitted = path in INFERENCE_ROUTES and scope["method"] == "POST"
            if admitted:
                self.inflight += 1
                self.m["inflight"].inc()
            try:
                await self.app(scope, receive, send_and_record)
            except _TooLarge:  # a chunked body crossed the limit while arriving: stop reading, answer now
                if not status["started"]:
                    await reject(413, f"body larger than {self.cfg.max_body_bytes} bytes")
            finally:
                if admitted:
                    self.inflight -= 1
                    self.m["inflight"].dec()
        finally:
            route = path if path in ROUTES else "other"
            self.m["requests"].labels(route=route, status=str(status["code"])).inc()
            self.m["latency"].labels(route=route).observe(time.perf_counter() - t0)
