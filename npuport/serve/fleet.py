"""`npuport serve OUT --replicas N`: the same service on Ray Serve, across replicas and machines.

Two deployments, composed the way Ray Serve composes models:

    ingress  (serve.ingress)  the very FastAPI app of `npuport serve`: Host and key policy, limits, validation, 429
                              admission, tokenization, every protocol (/v1, KServe V2, TEI), the playground
    model    (N replicas)     each hash-checks and loads the artifact once, warms every compiled shape and runs its
                              own micro-batcher; accelerator resources go here ({"RBLN": 1}: one NPU per replica)

HTTP reaches the ingress directly on a local cluster (`--ray-ingress direct`, Ray's throughput-optimized mode: the
ingress replica listens on --port) or through Ray's HTTP proxy (`--ray-ingress proxy`, the default when joining a
cluster). Ray routes each request's token rows to a model replica (`RayPool.infer`). When that replica's process dies while it
holds a request, the request is answered 503 with Retry-After (never a hang, never a bare 500); Serve's controller
starts a replacement and routes new requests to live replicas. With --grpc-port the ingress replica also serves KServe
V2 over gRPC (the app's lifespan starts it there, as in one process), bound to --host: Ray Serve's own gRPC ingress
binds every interface (`[::]`, serve/_private/grpc_util.py in 2.60, with no host option), so it is not used on a
loopback cluster. A local cluster is bound to 127.0.0.1 and stopped
with the command; `--ray-address` joins an existing cluster instead. `--write-ray-config` writes the same
application as a Serve config for `serve deploy` (multi-node clusters, KubeRay).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..errors import BackendUnavailable, ConfigError
from ..fsio import atomic_write
from .app import ServeConfig, create_app, grpc_module
from .engine import Batcher, Encoded, Engine, Front
from .metrics import ROWS, SECONDS, TOKENS, BatchSeries
from .pool import ReplicaLost

APP_NAME = "npuport"
# How HTTP reaches the ingress replica. direct: Ray's throughput-optimized mode ("Enable High Throughput on Ray
# Serve"), in which the ingress replica serves HTTP itself; measured here it removes the proxy hop's CPU (about a
# quarter of a core at 2 replicas on 2 cores; benchmarks/serve_fleet.py). proxy: Ray's HTTP proxy in front, one hop more.
INGRESS_MODES = ("direct", "proxy")
INSTALL = 'pip install "npuport[ray]"'


def _serve():
    try:
        from ray import serve
    except ImportError as e:
        raise BackendUnavailable(f"--replicas runs on Ray Serve, which is not installed ({e}); install with: "
                                 f"{INSTALL}") from None
    return serve


@dataclass(frozen=True, kw_only=True)
class FleetConfig:
    """How many model replicas, what each holds, and where the cluster is."""

    replicas: int = 2
    autoscale: tuple[int, int] | None = None  # (min, max) replicas, scaled on ongoing requests
    target_ongoing_requests: float = 4.0  # autoscaling's target per replica
    replica_threads: int = 1  # the runtime's threads per replica, and the CPUs Ray reserves for it
    replica_resources: dict[str, float] = field(default_factory=dict)  # e.g. {"RBLN": 1}: one NPU per replica
    ray_address: str | None = None  # join this cluster; None: start a local one on 127.0.0.1, stopped on exit
    ingress: str | None = None  # "direct" | "proxy" (INGRESS_MODES); None: direct on a local cluster, proxy when joining

    def __post_init__(self):
        if self.ingress not in (None, *INGRESS_MODES):
            raise ConfigError(f"--ray-ingress {self.ingress!r}: choose one of {', '.join(INGRESS_MODES)}")
        if self.ingress == "direct" and self.ray_address:
            raise ConfigError("--ray-ingress direct applies to the local cluster this command starts; a joined "
                              "cluster's ingress is set where it was started (RAY_SERVE_THROUGHPUT_OPTIMIZED=1 before "
                              "`ray start`): drop --ray-ingress, or use --ray-ingress proxy")
        if self.replicas < 1 or self.replica_threads < 1:
            raise ConfigError(f"--replicas {self.replicas} and --replica-threads {self.replica_threads} must be >= 1")
        if self.autoscale is not None:
            lo, hi = self.autoscale
            if not 0 <= lo <= hi or hi < 1:
                raise ConfigError(f"--autoscale {lo}:{hi}: give MIN:MAX with 0 <= MIN <= MAX and MAX >= 1")
        for k, v in self.replica_resources.items():
            if not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
                raise ConfigError(f"--replica-resources {k!r}: {v!r}: give positive numbers, e.g. '{{\"RBLN\": 1}}'")

    @property
    def ingress_mode(self) -> str:
        return self.ingress or ("proxy" if self.ray_address else "direct")

    @property
    def max_replicas(self) -> int:
        return self.autoscale[1] if self.autoscale else self.replicas


class RayBatchMetrics(BatchSeries):
    """The micro-batcher's series in a model replica, through Ray Serve's metrics: Ray tags each with its
    application, deployment and replica, and exports them from every node's metrics agent (one series per replica)."""

    def __init__(self):
        from ray.serve import metrics as m

        self.queue = m.Gauge("npuport_queue_size", description="requests waiting for the next runtime batch")
        self.batch_rows = m.Histogram("npuport_batch_rows", description="rows per runtime batch",
                                      boundaries=[float(x) for x in ROWS])
        self.batch_tokens = m.Histogram("npuport_batch_padded_tokens", description="padded tokens per runtime batch",
                                        boundaries=[float(x) for x in TOKENS])
        self.queue_time = m.Histogram("npuport_queue_duration_seconds", description="time a request waited for its "
                                      "batch", boundaries=list(SECONDS))
        self.infer_time = m.Histogram("npuport_inference_duration_seconds", description="runtime time per batch",
                                      boundaries=list(SECONDS))


