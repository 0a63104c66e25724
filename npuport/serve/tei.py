"""text-embeddings-inference's classification contract, for stock classifier artifacts, so clients written for TEI
(and `huggingface_hub.InferenceClient(<server URL>).text_classification(text)`) work unchanged.

    POST /predict  {"inputs": "text" | ["text", "pair"] | [["t1"], ["t2", "p2"], ...], "raw_scores": false}
                   -> one input: [{"label", "score"}, ...] best first; a batch: one such list per input; with
                   raw_scores the scores are the head's logits (before softmax / sigmoid), as TEI answers
    POST /         {"inputs": "text" | ["t1", "t2", ...], "parameters": {"top_k": K, "function_to_apply": ...}}
                   -> [[{"label", "score"}, ...], ...], one list per input (the Hugging Face inference API's shape,
                   which InferenceClient reads); function_to_apply softmax / sigmoid / none applies to the logits,
                   as the transformers pipeline does (without it: the model's own scores)
    GET /health    200 once the model answers, 503 while it loads (InferenceClient.health_check); open like /healthz
    GET /info      TEI's Info object: the model, its labels and the server's limits (InferenceClient.get_endpoint_info)

Limits, auth and bad-input answers are /v1's: the same Guard, the same item and character limits, 4xx JSON bodies.
"""

from __future__ import annotations

import numpy as np
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse

from .. import __version__
from .guard import error, parse_json
from .service import REPLICA_HEADER, Service

FUNCTIONS = ("softmax", "sigmoid", "none")


class BadRequest(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _text(svc: Service, v, where: str) -> str:
    if not isinstance(v, str):
        raise BadRequest(422, f"{where} must be a string, got {type(v).__name__}")
    if not v.strip():
        raise BadRequest(422, f"{where} is empty")
    if len(v) > svc.cfg.max_chars:
        raise BadRequest(413, f"{where} has {len(v)} characters; at most {svc.cfg.max_chars}")
    return v


def _one(svc: Service, v, where: str) -> tuple[str, str | None]:
    """TEI's single input: a text, or [text] / [text, pair]."""
    if isinstance(v, list):
        if not 1 <= len(v) <= 2:
            raise BadRequest(422, f"{where} must be a text or [text, pair]")
        return _text(svc, v[0], f"{where}[0]"), (_text(svc, v[1], f"{where}[1]") if len(v) == 2 else None)
    return _text(svc, v, where), None


def _batch(svc: Service, rows: list) -> list:
    if not rows:
        raise BadRequest(422, "'inputs' must not be empty")
    if len(rows) > svc.cfg.max_items:
        raise BadRequest(413, f"{len(rows)} inputs; at most {svc.cfg.max_items} per request")
    return rows


def predict_items(svc: Service, body) -> tuple[list, bool, bool]:
    """(items, whether the answer is a batch, raw_scores) from a /predict body."""
    if not isinstance(body, dict) or "inputs" not in body:
        raise BadRequest(422, "the body must be a JSON object with 'inputs'")
    unknown = sorted(set(body) - {"inputs", "raw_scores", "truncate", "truncation_direction"})
    if unknown:
        raise BadRequest(422, f"unknown fields {unknown}")
    raw = body.get("raw_scores", False)
    if not isinstance(raw, bool):
        raise BadRequest(422, f"raw_scores must be true or false, got {raw!r}")
    v = body["inputs"]
    if isinstance(v, list) and v and all(isinstance(x, list) for x in v):
        return [_one(svc, x, f"inputs[{k}]") for k, x in enumerate(_batch(svc, v))], True, raw
    return [_one(svc, v, "inputs")], False, raw


def hf_items(svc: Service, body) -> tuple[list, bool, int | None, str | None]:
    """(items, batch?, top_k, function_to_apply) from a Hugging Face inference API body. Without
    function_to_apply the scores are the model's own (softmax, or sigmoid for a multi-label head)."""
    if not isinstance(body, dict) or "inputs" not in body:
        raise BadRequest(422, "the body must be a JSON object with 'inputs'")
    params = body.get("parameters") or {}
    if not isinstance(params, dict):
        raise BadRequest(422, "'parameters' must be an object")
    top_k, fn = params.get("top_k"), params.get("function_to_apply")
    if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1):
        raise BadRequest(422, f"parameters.top_k {top_k!r} must be a positive integer")
    if fn is not None and fn not in FUNCTIONS:
        raise BadRequest(422, f"parameters.function_to_apply {fn!r}: choose one of {', '.join(FUNCTIONS)}")
    v = body["inputs"]
    if isinstance(v, list):
        return [(_text(svc, x, f"inputs[{k}]"), None) for k, x in enumerate(_batch(svc, v))], True, top_k, fn
    return [(_text(svc, v, "inputs"), None)], False, top_k, fn


