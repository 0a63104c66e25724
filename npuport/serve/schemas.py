"""The HTTP bodies as pydantic models: one definition gives the validation, its error messages and the OpenAPI schema.

The request models are built per service (`make_request_models`) so the configured limits — characters per field,
items per request — are both enforced and published in `/openapi.json`.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError


class ErrorBody(BaseModel):
    error: str


class Result(BaseModel):
    deviation_probability: float = Field(ge=0.0, le=1.0)
    label: str
    threshold: float
    bucket: int
    truncated: bool


class DetectResponse(Result):
    model: str = Field(description="first 16 hex digits of the source model's sha256")
    backend: str = Field(description="the runtime that computed the answer")
    latency_ms: float


class BatchResponse(BaseModel):
    model: str
    backend: str
    latency_ms: float
    items: list[Result]


class ClassResult(BaseModel):
    """A stock classifier's answer: its own label names (`id2label`) and every label's score."""

    label: str | None = Field(None, description="single-label: the decided label")
    labels: list[str] | None = Field(None, description="multi-label: every label whose sigmoid >= threshold")
    scores: dict[str, float] = Field(description="softmax probabilities, per-label sigmoids, or regression values")
    threshold: float
    bucket: int
    truncated: bool


class ClassifyResponse(ClassResult):
    model: str
    backend: str
    latency_ms: float


class ClassifyBatchResponse(BaseModel):
    model: str
    backend: str
    latency_ms: float
    items: list[ClassResult]


def make_request_models(max_chars: int, max_items: int, detector: bool = True) -> tuple[type[BaseModel], type[BaseModel]]:
    """(Item, Batch) with this service's limits. Strict: no number is coerced into a string. The detector judges
    {persona, user?, reply}; a stock classifier reads {text, text_pair?} as its tokenizer would."""
    text = Annotated[str, StringConstraints(min_length=1, max_length=max_chars, pattern=r"\S")]
    optional = Annotated[str, StringConstraints(max_length=max_chars)]

    if detector:
        class Item(BaseModel):
            """One reply to judge, with the persona card it should stay in (and optionally the user's turn)."""

            model_config = ConfigDict(extra="forbid", strict=True)
            persona: text
            user: optional | None = None
            reply: text
    else:
        class Item(BaseModel):  # noqa: F811 - one of the two shapes, chosen by the artifact
            """One text to classify (and optionally its pair, e.g. a hypothesis for NLI)."""

            model_config = ConfigDict(extra="forbid", strict=True)
            text: text
            text_pair: optional | None = None

    class Batch(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)
        items: Annotated[list[Item], Field(min_length=1, max_length=max_items)]

    return Item, Batch


def _where(loc: tuple, is_batch: bool) -> str:
    out = "" if is_batch else "body"
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def explain(err: ValidationError, is_batch: bool, max_chars: int, max_items: int) -> tuple[int, str]:
    """The first validation problem as (status, one-line message): 413 for sizes over a limit, 422 otherwise."""
    errors = err.errors(include_url=False)
    extras = [e for e in errors if e["type"] == "extra_forbidden"]
    if extras:
        parent = _where(extras[0]["loc"][:-1], is_batch) or "body"
        return 422, f"{parent}: unknown fields {sorted(str(e['loc'][-1]) for e in extras)}"
    e = errors[0]
    loc, typ, value = tuple(e["loc"]), e["type"], e.get("input")
    where = _where(loc, is_batch)
    if loc == ("items",):
        if typ == "too_long":
            return 413, f"{len(value)} items; at most {max_items} per request"
        return 422, "'items' must be a non-empty list"
    if typ == "missing":
        return 422, f"{_where(loc[:-1], is_batch) or 'body'}: missing field {loc[-1]!r}"
    if typ == "string_type":
        return 422, f"{where} must be a string{' or absent' if loc[-1] in ('user', 'text_pair') else ''}, got {type(value).__name__}"
    if typ in ("string_too_short", "string_pattern_mismatch"):
        return 422, f"{where} is empty"
    if typ == "string_too_long":
        return 413, f"{where} has {len(value)} characters; at most {max_chars}"
    if typ in ("model_type", "dict_type", "model_attributes_type"):
        return 422, f"{where} must be an object"
    return 422, f"{where}: {e['msg']}"