class ModelReplica:
    """One model replica: the artifact loaded once (hash-checked, parity-verified), every shape warmed up, and its
    own micro-batcher on the replica's event loop."""

    def __init__(self, cfg: ServeConfig, threads: int):
        from ray import serve

        _loopback_replica_server()
        self.cfg = cfg
        self.engine = Engine(cfg.artifact_dir, cfg.runtime, cfg.threshold, cfg.truncate, cfg.reject_long,
                             allow_unverified=cfg.allow_unverified, require_signature=cfg.require_signature,
                             threads=threads)
        self.engine.warm_up()
        self.replica = serve.get_replica_context().replica_id.unique_id
        self.batcher: Batcher | None = None

    async def infer(self, rows: list[np.ndarray]) -> tuple[np.ndarray, list[int], str, tuple]:
        if self.batcher is None:  # created on the replica's own event loop
            self.batcher = Batcher(self.engine, self.cfg.max_batch, self.cfg.max_wait_ms, RayBatchMetrics(),
                                   max_tokens=self.cfg.max_batch_tokens)
            self.batcher.start()
        logits, buckets, timing = await self.batcher.submit(rows)
        return logits, buckets, self.replica, timing

    def identity(self) -> dict:
        """This replica's id and process (operators and tests signal it)."""
        return {"replica": self.replica, "pid": os.getpid()}


