"""KServe V2 / Open Inference Protocol over gRPC (`npuport serve --grpc-port N`), for `tritonclient.grpc` and other
KServe gRPC clients: the same model, signature, limits and answers as the HTTP routes in v2.py.

The service is `inference.GRPCInferenceService` as Triton's client package ships it compiled (tritonclient's
grpc_service.proto stubs), so the wire format is the protocol's own, not a copy of it. Inputs arrive as
`raw_input_contents` (tritonclient's default: BYTES elements length-prefixed, as in the HTTP binary extension) or as
`contents.bytes_contents`; outputs go back as `raw_output_contents`. What HTTP answers with a status, gRPC answers
with the code Google's API guidelines pair with it:

    400, 413, 422 (bad input)     INVALID_ARGUMENT     401  UNAUTHENTICATED (--api-key-file: metadata
    404 (unknown model/version)   NOT_FOUND                 x-api-key, or authorization: Bearer KEY)
    429 (too many in flight)      RESOURCE_EXHAUSTED   503  UNAVAILABLE (loading; a lost replica)
    load / unload (fixed model)   FAILED_PRECONDITION  504  DEADLINE_EXCEEDED

Admission (--max-concurrent-requests) is shared with HTTP: one count of requests running the model.
"""

from __future__ import annotations

import asyncio

import grpc
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as rpc

from .._version import __version__
from . import v2
from .guard import key_matches
from .service import Service

CODES = {400: grpc.StatusCode.INVALID_ARGUMENT, 413: grpc.StatusCode.INVALID_ARGUMENT,
         422: grpc.StatusCode.INVALID_ARGUMENT, 401: grpc.StatusCode.UNAUTHENTICATED, 404: grpc.StatusCode.NOT_FOUND,
         429: grpc.StatusCode.RESOURCE_EXHAUSTED, 503: grpc.StatusCode.UNAVAILABLE,
         504: grpc.StatusCode.DEADLINE_EXCEEDED}
OPEN = {"ServerLive", "ServerReady"}  # open like /v2/health/*: probes need no key