def applied(fn: str, logits_row) -> list[float]:
    """The pipeline's function_to_apply on one row of logits: softmax, sigmoid, or none (the logits)."""
    z = np.asarray(logits_row, dtype=np.float64)
    if fn == "softmax":
        e = np.exp(z - z.max())
        z = e / e.sum()
    elif fn == "sigmoid":
        z = 1.0 / (1.0 + np.exp(-z))
    return [float(v) for v in z]


def ranked(svc: Service, r: dict, logits_row=None, top_k: int | None = None) -> list[dict]:
    """Labels best first, scored by the model's own scores, or by `logits_row` (raw logits, or a function of them)."""
    scores = r["scores"] if logits_row is None else dict(zip(svc.front.task.labels, map(float, logits_row)))
    out = sorted(({"label": k, "score": float(v)} for k, v in scores.items()), key=lambda d: -d["score"])
    return out[:top_k] if top_k else out


DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}  # TEI's names; an integer artifact keeps its own


def info(svc: Service) -> dict:
    """TEI's /info for this artifact: what a TEI client reads to size its batches and name the labels."""
    front, cfg = svc.front, svc.cfg
    card = front.model_card()
    source = card["source"]
    return {
        "model_id": str(source.get("path") or source.get("preset") or svc.name), "model_sha": card["model_sha256"],
        "model_dtype": DTYPES.get(card["precision"], card["precision"]), "served_model_name": svc.name,
        "model_type": {"classifier": {"id2label": {str(i): lab for i, lab in enumerate(front.labels)},
                                      "label2id": {lab: i for i, lab in enumerate(front.labels)}}},
        "max_concurrent_requests": cfg.max_concurrent_requests, "max_input_length": front.router.max_len,
        "max_batch_tokens": cfg.max_batch_tokens, "max_batch_requests": cfg.max_batch,
        "max_client_batch_size": cfg.max_items,
        # longer inputs are cut to the largest bucket unless --reject-long (then a 413 names the limit)
        "auto_truncate": not cfg.reject_long, "tokenization_workers": 1,
        "version": __version__, "sha": None, "docker_label": None,
    }


def add_routes(app: FastAPI, svc: Service) -> None:
    async def run(request: Request, read):
        async def handle():
            body, problem = parse_json(await request.body())
            if problem:
                return error(400, problem)
            try:
                items, batch, shape, raw = read(body)
            except BadRequest as e:
                return error(e.status, str(e))
            results, replica = await svc.run(items, logits=raw)
            answers = [shape(r) for r in results]
            return JSONResponse(answers if batch else answers[0], headers={REPLICA_HEADER: replica})

        return await svc.respond(handle)

    @app.post("/predict", include_in_schema=False)
    async def predict(request: Request):
        def read(body):
            items, batch, raw = predict_items(svc, body)
            return items, batch, lambda r: ranked(svc, r, r["logits"] if raw else None), raw

        return await run(request, read)

    @app.post("/", include_in_schema=False)
    async def hf_inference(request: Request):
        def read(body):
            items, batch, top_k, fn = hf_items(svc, body)
            score = (lambda r: None) if fn is None else (lambda r: applied(fn, r["logits"]))
            return items, True, lambda r: ranked(svc, r, score(r), top_k=top_k), fn is not None  # a list per input

        return await run(request, read)

    @app.get("/health", include_in_schema=False)
    async def health():
        return Response(status_code=200) if svc.ready else error(503, "loading")

    @app.get("/info", include_in_schema=False)
    async def tei_info():
        return JSONResponse(info(svc)) if svc.ready else error(503, "loading")
