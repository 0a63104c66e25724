"""`npuport serve --replicas 2`: the real CLI, real Ray Serve on loopback (a local cluster the command starts and
stops), two model replicas behind the same app. Both replicas answer; the protocols and P8's hostile inputs hold
through Ray; every Ray socket is on loopback; a replica SIGKILLed under load ends as documented (503 with
Retry-After for what it held, everything else answered, a replacement serving again); KServe V2 over gRPC from the
ingress replica; SIGTERM ends every Ray process the command started."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import numpy as np
import pytest
from test_serve import ITEM, _free_port
from test_serve_protocols import BAD_V2, _bytes_input

psutil = pytest.importorskip("psutil")
pytest.importorskip("ray.serve", reason="the npuport[ray] extra (in the test extra) installs Ray Serve")
import tritonclient.http as triton  # noqa: E402

START_S = 600  # a cold Ray cluster on 2 busy cores: its processes, Serve's controller and proxy, two replicas
LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


class Fleet:
    def __init__(self, artifacts, *extra: str):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen([sys.executable, "-m", "npuport.cli", "serve", str(artifacts), "--replicas", "2",
                                      "--port", str(self.port), *extra],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
                                     start_new_session=True)
        self.ready = None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            if line.startswith("{") and '"ray"' in line:
                self.ready = json.loads(line)

    def wait(self):
        deadline = time.time() + START_S
        while time.time() < deadline:
            assert self.proc.poll() is None, f"npuport serve exited with {self.proc.returncode}"
            try:
                if httpx.get(self.url + "/healthz", timeout=2).status_code == 200 and self.ready:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise AssertionError(f"the fleet was not healthy within {START_S} s")

    def tree(self) -> list:
        try:
            return [psutil.Process(self.proc.pid), *psutil.Process(self.proc.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def model_replicas(self) -> list:
        out = []
        for p in self.tree():
            try:
                if "ServeReplica:npuport:model" in " ".join(p.cmdline()):
                    out.append(p)
            except psutil.Error:
                continue
        return out

    def stop(self) -> list[int]:
        """SIGTERM the command; the pids of everything it had started. Whatever outlives it is killed here (and
        the test that expects none fails on it), so no test leaves a cluster behind."""
        procs = self.tree()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(90)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.left = []
        for p in procs[1:]:
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    self.left.append(" ".join(p.cmdline())[:120])
                    p.kill()
            except psutil.Error:
                continue
        return [p.pid for p in procs]


@pytest.fixture(scope="module")
def fleet(artifacts):
    # a 200 ms batch window: under load every replica holds requests, so a kill meets requests in flight
    grpc_port = _free_port()
    f = Fleet(artifacts, "--max-wait-ms", "200", "--grpc-port", str(grpc_port))
    f.grpc = grpc_port
    try:
        yield f.wait()
    finally:
        f.stop()
    assert not f.left, f.left  # direct ingress too: SIGTERM ends every Ray process the command started


def test_both_replicas_answer_and_protocols_hold_through_ray(fleet):
    c = triton.InferenceServerClient(fleet.url.removeprefix("http://"), network_timeout=30)
    before = c.get_inference_statistics("detector")["model_stats"][0]
    seen = {}
    for _ in range(40):
        r = httpx.post(fleet.url + "/v1/detect", json=ITEM, timeout=30)
        assert r.status_code == 200, r.text
        seen[r.headers["x-npuport-replica"]] = r.json()
    assert len(seen) == 2, seen  # two model replicas, each loading the artifact once
    a, b = seen.values()
    assert a["deviation_probability"] == pytest.approx(b["deviation_probability"], abs=1e-6)
    assert c.is_server_ready() and c.is_model_ready("detector")
    r = c.infer("detector", [_bytes_input("persona", [ITEM["persona"]], True),
                             _bytes_input("user", [ITEM["user"]], True), _bytes_input("reply", [ITEM["reply"]], True)])
    assert r.as_numpy("deviation_probability")[0] == pytest.approx(a["deviation_probability"], abs=1e-6)
    assert r.as_numpy("label")[0].decode() == a["label"]
    # the ingress counts for the whole fleet: one request at a time is one execution each, on whichever replica
    # (batch numbers repeat across replicas and must still count apart)
    after = c.get_inference_statistics("detector")["model_stats"][0]
    assert after["inference_count"] - before["inference_count"] == 41
    assert after["execution_count"] - before["execution_count"] == 41
    assert after["inference_stats"]["queue"]["count"] - before["inference_stats"]["queue"]["count"] == 41


def test_grpc_is_served_by_the_ingress_replica_on_loopback(fleet):
    """--grpc-port on a fleet: tritonclient.grpc reaches the ingress replica (bound to --host, like everything the
    local cluster opens), whose answers come from the model replicas and equal HTTP's; a bad request gets its gRPC
    code there too, and the statistics count what gRPC answered."""
    grpcclient = pytest.importorskip("tritonclient.grpc")  # npuport[grpc], in the test extra
    from tritonclient.utils import InferenceServerException

    assert fleet.ready["grpc"] == f"127.0.0.1:{fleet.grpc}"
    assert "ServeReplica:npuport:ingress" in _listener(fleet, fleet.grpc)
    want = httpx.post(fleet.url + "/v1/detect", json=ITEM, timeout=30).json()
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{fleet.grpc}")
    assert c.is_server_live() and c.is_model_ready("detector")
    before = c.get_inference_statistics("detector").model_stats[0].inference_count

    def inp(name, value):
        x = grpcclient.InferInput(name, [1], "BYTES")
        x.set_data_from_numpy(np.array([value.encode()], dtype=object))
        return x

    r = c.infer("detector", [inp(k, ITEM[k]) for k in ("persona", "user", "reply")], client_timeout=60)
    assert r.as_numpy("deviation_probability")[0] == pytest.approx(want["deviation_probability"], abs=1e-6)
    assert r.as_numpy("label")[0].decode() == want["label"]
    with pytest.raises(InferenceServerException) as e:
        c.infer("detector", [inp("persona", ITEM["persona"])], client_timeout=60)  # no reply
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT" and "reply" in e.value.message(), e.value
    assert c.get_inference_statistics("detector").model_stats[0].inference_count - before == 1


@pytest.mark.parametrize("body,headers,status,needle", BAD_V2[:6] + BAD_V2[-3:], ids=[b[3] for b in BAD_V2[:6] + BAD_V2[-3:]])
def test_hostile_v2_inputs_are_4xx_through_ray(fleet, body, headers, status, needle):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = httpx.post(fleet.url + "/v2/models/detector/infer", content=content, headers=headers, timeout=30)
    assert r.status_code == status and needle in r.json()["error"], r.text


@pytest.mark.parametrize("body,status", [(b"{not json", 400), (b'{"persona": "p"}', 422), (b"[" * 60_000, 400),
                                         (json.dumps({"items": [ITEM] * 65}).encode(), 413)])
def test_hostile_v1_inputs_are_4xx_through_ray(fleet, body, status):
    r = httpx.post(fleet.url + "/v1/detect", content=body, headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == status, r.text
    assert httpx.post(fleet.url + "/v1/detect", content=json.dumps(ITEM), headers={"content-type": "text/plain"}
                      ).status_code == 415


def test_ray_is_on_loopback_and_metrics_are_per_replica(fleet):
    assert fleet.ready["ray"].startswith("127.0.0.1:"), fleet.ready  # the GCS address Ray registered
    outside = set()
    for p in fleet.tree():
        try:
            for c in p.net_connections(kind="inet"):
                if c.status == psutil.CONN_LISTEN and c.laddr.ip not in LOOPBACK:
                    outside.add(f"{p.name()} listens on {c.laddr.ip}:{c.laddr.port}")
                if c.raddr and c.raddr.ip not in LOOPBACK:
                    outside.add(f"{p.name()} connects to {c.raddr.ip}:{c.raddr.port}")
        except psutil.Error:
            continue
    assert not outside, outside
    # direct ingress (the local cluster's default): the ingress replica itself listens on --port, not Ray's proxy
    assert fleet.ready["ingress"] == "direct"
    assert "ServeReplica:npuport:ingress" in _listener(fleet, fleet.port)
    for _ in range(10):
        httpx.post(fleet.url + "/v1/detect", json=ITEM, timeout=30)
    replicas, deadline = set(), time.time() + 30
    while len(replicas) < 2 and time.time() < deadline:  # Ray's agent exports every couple of seconds
        text = httpx.get(fleet.url + "/metrics", timeout=10).text
        replicas = {ln.split('replica="')[1].split('"')[0] for ln in text.splitlines()
                    if ln.startswith("ray_npuport_batch_rows_count") and 'replica="' in ln}
        time.sleep(1)
    assert len(replicas) == 2, replicas


def test_a_replica_killed_under_load_is_replaced_and_no_request_fails(fleet):
    """SIGKILL one model replica while 4 clients keep requests in both (200 ms batch windows). Ray Serve's router
    re-sends what the dead replica held to the live one (its ActorDiedError handling), so those requests answer 200,
    later; the only other answer allowed is the ingress's 503 with Retry-After, never a hang or another 5xx."""
    procs = fleet.model_replicas()
    assert len(procs) == 2, procs
    results, stop = [], threading.Event()

    def load():
        with httpx.Client(timeout=30) as c:  # a hang would show as a timeout: recorded, and fails the test below
            while not stop.is_set():
                t0 = time.time()
                try:
                    r = c.post(fleet.url + "/v1/detect", json=ITEM)
                    results.append((t0, r.status_code, r.headers.get("retry-after"),
                                     r.headers.get("x-npuport-replica"), time.time()))
                except httpx.HTTPError as e:
                    results.append((t0, type(e).__name__, None, None, time.time()))

    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(3)
    before = {r[3] for r in results if r[1] == 200}
    killed_at = time.time()
    procs[0].send_signal(signal.SIGKILL)
    recovered = None
    while time.time() - killed_at < 240:
        new = {r[3] for r in results if r[1] == 200 and r[0] > killed_at} - before
        if new and len(fleet.model_replicas()) == 2:
            recovered = min(r[0] for r in results if r[3] in new) - killed_at
            break
        time.sleep(0.5)
    time.sleep(2)
    stop.set()
    for t in threads:
        t.join(60)
    codes = [r[1] for r in results]
    assert recovered is not None, f"no replacement replica served within 240 s: {codes[-20:]}"
    assert all(c in (200, 503) for c in codes), sorted(set(map(str, codes)))
    lost = [r for r in results if r[1] == 503]
    assert all(r[2] == "1" for r in lost), lost  # Retry-After on every 503
    assert len(lost) <= 4, lost  # at most what the dead replica held: 4 clients, one request each in flight
    held = [r[4] - r[0] for r in results if r[0] <= killed_at < r[4]]  # in flight when the replica died
    print(f"recovery {recovered:.1f} s; {len(lost)} x 503 of {len(codes)} requests; requests in flight at the "
          f"kill: {len(held)}, answered after {max(held, default=0):.2f} s at most")