class _Refused(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _inputs(req) -> dict[str, list[str]]:
    """The request's tensors as lists of str, raw or typed contents alike; shapes and datatypes checked as over HTTP."""
    raw = list(req.raw_input_contents)
    if raw and len(raw) != len(req.inputs):
        raise v2.BadRequest(400, f"{len(raw)} raw_input_contents for {len(req.inputs)} inputs: send one per input")
    out = {}
    for k, t in enumerate(req.inputs):
        if t.datatype != "BYTES":
            raise v2.BadRequest(400, f"input {t.name!r}: datatype must be BYTES, not {t.datatype!r}")
        if len(t.shape) != 1 or t.shape[0] < 0:
            raise v2.BadRequest(400, f"input {t.name!r}: shape must be [N], not {list(t.shape)}")
        values = v2.decode_bytes(raw[k], t.name) if raw else list(t.contents.bytes_contents)
        if len(values) != t.shape[0]:
            raise v2.BadRequest(400, f"input {t.name!r}: shape [{t.shape[0]}] but {len(values)} elements")
        try:
            out[t.name] = [v.decode("utf-8") for v in values]
        except UnicodeDecodeError:
            raise v2.BadRequest(400, f"input {t.name!r}: an element is not UTF-8 text") from None
    return out


class Servicer(rpc.GRPCInferenceServiceServicer):
    def __init__(self, svc: Service, key: str | None):
        self.svc, self.key = svc, key

    def _check(self, context, name: str | None = None, version: str = "") -> None:
        """The API key (any RPC but the probes), then the model's name and version."""
        if self.key:
            md = dict(context.invocation_metadata() or ())
            if not key_matches(self.key, md.get("x-api-key", ""), md.get("authorization", "")):
                raise _Refused(401, "missing or wrong API key (send metadata x-api-key, or authorization: Bearer)")
        if name is not None and name != self.svc.name:
            raise _Refused(404, f"unknown model {name!r}; this server serves {self.svc.name!r}")
        if version not in ("", "1"):
            raise _Refused(404, f"model {name!r} has version 1 only, not {version!r}")

    async def ServerLive(self, request, context):
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request, context):
        return pb.ServerReadyResponse(ready=self.svc.ready)

    async def ModelReady(self, request, context):
        self._check(context, request.name, request.version)
        return pb.ModelReadyResponse(ready=self.svc.ready)

    async def ServerMetadata(self, request, context):
        self._check(context)
        return pb.ServerMetadataResponse(name="npuport", version=__version__, extensions=v2.EXTENSIONS)

    async def ModelMetadata(self, request, context):
        self._check(context, request.name, request.version)
        ins, outs = v2.signature(self.svc)
        tensor = [pb.ModelMetadataResponse.TensorMetadata(name=t["name"], datatype=t["datatype"], shape=t["shape"])
                  for t in (*ins, *outs)]
        return pb.ModelMetadataResponse(name=self.svc.name, versions=["1"],
                                        platform=f"npuport-{self.svc.front.manifest.runtime.name}",
                                        inputs=tensor[:len(ins)], outputs=tensor[len(ins):])

    async def ModelConfig(self, request, context):
        self._check(context, request.name, request.version)
        return pb.ModelConfigResponse(config=json_format.ParseDict(v2.model_config(self.svc), mc.ModelConfig()))

    async def ModelStatistics(self, request, context):
        self._check(context, request.name or None, request.version)
        return json_format.ParseDict({"model_stats": [self.svc.stats.to_json(self.svc.name)]},
                                     pb.ModelStatisticsResponse())

    async def RepositoryIndex(self, request, context):
        self._check(context)
        if request.ready and not self.svc.ready:
            return pb.RepositoryIndexResponse()
        state = "READY" if self.svc.ready else "LOADING"
        return pb.RepositoryIndexResponse(models=[pb.RepositoryIndexResponse.ModelIndex(
            name=self.svc.name, version="1", state=state)])

    async def RepositoryModelLoad(self, request, context):
        self._check(context)
        await context.abort(grpc.StatusCode.FAILED_PRECONDITION, v2.control_refusal("load", request.model_name))

    async def RepositoryModelUnload(self, request, context):
        self._check(context)
        await context.abort(grpc.StatusCode.FAILED_PRECONDITION, v2.control_refusal("unload", request.model_name))

    async def ModelInfer(self, request, context):
        self._check(context, request.model_name, request.model_version)
        svc = self.svc
        if not svc.ready:
            raise _Refused(503, "loading")
        try:
            items = v2.items_of(svc, _inputs(request))
        except v2.BadRequest as e:
            raise _Refused(e.status, str(e)) from None
        if why := svc.admit():
            raise _Refused(429, why)
        try:
            results, _ = await asyncio.wait_for(svc.run(items), svc.cfg.request_timeout_s)
        except Exception as e:  # the failure table in service.py; anything else is gRPC's INTERNAL
            if not isinstance(e, (asyncio.TimeoutError, *svc.FAILURES)):
                raise
            status, message, _ = svc.failure(e)
            raise _Refused(status, message) from None
        finally:
            svc.release()
        outs = v2.outputs_of(svc, results)
        asked = [o.name for o in request.outputs]
        unknown = sorted(set(asked) - {o[0] for o in outs})
        if unknown:
            raise _Refused(400, f"unknown outputs {unknown}; this model gives {[o[0] for o in outs]}")
        outs = [o for o in outs if not asked or o[0] in asked]
        return pb.ModelInferResponse(
            model_name=svc.name, model_version="1", id=request.id,
            outputs=[pb.ModelInferResponse.InferOutputTensor(name=n, datatype=d, shape=s) for n, d, s, _ in outs],
            raw_output_contents=[v2.encode_tensor(d, a) for _, d, _, a in outs])


def _refusals(servicer: Servicer) -> None:
    """Every RPC answers a refusal (_Refused) with its gRPC code and message, never a stack trace; the protocol's
    RPCs this server does not offer (shared memory, streaming, trace and log settings) answer UNIMPLEMENTED."""
    for name in (n for n in vars(rpc.GRPCInferenceServiceServicer) if n[0].isupper()):
        if name not in vars(Servicer):
            async def unoffered(request, context, name=name):
                await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{name} is not offered by npuport serve; it "
                                    "answers ModelInfer, metadata, config, statistics and the repository index")
            setattr(servicer, name, unoffered)
            continue
        fn = getattr(servicer, name)

        async def guarded(request, context, fn=fn):
            try:
                return await fn(request, context)
            except _Refused as e:
                await context.abort(CODES[e.status], str(e))

        setattr(servicer, name, guarded)


async def start(svc: Service, host: str, port: int, key: str | None, max_message_bytes: int) -> grpc.aio.Server:
    """The gRPC server on host:port in the serving process's event loop (started by the app's lifespan)."""
    servicer = Servicer(svc, key)
    _refusals(servicer)
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", max_message_bytes),
                                      ("grpc.so_reuseport", 0)])
    rpc.add_GRPCInferenceServiceServicer_to_server(servicer, server)
    bound = host if ":" not in host else f"[{host}]"
    try:
        ok = server.add_insecure_port(f"{bound}:{port}")
    except RuntimeError:  # grpc raises where it once returned 0
        ok = 0
    if not ok:
        raise OSError(f"--grpc-port {port}: cannot bind {host}:{port} (in use? pick another port)")
    await server.start()
    return server