class RayPool:
    """The app's pool on Ray: tokenize here (the ingress), run on a model replica through its deployment handle."""

    def __init__(self, cfg: ServeConfig, handle):
        self.cfg, self.handle = cfg, handle
        self.front = Front(cfg.artifact_dir, cfg.runtime, cfg.threshold, cfg.truncate, cfg.reject_long,
                           allow_unverified=cfg.allow_unverified, require_signature=cfg.require_signature)
        self.tokenizer_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="npuport-tokenize")
        self.ready = False
        self._probe: asyncio.Task | None = None

    async def start(self) -> None:
        # Serve starts the ingress and the model replicas side by side, and the ingress (no model to load) listens
        # first: measured on 2 cores, /healthz said 200 while both model replicas were still warming their shapes.
        # Ready once a model replica answers (Serve routes the probe to the first one that is running).
        self._probe = asyncio.get_running_loop().create_task(self._wait_for_model())

    async def _wait_for_model(self) -> None:
        while True:
            try:
                await self.handle.identity.remote()
                self.ready = True
                return
            except Exception:  # noqa: BLE001 - a replica that died while starting: Serve starts another; ask again
                await asyncio.sleep(0.5)

    async def stop(self) -> None:
        if self._probe:
            self._probe.cancel()
        self.tokenizer_pool.shutdown(wait=False)

    async def tokenize(self, items: list) -> list[Encoded]:
        return await asyncio.get_running_loop().run_in_executor(self.tokenizer_pool, self.front.encode, items)

    async def infer(self, rows: list[np.ndarray]) -> tuple[np.ndarray, list[int], str, tuple]:
        from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

        try:
            return await self.handle.infer.remote(rows)
        except (ActorDiedError, ActorUnavailableError, RayActorError) as e:
            raise ReplicaLost(type(e).__name__) from None

    async def metrics_text(self) -> bytes:
        """The model replicas' series, from this node's Ray metrics agent (where Prometheus scrapes them too)."""
        port = _metrics_port()
        if port is None:
            return b""
        import httpx

        try:
            async with httpx.AsyncClient(timeout=2) as c:
                text = (await c.get(f"http://127.0.0.1:{port}/metrics")).text
        except httpx.HTTPError:
            return b""
        keep = [ln for ln in text.splitlines() if "npuport_" in ln]
        return ("\n".join(keep) + "\n").encode() if keep else b""


def _metrics_port() -> int | None:
    import ray

    here = ray.util.get_node_ip_address()
    for n in ray.nodes():
        if n.get("Alive") and n.get("NodeManagerAddress") == here:
            return n.get("MetricsExportPort")
    return None


class Ingress:
    """The ingress deployment: `npuport serve`'s FastAPI app, built on the replica (late-bound: nothing pickled)."""

    def __init__(self, cfg: ServeConfig, model):
        _loopback_replica_server()
        self.cfg, self.model = cfg, model

    def __serve_build_asgi_app__(self):
        return create_app(self.cfg, pool=RayPool(self.cfg, self.model))


def application(cfg: ServeConfig, fleet: FleetConfig):
    """The Ray Serve application: ingress -> model replicas."""
    serve = _serve()
    scaling = ({"autoscaling_config": {"min_replicas": fleet.autoscale[0], "max_replicas": fleet.autoscale[1],
                                       "target_ongoing_requests": fleet.target_ongoing_requests}}
               if fleet.autoscale else {"num_replicas": fleet.replicas})
    model = serve.deployment(ModelReplica, name="model").options(
        # the ingress admits at most max_concurrent_requests (429 beyond), so a replica never needs more
        max_ongoing_requests=cfg.max_concurrent_requests, max_queued_requests=-1,
        ray_actor_options={"num_cpus": fleet.replica_threads, "resources": dict(fleet.replica_resources)}, **scaling)
    ingress = serve.deployment(serve.ingress()(Ingress), name="ingress").options(
        # above the app's own admission limit, so overload is the app's 429 with Retry-After, not Ray's queue
        num_replicas=1, max_ongoing_requests=2 * cfg.max_concurrent_requests + 16, max_queued_requests=-1,
        ray_actor_options={"num_cpus": 0})
    return ingress.bind(cfg, model.bind(cfg, fleet.replica_threads))


def build(args: dict):
    """Application builder for `serve deploy` / `serve run npuport.serve.fleet:build` (see --write-ray-config)."""
    serve_args = dict(args.get("serve") or {})
    serve_args["allowed_hosts"] = tuple(serve_args.get("allowed_hosts") or ())
    fleet_args = dict(args.get("fleet") or {})
    if fleet_args.get("autoscale"):
        fleet_args["autoscale"] = tuple(fleet_args["autoscale"])
    fleet_args.pop("ray_address", None)
    return application(ServeConfig(**serve_args), FleetConfig(**fleet_args))


