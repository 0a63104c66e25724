"""npuport serve: the HTTP service on a hash-checked artifact."""

from __future__ import annotations

import argparse
import json

from .common import EPILOG, add_runtime_flag, csv_list, positive_int


def register(sub) -> None:
    sv = sub.add_parser("serve", help="HTTP service on an artifact: /v1/detect, /healthz, /v1/model, /metrics, playground at /",
                        description="Serve a ported detector with length buckets and micro-batching: npuport's /v1 "
                        "routes, KServe V2 (/v2/models/NAME/infer) and, for classifiers, TEI's /predict. Binds to "
                        "127.0.0.1 unless told otherwise; the artifact is hash-checked before serving. With "
                        "--replicas N the same app runs on Ray Serve in front of N model replicas.", epilog=EPILOG)
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
    sv.add_argument("--threads", type=positive_int, help="runtime threads of the one process (default: the "
                    "artifact's, else the runtime's own); a fleet's replicas take --replica-threads")
    sv.add_argument("--model-name", help="the model's name in KServe V2 routes (default: detector, or classifier)")
    sv.add_argument("--grpc-port", type=int, metavar="PORT", help="also speak KServe V2 over gRPC on this port "
                    "(tritonclient.grpc; the same model, limits and API key; in a fleet its ingress replica opens it; "
                    "pip install \"npuport[grpc]\")")
    f = sv.add_argument_group("a fleet on Ray Serve (pip install \"npuport[ray]\"): the same app, model replicas "
                              "behind it")
    f.add_argument("--replicas", type=positive_int, help="model replicas, each loading the artifact once and "
                   "batching on its own (default: one process, no Ray)")
    f.add_argument("--autoscale", type=_min_max, metavar="MIN:MAX",
                   help="scale model replicas between MIN and MAX on ongoing requests (instead of --replicas)")
    f.add_argument("--replica-threads", type=positive_int, default=1,
                   help="runtime threads per replica, and the CPUs Ray reserves for it (default 1)")
    f.add_argument("--replica-resources", type=_resources, default={}, metavar="JSON",
                   help="Ray resources each replica holds, e.g. '{\"RBLN\": 1}' for one Rebellions ATOM per replica")
    f.add_argument("--ray-address", metavar="ADDR", help="join this Ray cluster (e.g. 10.0.0.5:6379 or auto) "
                   "instead of starting a local one on 127.0.0.1")
    f.add_argument("--ray-ingress", choices=("direct", "proxy"), help="how HTTP reaches the app: direct = the "
                   "ingress replica listens on --port itself (Ray's throughput-optimized mode; default on the local "
                   "cluster), proxy = Ray's HTTP proxy in front (one hop more; default with --ray-address)")
    f.add_argument("--write-ray-config", metavar="FILE", help="write the Serve config for `serve deploy` (multi-node "
                   "clusters, KubeRay) and exit without serving")
    g = sv.add_mutually_exclusive_group()
    g.add_argument("--truncate", choices=("head", "tail"), default="tail",
                   help="inputs longer than the largest bucket: drop the tail (default) or the head, flagged truncated")
    g.add_argument("--reject-long", action="store_true", help="answer 413 instead of truncating")

    sv.set_defaults(func=run)


def _min_max(text: str) -> tuple[int, int]:
    lo, sep, hi = text.partition(":")
    if not sep or not lo.isdigit() or not hi.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: give MIN:MAX, e.g. 1:4")
    return int(lo), int(hi)


def _resources(text: str) -> dict:
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not JSON ({e.msg}); e.g. '{{\"RBLN\": 1}}'") from None
    if not isinstance(d, dict):
        raise argparse.ArgumentTypeError(f"{text!r}: give a JSON object, e.g. '{{\"RBLN\": 1}}'")
    return d


def run(args) -> int:
    from ..errors import ConfigError
    from ..serve.app import ServeConfig, serve

    cfg = ServeConfig(artifact_dir=args.artifact_dir, runtime=args.runtime, host=args.host, port=args.port,
                      max_batch=args.max_batch, max_wait_ms=args.max_wait_ms, threshold=args.threshold,
                      api_key_file=args.api_key_file, max_items=args.max_items, truncate=args.truncate,
                      reject_long=args.reject_long, max_batch_tokens=args.max_batch_tokens,
                      public_metrics=args.public_metrics, allowed_hosts=tuple(args.allowed_hosts),
                      max_concurrent_requests=args.max_concurrent_requests, request_timeout_s=args.request_timeout,
                      allow_unverified=args.allow_unverified, require_signature=args.require_signature,
                      model_name=args.model_name, threads=args.threads, grpc_port=args.grpc_port)
    if args.threads and (args.replicas or args.autoscale):
        raise ConfigError("--threads sets the one process's threads; a fleet's replicas take --replica-threads N")
    fleet_flags = [f for f, on in (("--replica-resources", args.replica_resources), ("--ray-address", args.ray_address),
                                   ("--replica-threads", args.replica_threads != 1),
                                   ("--ray-ingress", args.ray_ingress)) if on]
    if args.replicas is None and args.autoscale is None:
        if fleet_flags or args.write_ray_config:
            raise ConfigError(f"{', '.join(fleet_flags) or '--write-ray-config'} shapes a Ray Serve fleet: add "
                              "--replicas N (or --autoscale MIN:MAX)")
        serve(cfg)
        return 0
    if args.grpc_port is not None and (args.ray_address or args.write_ray_config):
        # the ingress replica opens it (Ray Serve's own gRPC ingress binds every interface, with no host option):
        # only on a local cluster is that replica's node this machine
        raise ConfigError("--grpc-port in a fleet is opened by its ingress replica on the local cluster this command "
                          "starts; on a joined cluster or a deployed config that replica may run on any node: drop "
                          "--grpc-port (KServe V2 stays on HTTP at /v2/models/NAME/infer)")
    if args.replicas is not None and args.autoscale is not None:
        raise ConfigError("give --replicas N or --autoscale MIN:MAX, not both")
    from ..serve import fleet

    fc = fleet.FleetConfig(replicas=args.replicas or 1, autoscale=args.autoscale,
                           replica_threads=args.replica_threads, replica_resources=args.replica_resources,
                           ray_address=args.ray_address, ingress=args.ray_ingress)
    fleet.check_artifact(cfg)  # hashes, parity, tokenizer: before any cluster starts
    if args.write_ray_config and args.ray_ingress:
        raise ConfigError("--ray-ingress shapes the local cluster this command starts; a deployed config's ingress is "
                          "the cluster's (RAY_SERVE_THROUGHPUT_OPTIMIZED=1 on every node for direct): drop --ray-ingress")
    if args.write_ray_config:
        print(f"wrote {fleet.write_config(cfg, fc, args.write_ray_config)}; deploy it with: serve deploy "
              f"{args.write_ray_config}")
        return 0
    fleet.run(cfg, fc)
    return 0
