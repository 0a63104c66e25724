"""npuport serve: the HTTP service on a hash-checked artifact."""

from __future__ import annotations

from .common import EPILOG, add_runtime_flag, positive_int


def register(sub) -> None:
    sv = sub.add_parser("serve", help="HTTP service on an artifact: /v1/detect, /healthz, /v1/model, /metrics, playground at /",
                        description="Serve a ported detector with length buckets and micro-batching. Binds to "
                        "127.0.0.1 unless told otherwise; the artifact is hash-checked before serving.", epilog=EPILOG)
    sv.add_argument("artifact_dir", help="a `port` output directory or one artifact directory")
    add_runtime_flag(sv, multiple=False, help="which artifact to serve when the directory holds several (its runtime)")
    sv.add_argument("--host", default="127.0.0.1")
    sv.add_argument("--port", type=int, default=8000)
    sv.add_argument("--max-batch", type=positive_int, default=8, help="rows per runtime batch (default 8)")
    sv.add_argument("--max-wait-ms", type=float, default=5.0, help="how long a batch waits to fill (default 5)")
    sv.add_argument("--threshold", type=float, help="decision threshold (default: the model's, chosen on validation)")
    sv.add_argument("--api-key-file", help="require this key (X-API-Key or Authorization: Bearer) on /v1/*")
    sv.add_argument("--max-items", type=positive_int, default=64, help="items per request (default 64)")
    g = sv.add_mutually_exclusive_group()
    g.add_argument("--truncate", choices=("head", "tail"), default="tail",
                   help="inputs longer than the largest bucket: drop the tail (default) or the head, flagged truncated")
    g.add_argument("--reject-long", action="store_true", help="answer 413 instead of truncating")

    sv.set_defaults(func=run)


def run(args) -> int:
    from ..serve.app import ServeConfig, serve

    serve(ServeConfig(artifact_dir=args.artifact_dir, backend=args.runtime, host=args.host, port=args.port,
                      max_batch=args.max_batch, max_wait_ms=args.max_wait_ms, threshold=args.threshold,
                      api_key_file=args.api_key_file, max_items=args.max_items, truncate=args.truncate,
                      reject_long=args.reject_long))
    return 0