def _listener(fleet: Fleet, port: int) -> str:
    """The command line of the process in the fleet that listens on `port`."""
    for p in fleet.tree():
        try:
            if any(c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in p.net_connections(kind="inet")):
                return " ".join(p.cmdline())
        except psutil.Error:
            continue
    return ""


def test_proxy_ingress_answers_and_sigterm_ends_every_ray_process(artifacts):
    f = Fleet(artifacts, "--ray-ingress", "proxy", "--replicas", "1").wait()  # one replica: the hop is under test
    try:
        assert f.ready["ingress"] == "proxy" and "ProxyActor" in _listener(f, f.port)
        r = httpx.post(f.url + "/v1/detect", json=ITEM, timeout=30)
        assert r.status_code == 200 and r.headers["x-npuport-replica"], r.text
    finally:
        pids = f.stop()
    assert f.proc.returncode == 0
    assert len(pids) > 5  # it did start a cluster: GCS, raylet, agents, controller, proxy, replicas
    assert not f.left, f.left  # nothing it started outlived it


def test_write_ray_config_round_trips_through_the_builder(artifacts, tmp_path, capsys):
    """`--write-ray-config` writes a Serve config whose application Ray's own builder makes: the ingress and the
    model deployment, with the replicas' autoscaling, threads and accelerator resources carried over."""
    import yaml

    from npuport.cli import main
    from npuport.serve import fleet

    out = tmp_path / "serve.yaml"
    assert main(["serve", str(artifacts), "--autoscale", "1:2", "--replica-resources", '{"RBLN": 1}',
                 "--model-name", "persona", "--write-ray-config", str(out)]) == 0
    assert "serve deploy" in capsys.readouterr().out
    doc = yaml.safe_load(out.read_text())
    app = doc["applications"][0]
    assert app["import_path"] == "npuport.serve.fleet:build" and app["route_prefix"] == "/"
    built = fleet.build(app["args"])  # what `serve deploy` calls on the cluster
    model = built._bound_deployment.init_args[1]._bound_deployment
    assert model._deployment_config.autoscaling_config.max_replicas == 2
    assert model.ray_actor_options["resources"] == {"RBLN": 1} and model.ray_actor_options["num_cpus"] == 1
    assert built._bound_deployment.init_args[0].model_name == "persona"