def write_config(cfg: ServeConfig, fleet: FleetConfig, path: str) -> Path:
    """A Ray Serve config file for `serve deploy` on a multi-node cluster or KubeRay: the artifact path must be the
    same on every node (shared storage, or baked into the image)."""
    import yaml

    serve_args = {k: v for k, v in asdict(cfg).items() if k not in ("host", "port")}
    serve_args["artifact_dir"] = str(Path(cfg.artifact_dir).resolve())
    serve_args["allowed_hosts"] = list(cfg.allowed_hosts)
    # the cluster decides how HTTP reaches the ingress (its proxy, or direct ingress when it was started with
    # RAY_SERVE_THROUGHPUT_OPTIMIZED=1): nothing of this command's own cluster goes into the file
    fleet_args = {k: v for k, v in asdict(fleet).items() if k not in ("ray_address", "ingress")}
    fleet_args["autoscale"] = list(fleet.autoscale) if fleet.autoscale else None
    doc = {"proxy_location": "EveryNode", "http_options": {"host": cfg.host, "port": cfg.port},
           "applications": [{"name": APP_NAME, "route_prefix": "/", "import_path": "npuport.serve.fleet:build",
                             "args": {"serve": serve_args, "fleet": fleet_args}}]}
    out = Path(path)
    atomic_write(out, yaml.safe_dump(doc, sort_keys=False).encode())
    return out


def check_artifact(cfg: ServeConfig) -> None:
    """What every replica will check, checked once before a cluster starts: hashes, signature, parity, tokenizer."""
    from ..artifact import check_files

    front = Front(cfg.artifact_dir, cfg.runtime, cfg.threshold, cfg.truncate, cfg.reject_long,
                  allow_unverified=cfg.allow_unverified, require_signature=cfg.require_signature)
    check_files(front.artifact)
    cfg.api_key()  # a missing or short key file fails here, not on the ingress


def _loopback_replica_server() -> None:
    """On a loopback node, bind this replica's inter-deployment gRPC server to 127.0.0.1. Ray Serve 2.60 binds it to
    "[::]:0", every interface (serve/_private/replica.py, `_on_initialized`), although on such a node every address
    it registers and dials is 127.0.0.1. The user constructor (this call) runs before that server starts; on a node
    with a routable address (a real cluster) nothing changes."""
    import ray
    import ray.serve._private.replica as replica

    if ray.util.get_node_ip_address() not in ("127.0.0.1", "::1") or getattr(replica, "_npuport_loopback", False):
        return
    bind = replica.add_port_to_grpc_server
    replica.add_port_to_grpc_server = lambda server, address: bind(server, address.replace("[::]", "127.0.0.1"))
    replica._npuport_loopback = True


def _check_local_capacity(fleet: FleetConfig) -> None:
    cores = os.cpu_count() or 1
    need = fleet.max_replicas * fleet.replica_threads
    if need > cores:
        raise ConfigError(f"{fleet.max_replicas} replicas x {fleet.replica_threads} threads need {need} CPUs; this "
                          f"machine has {cores}: lower --replicas / --autoscale MAX or --replica-threads, or join a "
                          "larger cluster with --ray-address")


def start_cluster(fleet: FleetConfig) -> bool:
    """Connect to --ray-address, or start a local cluster bound to 127.0.0.1. True when this call started it."""
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no usage report leaves the machine
    if fleet.ray_address:
        ray.init(address=fleet.ray_address, logging_level="warning", log_to_driver=False)
        return False
    _check_local_capacity(fleet)
    _loopback_node_ip()
    ray.init(_node_ip_address="127.0.0.1", include_dashboard=False, num_cpus=os.cpu_count(), logging_level="warning",
             log_to_driver=False, _system_config={"metrics_report_interval_ms": 2000})
    return True


