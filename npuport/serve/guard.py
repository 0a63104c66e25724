"""The service's front door, as a plain ASGI middleware: Host check, API key, content type, body-size limit
(counted as the bytes arrive, so chunked bodies are cut off too), admission control (429), and per-route metrics.

Starlette's `@app.middleware("http")` (BaseHTTPMiddleware) wraps each call in an extra task and stream, which cost
about a fifth of the per-request CPU of this service under load; this class does not.
"""

from __future__ import annotations

import hmac
import json
import re
import time

from fastapi.responses import JSONResponse

# Metrics are labelled by route template: any other path counts as "other" (no label per probed URL).
ROUTES = ("/v1/detect", "/v1/classify", "/v1/model", "/healthz", "/metrics", "/", "/docs", "/docs/oauth2-redirect",
          "/openapi.json", "/redoc", "/predict", "/health", "/info", "/v2", "/v2/health/live", "/v2/health/ready",
          "/v2/models/stats", "/v2/repository/index")
# a model's routes, with or without its version (never part of the metrics label: a client chooses it)
V2_MODEL = re.compile(r"^/v2/models/([^/]+)(?:/versions/[^/]+)?(/ready|/config|/stats|/infer)?$")
V2_CONTROL = re.compile(r"^/v2/repository/models/([^/]+)/(load|unload)$")
# Triton clients send binary tensors with no Content-Type (or octet-stream); the V2 infer route takes those too.
V2_TYPES = ("", "application/json", "application/octet-stream")


def error(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def key_matches(key: str, x_api_key: str, authorization: str) -> bool:
    """The API key policy of every protocol: X-API-Key, else Authorization: Bearer KEY, compared in constant time."""
    given = x_api_key or authorization.removeprefix("Bearer ").strip()
    return hmac.compare_digest(given.encode(), key.encode())


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
    """open_routes: paths (any method) or (method, path) pairs that need no API key."""

    def __init__(self, app, *, cfg, key: str | None, allowed: set[str] | None, open_routes: set, metrics, svc):
        self.app, self.cfg, self.key, self.allowed, self.open_routes = app, cfg, key, allowed, open_routes
        self.m = metrics  # serve/metrics.RequestMetrics
        self.svc = svc  # serve/service.Service: the model's name, and admission shared with gRPC
        self.model_name = svc.name

    def route(self, path: str) -> str:
        """The metrics label: a known route's template, else "other"."""
        if path in ROUTES:
            return path
        m = V2_MODEL.match(path)
        if m and m.group(1) == self.model_name:
            return "/v2/models/{name}" + (m.group(2) or "")
        if m := V2_CONTROL.match(path):  # any name: the answer is the same refusal
            return "/v2/repository/models/{name}/" + m.group(2)
        return "other"

    def inference(self, method: str, path: str) -> bool:
        """A route that runs the model: admission control (429) applies."""
        if method != "POST":
            return False
        return path in ("/v1/detect", "/v1/classify", "/predict", "/") or bool(
            (m := V2_MODEL.match(path)) and m.group(2) == "/infer")

    def _open(self, method: str, path: str) -> bool:
        return path in self.open_routes or (method, path) in self.open_routes

    def _refusal(self, scope, headers) -> tuple | None:
        """(status, message[, headers]) for a request turned away before it reaches the app, else None."""
        cfg, path = self.cfg, scope["path"]
        host = headers.get(b"host", b"").decode("latin-1")
        if self.allowed is not None and _host_name(host) not in self.allowed:
            return 400, f"unknown Host header {host!r}; start the service with --allowed-hosts NAME to answer to it"
        if self.key and not self._open(scope["method"], path):
            if not key_matches(self.key, headers.get(b"x-api-key", b"").decode("latin-1"),
                               headers.get(b"authorization", b"").decode("latin-1")):
                return 401, "missing or wrong API key (send X-API-Key or Authorization: Bearer)"
        if scope["method"] == "POST":
            ctype = headers.get(b"content-type", b"").decode("latin-1").split(";")[0].strip().lower()
            v2 = V2_MODEL.match(path) or path.startswith("/v2/repository/")  # tritonclient sends no Content-Type
            if ctype != "application/json" and not (v2 and ctype in V2_TYPES):
                return 415, f"Content-Type must be application/json, not {ctype or 'absent'!r}"
            n = headers.get(b"content-length")
            if n is not None and (not n.isdigit() or int(n) > cfg.max_body_bytes):
                return 413, f"body larger than {cfg.max_body_bytes} bytes"
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
            admitted = self.inference(scope["method"], path)
            if admitted and (why := self.svc.admit()):  # before the body is read
                return await reject(429, (why, {"Retry-After": "1"}))
            try:
                await self.app(scope, receive, send_and_record)
            except _TooLarge:  # a chunked body crossed the limit while arriving: stop reading, answer now
                if not status["started"]:
                    await reject(413, f"body larger than {self.cfg.max_body_bytes} bytes")
            finally:
                if admitted:
                    self.svc.release()
        finally:
            route = self.route(path)
            self.m.requests.labels(route=route, status=str(status["code"])).inc()
            self.m.latency.labels(route=route).observe(time.perf_counter() - t0)


def parse_json(raw: bytes):
    """JSON with limits: a body that is not UTF-8, not JSON, nested too deeply or holding a number too long for
    Python's int conversion is a 400, never a 500."""
    try:
        return json.loads(raw.decode("utf-8")), None
    except UnicodeDecodeError:
        return None, "the body is not valid UTF-8"
    except json.JSONDecodeError as e:
        return None, f"malformed JSON: {e.msg} at line {e.lineno} column {e.colno}"
    except RecursionError:
        return None, "JSON nested too deeply"
    except ValueError as e:  # e.g. an integer literal beyond sys.get_int_max_str_digits()
        return None, f"unreadable JSON value: {str(e)[:120]}"