@pytest.mark.parametrize("argv,needle", [
    (["--replica-threads", "2"], "add --replicas N"),
    (["--ray-address", "auto"], "add --replicas N"),
    (["--replicas", "2", "--autoscale", "1:2"], "not both"),
    (["--replicas", "2", "--threads", "2"], "--replica-threads"),
    (["--autoscale", "3:1"], "MIN:MAX"),
    (["--replicas", "64"], "need 64 CPUs"),
    (["--ray-ingress", "proxy"], "add --replicas N"),
    (["--replicas", "2", "--ray-address", "auto", "--ray-ingress", "direct"], "drop --ray-ingress"),
    (["--replicas", "2", "--ray-ingress", "proxy", "--write-ray-config", "x.yaml"], "drop --ray-ingress"),
])
def test_fleet_flags_are_checked_before_any_cluster_starts(artifacts, argv, needle, capsys):
    from npuport.cli import main

    t0 = time.time()
    assert main(["serve", str(artifacts), *argv]) == 2
    assert needle in capsys.readouterr().err
    assert time.time() - t0 < 30  # refused before Ray was started


@pytest.mark.parametrize("flag", ["--port", "--grpc-port"])
def test_a_taken_port_is_refused_before_any_cluster_starts(artifacts, capsys, flag):
    import socket

    from npuport.cli import main

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        t0 = time.time()
        assert main(["serve", str(artifacts), "--replicas", "1", flag, str(port)]) == 2
    err = capsys.readouterr().err
    assert f"{flag} {port}: cannot listen there" in err and f"choose another {flag}" in err, err
    assert time.time() - t0 < 30