def _loopback_node_ip() -> None:
    """Keep a local cluster on loopback. Ray rewrites `_node_ip_address="127.0.0.1"` (and `ray start
    --node-ip-address 127.0.0.1`) into the address the machine would use toward 8.8.8.8
    (`services.resolve_ip_for_localhost`; ray-project/ray#1596, #26293, #59110): measured here with Ray 2.60, the
    GCS and raylet then registered 192.0.2.2. Its node-IP resolver, asked in this process before `ray.init`, is
    what decides; answering 127.0.0.1 there puts the GCS, raylet, object manager, agents, workers and every
    connection between them on 127.0.0.1 (tests/test_serve_fleet.py checks each listening and connected socket)."""
    import ray._private.services as services

    services.get_node_ip_address = lambda address=None: "127.0.0.1"


def run(cfg: ServeConfig, fleet: FleetConfig, *, ready=print, stop: threading.Event | None = None) -> None:
    """Serve until SIGINT / SIGTERM (or `stop`), then take down what this call started: the application, and the
    local cluster with every Ray process it ran."""
    serve = _serve()
    import ray

    stop = stop or threading.Event()
    direct = fleet.ingress_mode == "direct"
    if not fleet.ray_address:  # a joined cluster's own proxy may hold --port on this node: Serve reuses it
        _check_port_free(cfg.host, cfg.port)
    if cfg.grpc_port:
        grpc_module()  # the extra, installed here before a cluster starts (the ingress replica imports it too)
        _check_port_free(cfg.host, cfg.grpc_port, "--grpc-port")
    if direct:
        _direct_ingress_env(cfg.port)
    started = start_cluster(fleet)
    # after ray.init, which installs its own SIGTERM handler (exit without taking the cluster down): ours drains
    # the application and stops the cluster it started
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)} \
        if threading.current_thread() is threading.main_thread() else {}
    try:
        # direct: Ray still runs its proxy; it gets a spare loopback port and carries no traffic
        serve.start(http_options={"host": cfg.host, "port": _free_port(cfg.host) if direct else cfg.port})
        serve.run(application(cfg, fleet), name=APP_NAME, route_prefix="/", blocking=False)
        gcs = ray.get_runtime_context().gcs_address
        ready(json.dumps({"url": f"http://{cfg.host}:{cfg.port}", "ray": gcs, "replicas": fleet.replicas,
                          "autoscale": fleet.autoscale, "local_cluster": started,
                          "ingress": fleet.ingress_mode,
                          "grpc": f"{cfg.host}:{cfg.grpc_port}" if cfg.grpc_port else None}))
        while not stop.wait(0.5):
            pass
    finally:
        try:
            _bounded(lambda: serve.delete(APP_NAME), SHUTDOWN_S)  # replicas drain their in-flight requests
        finally:
            if started:
                ray.shutdown()  # ends every process the local cluster ran
            for s, h in previous.items():
                signal.signal(s, h)


SHUTDOWN_S = 30.0


def _direct_ingress_env(port: int) -> None:
    """Set before the local cluster starts, so its controller and replicas read it: Ray's throughput-optimized mode
    (direct ingress, gRPC between deployments, buffered request logs), the ingress replica's port range pinned to
    --port (Ray allocates direct-ingress ports from RAY_SERVE_DIRECT_INGRESS_{MIN,MAX}_HTTP_PORT, max exclusive), and
    no drain wait on shutdown: that wait is for an external load balancer to deregister the replica, and here there
    is none."""
    os.environ.update({"RAY_SERVE_THROUGHPUT_OPTIMIZED": "1", "RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT": str(port),
                       "RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT": str(port + 1),
                       "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "0"})


def _check_port_free(host: str, port: int, flag: str = "--port") -> None:
    """Refuse a taken port before a cluster starts (else Ray fails the deployment after a minute of retries)."""
    import socket

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        try:
            s.bind((host, port))
        except OSError as e:
            raise ConfigError(f"--host {host} {flag} {port}: cannot listen there ({e.strerror}); stop what holds it "
                              f"or choose another {flag}") from None


def _free_port(host: str) -> int:
    import socket

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _bounded(fn, seconds: float) -> None:
    """Run fn, but never wait past `seconds` for it (a wedged controller must not keep the command alive)."""
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    t.join(seconds)
