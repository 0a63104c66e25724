"""KServe V2 / Open Inference Protocol (what Triton, KServe, MLServer and Seldon clients speak), with Triton's binary
tensor extension, which `tritonclient` uses by default: a JSON header of `Inference-Header-Content-Length` bytes,
then each tensor's raw bytes (BYTES elements as a 4-byte little-endian length and the UTF-8 text).

    GET  /v2                          server metadata
    GET  /v2/health/live, /ready      probes (open like /healthz)
    GET  /v2/models/{name}[/ready]    model metadata: inputs and outputs with datatypes and shapes
    GET  /v2/models/{name}/config     Triton's model configuration; /stats its statistics (also /v2/models/stats)
    POST /v2/repository/index         the one model and its state (load / unload: 400, the model is fixed)
    POST /v2/models/{name}/infer      detector: persona, user?, reply BYTES [N] -> deviation_probability FP32 [N],
                                      label BYTES [N]; classifier: text, text_pair? BYTES [N] -> scores FP32
                                      [N, num_labels], label BYTES [N]

Every input is validated against the same limits as /v1 (items per request, characters per field); anything the
client sent wrong is a 4xx with {"error": ...}, Triton's error body.
"""

from __future__ import annotations

import json
import struct

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from .._version import __version__
from ..detector.data import Example
from .guard import error, parse_json
from .schemas import ErrorBody
from .service import REPLICA_HEADER, Service

HEADER = "inference-header-content-length"


