"""npuport serve: the HTTP service on a hash-checked artifact."""

from __future__ import annotations

from .common import EPILOG, add_runtime_flag, csv_list, positive_int


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
    sv.add_argument("--max-batch-tokens", type=positive_int, default=4096,
                    help="padded tokens per runtime batch (rows x bucket length; default 4096)")
    sv.add_argument("--api-key-file", help="require this key (X-API-Key or Authorization: Bearer) on every route but "
                    "/healthz and the playground page")
    sv.add_argument("--public-metrics", action="store_true", help="with --api-key-file: leave /metrics open to a scraper")
    sv.add_argument("--allowed-hosts", type=csv_list("allowed hosts"), default=(),
                    help="Host names to answer besides loopback and --host (\"*\" = any; DNS-rebinding guard)")
    sv.add_argument("--max-items", type=positive_int, default=64, help="items per request (default 64)")
    sv.add_argument("--max-concurrent-requests", type=positive_int, default=64,
                    help="detect requests in flight; more get 429 with Retry-After (default 64)")
    sv.add_argument("--request-timeout", type=float, default=30.0, help="seconds before a request gets 504 (default 30)")
    sv.add_argument("--require-signature", metavar="PUBKEY",
                    help="serve only an artifact signed (npuport sign) with the private key of this public key")
    sv.add_argument("--allow-unverified", action="store_true",
                    help="serve an artifact whose parity check failed or never ran (refused by default)")
    g = sv.add_mutually_exclusive_group()
    g.add_argument("--truncate", choices=("head", "tail"), default="tail",
                   help="inputs longer than the largest bucket: drop the tail (default) or the head, flagged truncated")
    g.add_argument("--reject-long", action="store_true", help="answer 413 instead of truncating")

    sv.set_defaults(func=run)


def run(args) -> int:
    from ..serve.app import ServeConfig, serve

    serve(ServeConfig(artifact_dir=args.artifact_dir, runtime=args.runtime, host=args.host, port=args.port,
                      max_batch=args.max_batch, max_wait_ms=args.max_wait_ms, threshold=args.threshold,
                      api_key_file=args.api_key_file, max_items=args.max_items, truncate=args.truncate,
                      reject_long=args.reject_long, max_batch_tokens=args.max_batch_tokens,
                      public_metrics=args.public_metrics, allowed_hosts=tuple(args.allowed_hosts),
                      max_concurrent_requests=args.max_concurrent_requests, request_timeout_s=args.request_timeout,
                      allow_unverified=args.allow_unverified, require_signature=args.require_signature))
    return 0