class BadRequest(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def signature(svc: Service) -> tuple[list[dict], list[dict]]:
    """(inputs, outputs) as V2 metadata: name, datatype, shape (-1 = any number of items)."""
    if svc.is_detector:
        ins = [("persona", False), ("user", True), ("reply", False)]
        outs = [{"name": "deviation_probability", "datatype": "FP32", "shape": [-1]},
                {"name": "label", "datatype": "BYTES", "shape": [-1]}]
    else:
        ins = [("text", False), ("text_pair", True)]
        outs = [{"name": "scores", "datatype": "FP32", "shape": [-1, len(svc.front.task.labels)]},
                {"name": "label", "datatype": "BYTES", "shape": [-1]}]
    return [{"name": n, "datatype": "BYTES", "shape": [-1], "optional": opt} for n, opt in ins], outs


def decode_bytes(raw: bytes, name: str) -> list[bytes]:
    out, i = [], 0
    while i < len(raw):
        if i + 4 > len(raw):
            raise BadRequest(400, f"input {name!r}: truncated BYTES element length")
        (n,) = struct.unpack_from("<I", raw, i)
        i += 4
        if i + n > len(raw):
            raise BadRequest(400, f"input {name!r}: a BYTES element runs past the binary data")
        out.append(raw[i:i + n])
        i += n
    return out


def parse(body: bytes, header_length: str | None) -> tuple[dict, dict[str, list[str]]]:
    """The request's JSON header and its inputs as lists of str, binary or JSON data alike."""
    if header_length is not None:
        if not header_length.isdigit() or int(header_length) > len(body):
            raise BadRequest(400, f"Inference-Header-Content-Length {header_length!r} does not fit the body")
        head, binary = body[: int(header_length)], body[int(header_length):]
    else:
        head, binary = body, b""
    try:
        req = json.loads(head.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError, ValueError) as e:
        raise BadRequest(400, f"malformed inference request JSON: {str(e)[:120]}") from None
    if not isinstance(req, dict) or not isinstance(req.get("inputs"), list):
        raise BadRequest(400, "an inference request is a JSON object with an 'inputs' list")
    inputs, offset = {}, 0
    for t in req["inputs"]:
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            raise BadRequest(400, "each input needs a 'name'")
        name, dtype, shape = t["name"], t.get("datatype"), t.get("shape")
        if dtype != "BYTES":
            raise BadRequest(400, f"input {name!r}: datatype must be BYTES, not {dtype!r}")
        if not (isinstance(shape, list) and len(shape) == 1 and isinstance(shape[0], int) and shape[0] >= 0):
            raise BadRequest(400, f"input {name!r}: shape must be [N], not {shape!r}")
        params = t.get("parameters") or {}
        size = params.get("binary_data_size") if isinstance(params, dict) else None
        if size is not None:
            if not isinstance(size, int) or size < 0 or offset + size > len(binary):
                raise BadRequest(400, f"input {name!r}: binary_data_size {size!r} runs past the body")
            values = decode_bytes(binary[offset:offset + size], name)
            offset += size
        else:
            data = t.get("data")
            if not isinstance(data, list) or not all(isinstance(x, str) for x in data):
                raise BadRequest(400, f"input {name!r}: 'data' must be a flat list of strings")
            values = [x.encode("utf-8") for x in data]
        if len(values) != shape[0]:
            raise BadRequest(400, f"input {name!r}: shape [{shape[0]}] but {len(values)} elements")
        try:
            inputs[name] = [v.decode("utf-8") for v in values]
        except UnicodeDecodeError:
            raise BadRequest(400, f"input {name!r}: an element is not UTF-8 text") from None
    return req, inputs


def items_of(svc: Service, inputs: dict[str, list[str]]) -> list:
    names = [i["name"] for i in signature(svc)[0]]
    required = [i["name"] for i in signature(svc)[0] if not i["optional"]]
    unknown = sorted(set(inputs) - set(names))
    if unknown:
        raise BadRequest(400, f"unknown inputs {unknown}; this model takes {names}")
    missing = [n for n in required if n not in inputs]
    if missing:
        raise BadRequest(400, f"missing input {missing[0]!r}")
    n = len(inputs[required[0]])
    if any(len(v) != n for v in inputs.values()):
        raise BadRequest(400, "every input must hold the same number of elements")
    cfg = svc.cfg
    if n == 0:
        raise BadRequest(422, "no items: inputs hold 0 elements")
    if n > cfg.max_items:
        raise BadRequest(413, f"{n} items; at most {cfg.max_items} per request")
    for name, values in inputs.items():
        for k, v in enumerate(values):
            if len(v) > cfg.max_chars:
                raise BadRequest(413, f"input {name!r}[{k}] has {len(v)} characters; at most {cfg.max_chars}")
            if name in required and not v.strip():
                raise BadRequest(422, f"input {name!r}[{k}] is empty")
    cols = [inputs.get(nm, [""] * n) for nm in names]
    if svc.is_detector:
        return [Example(persona=p, user=u or None, reply=r) for p, u, r in zip(*cols)]
    return [(t, p or None) for t, p in zip(*cols)]


def _label(r: dict) -> str:
    return r.get("label") or ",".join(r.get("labels") or [])


def outputs_of(svc: Service, results: list[dict]) -> list[tuple[str, str, list[int], np.ndarray]]:
    """(name, datatype, shape, array) per output."""
    labels = np.array([_label(r).encode() for r in results], dtype=object)
    if svc.is_detector:
        prob = np.array([r["deviation_probability"] for r in results], dtype=np.float32)
        return [("deviation_probability", "FP32", [len(results)], prob), ("label", "BYTES", [len(results)], labels)]
    names = svc.front.task.labels
    scores = np.array([[r["scores"][n] for n in names] for r in results], dtype=np.float32)
    return [("scores", "FP32", list(scores.shape), scores), ("label", "BYTES", [len(results)], labels)]


def encode_tensor(dtype: str, arr: np.ndarray) -> bytes:
    if dtype == "BYTES":
        return b"".join(struct.pack("<I", len(v)) + v for v in arr.reshape(-1))
    return np.ascontiguousarray(arr, dtype="<f4").tobytes()


def encode_response(svc: Service, req: dict, results: list[dict], replica: str) -> Response:
    """JSON, or Triton's binary extension for the outputs the client asked binary (binary_data_output, or an
    output's own binary_data parameter)."""
    params = req.get("parameters") if isinstance(req.get("parameters"), dict) else {}
    asked = {o.get("name"): o for o in req.get("outputs") or [] if isinstance(o, dict)}
    outs = outputs_of(svc, results)
    unknown = sorted(set(asked) - {o[0] for o in outs})
    if unknown:
        raise BadRequest(400, f"unknown outputs {unknown}; this model gives {[o[0] for o in outs]}")
    if asked:
        outs = [o for o in outs if o[0] in asked]
    head = {"model_name": svc.name, "model_version": "1", "outputs": []}
    if isinstance(req.get("id"), str):
        head["id"] = req["id"]
    blobs = []
    for name, dtype, shape, arr in outs:
        o_params = (asked.get(name) or {}).get("parameters") or {}
        binary = o_params.get("binary_data", params.get("binary_data_output", False)) if isinstance(o_params, dict) \
            else False
        entry = {"name": name, "datatype": dtype, "shape": shape}
        if binary:
            blob = encode_tensor(dtype, arr)
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            entry["data"] = [v.decode() for v in arr.reshape(-1)] if dtype == "BYTES" else arr.reshape(-1).tolist()
        head["outputs"].append(entry)
    text = json.dumps(head).encode()
    headers = {REPLICA_HEADER: replica}
    if not blobs:
        return Response(text, media_type="application/json", headers=headers)
    headers["Inference-Header-Content-Length"] = str(len(text))
    return Response(text + b"".join(blobs), media_type="application/octet-stream", headers=headers)


LOADING = {503: {"model": ErrorBody, "description": "still loading"}}
UNKNOWN = {404: {"model": ErrorBody, "description": "no model of that name here"}}


def _unknown(svc: Service, name: str, version: str = "1") -> JSONResponse | None:
    if name != svc.name:
        return error(404, f"unknown model {name!r}; this server serves {svc.name!r}")
    if version != "1":
        return error(404, f"model {name!r} has version 1 only, not {version!r}")
    return None


TRITON_TYPES = {"BYTES": "TYPE_STRING", "FP32": "TYPE_FP32"}
EXTENSIONS = ["binary_tensor_data", "model_configuration", "statistics", "model_repository"]


def control_refusal(action: str, name: str) -> str:
    """Why load / unload are refused (HTTP 400, gRPC FAILED_PRECONDITION)."""
    return (f"cannot {action} {name!r}: npuport serve holds one model, fixed when it starts; to serve another "
            "artifact, start `npuport serve` with it")


def model_config(svc: Service) -> dict:
    """Triton's model configuration for this model: the V2 signature in its terms. The tensors carry their own
    item dimension (shape [-1, ...]), so max_batch_size is 0 (Triton's way of saying the batch is in the dims)."""
    ins, outs = signature(svc)
    m = svc.front.manifest

    def tensor(t: dict) -> dict:
        return {"name": t["name"], "data_type": TRITON_TYPES[t["datatype"]], "dims": t["shape"],
                **({"optional": True} if t.get("optional") else {})}

    return {"name": svc.name, "platform": f"npuport-{m.runtime.name}", "backend": "npuport", "max_batch_size": 0,
            "input": [tensor(t) for t in ins], "output": [tensor(t) for t in outs],
            "version_policy": {"specific": {"versions": [1]}},
            "parameters": {"labels": {"string_value": ",".join(svc.front.task.labels)},
                           "threshold": {"string_value": str(svc.front.threshold)},
                           "precision": {"string_value": m.precision}}}


def add_routes(app: FastAPI, svc: Service) -> None:
    """The probes and metadata here; inference in `_add_infer`."""

    @app.get("/v2")
    async def server_metadata():
        return {"name": "npuport", "version": __version__, "extensions": EXTENSIONS}

    @app.get("/v2/health/live")
    async def live():
        return {"live": True}

    @app.get("/v2/health/ready", responses=LOADING)
    async def ready():
        return {"ready": True} if svc.ready else error(503, "loading")

    async def metadata(name: str, version: str = "1"):
        if (bad := _unknown(svc, name, version)) is not None:
            return bad
        ins, outs = signature(svc)
        m = svc.front.manifest
        return {"name": svc.name, "versions": ["1"], "platform": f"npuport-{m.runtime.name}",
                "inputs": [{k: v for k, v in i.items() if k != "optional"} for i in ins], "outputs": outs,
                "parameters": {"labels": list(svc.front.task.labels), "threshold": svc.front.threshold,
                               "model_sha256": m.source["sha256"], "precision": m.precision}}

    async def model_ready(name: str, version: str = "1"):
        if (bad := _unknown(svc, name, version)) is not None:
            return bad
        return {"name": svc.name, "ready": True} if svc.ready else error(503, "loading")

    async def config(name: str, version: str = "1"):
        if (bad := _unknown(svc, name, version)) is not None:
            return bad
        return model_config(svc)

    async def stats(name: str, version: str = "1"):
        if (bad := _unknown(svc, name, version)) is not None:
            return bad
        return {"model_stats": [svc.stats.to_json(svc.name)]}

    async def all_stats():
        return {"model_stats": [svc.stats.to_json(svc.name)]}

    # before /v2/models/{name}, which would take "stats" for a model's name
    app.add_api_route("/v2/models/stats", all_stats, methods=["GET"])
    # KServe V2 names a model with or without its version (this server has version 1 only); /config is Triton's
    # model-configuration extension, which tritonclient's get_model_config reads; /stats its statistics extension
    for path, fn, extra in (("", metadata, {}), ("/ready", model_ready, LOADING), ("/config", config, {}),
                            ("/stats", stats, {})):
        for prefix in ("/v2/models/{name}", "/v2/models/{name}/versions/{version}"):
            app.add_api_route(prefix + path, fn, methods=["GET"], responses={**UNKNOWN, **extra},
                              include_in_schema=not prefix.endswith("}/versions/{version}"))
    _add_repository(app, svc)
    _add_infer(app, svc)


def _add_repository(app: FastAPI, svc: Service) -> None:
    """Triton's model-repository extension as a server started with one model and no model control: the index
    lists it; load and unload are refused (Triton's answer in that mode is a 400 too)."""

    @app.post("/v2/repository/index")
    async def index(request: Request):
        body, why = parse_json(await request.body() or b"{}")
        if why or not isinstance(body, dict) or not isinstance(body.get("ready", False), bool):
            return error(400, why or 'the index request is a JSON object, {"ready": true|false} or {}')
        state = "READY" if svc.ready else "LOADING"
        return [] if body.get("ready") and not svc.ready else [{"name": svc.name, "version": "1", "state": state}]

    def control(action: str):
        async def refuse(name: str):
            return error(400, control_refusal(action, name))
        return refuse

    for action in ("load", "unload"):  # out of the OpenAPI schema: routes that only ever refuse, Triton's way
        app.add_api_route(f"/v2/repository/models/{{name}}/{action}", control(action), methods=["POST"],
                          include_in_schema=False)


def _add_infer(app: FastAPI, svc: Service) -> None:
    """POST /v2/models/{name}[/versions/1]/infer: parse, validate, run, encode; failures as svc.respond maps them."""

    async def infer(name: str, request: Request):
        if (bad := _unknown(svc, name)) is not None:
            return bad

        async def handle():
            try:
                req, inputs = parse(await request.body(), request.headers.get(HEADER))
                items = items_of(svc, inputs)
            except BadRequest as e:
                return error(e.status, str(e))
            results, replica = await svc.run(items)
            try:
                return encode_response(svc, req, results, replica)
            except BadRequest as e:
                return error(e.status, str(e))

        return await svc.respond(handle)

    async def infer_version(name: str, version: str, request: Request):
        if (bad := _unknown(svc, name, version)) is not None:
            return bad
        return await infer(name, request)

    app.add_api_route("/v2/models/{name}/infer", infer, methods=["POST"], include_in_schema=False)
    app.add_api_route("/v2/models/{name}/versions/{version}/infer", infer_version, methods=["POST"],
                      include_in_schema=False)
