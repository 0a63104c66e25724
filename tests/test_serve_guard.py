"""The HTTP service as an outsider would attack it (P8 #7-#13): streamed bodies, hostile JSON, metric labels, the
access policy, content type and Host checks, backpressure, and artifacts whose parity never passed. A real uvicorn
server on loopback for each case."""

from __future__ import annotations

import json
import shutil
import socket
import threading
import time

import httpx
import pytest
from test_serve import ITEM, Server, _free_port

from npuport.cli import main
from npuport.serve.app import ServeConfig

KEY = "s3cret-key-0123456789"


@pytest.fixture(scope="module")
def roomy(artifacts):
    """Default 1 MiB body limit, so hostile-but-small-enough bodies reach the parser."""
    with Server(ServeConfig(artifact_dir=str(artifacts), port=_free_port())) as s:
        yield s


def test_chunked_body_over_the_limit_is_cut_off_early(artifacts):
    with Server(ServeConfig(artifact_dir=str(artifacts), port=_free_port(), max_body_bytes=4096)) as s:
        port = int(s.url.rsplit(":", 1)[1])
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(b"POST /v1/detect HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        chunk = b"x" * 65536
        sent, answer = 0, b""
        sock.settimeout(0.05)
        while sent < 8 << 20 and not answer:
            try:
                sock.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
                sent += len(chunk)
            except OSError:  # the server answered and closed: stop sending
                break
            try:
                answer = sock.recv(4096)
            except (socket.timeout, BlockingIOError):
                pass
        sock.settimeout(10)
        answer = answer or sock.recv(4096)
        sock.close()
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        assert sent < 2 << 20, f"the server read {sent} bytes of a body limited to 4096 before answering"


@pytest.mark.parametrize("body,needle", [
    (b'{"persona": "p", "reply": "r", "user": ' + b"9" * 5000 + b"}", "unreadable JSON value"),
    (b"[" * 100_000, "nested too deeply"),
    (b'{"items": [' + b"[" * 5000 + b"]" * 5000 + b"]}", "nested too deeply"),
])
def test_hostile_json_is_400_never_500(roomy, body, needle):
    r = httpx.post(roomy.url + "/v1/detect", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert needle in r.json()["error"]


def test_metrics_labels_do_not_grow_with_probed_paths(roomy):
    def lines():
        return len(httpx.get(roomy.url + "/metrics").text.splitlines())

    httpx.get(roomy.url + "/junk/0")
    lines()  # /metrics' own series exist from here on
    before = lines()
    for i in range(1, 60):
        httpx.get(roomy.url + f"/junk/{i}")
    assert lines() == before
    assert 'route="other"' in httpx.get(roomy.url + "/metrics").text


def test_access_policy_with_a_key(artifacts, tmp_path):
    keyfile = tmp_path / "key"
    keyfile.write_text(KEY)
    with Server(ServeConfig(artifact_dir=str(artifacts), port=_free_port(), api_key_file=str(keyfile))) as s:
        for path in ("/metrics", "/docs", "/openapi.json", "/v1/model", "/anything"):
            assert httpx.get(s.url + path).status_code == 401, path
        assert httpx.get(s.url + "/healthz").status_code == 200
        assert httpx.get(s.url + "/").status_code == 200  # static page; it asks for the key
        card = httpx.get(s.url + "/v1/model", headers={"X-API-Key": KEY}).json()
        assert "/" not in json.dumps(card["source"]), card["source"]  # no local path leaks
        assert httpx.get(s.url + "/openapi.json", headers={"X-API-Key": KEY}).status_code == 200
    with Server(ServeConfig(artifact_dir=str(artifacts), port=_free_port(), api_key_file=str(keyfile),
                            public_metrics=True)) as s:
        assert httpx.get(s.url + "/metrics").status_code == 200
        assert httpx.get(s.url + "/v1/model").status_code == 401


def test_content_type_and_host(roomy, artifacts):
    r = httpx.post(roomy.url + "/v1/detect", content=json.dumps(ITEM), headers={"content-type": "text/plain"})
    assert r.status_code == 415 and "application/json" in r.json()["error"]
    r = httpx.post(roomy.url + "/v1/detect", json=ITEM, headers={"host": "attacker.example"})
    assert r.status_code == 400 and "Host" in r.json()["error"]
    assert httpx.post(roomy.url + "/v1/detect", json=ITEM, headers={"host": "localhost"}).status_code == 200
    with Server(ServeConfig(artifact_dir=str(artifacts), port=_free_port(), allowed_hosts=("detector.internal",))) as s:
        assert httpx.post(s.url + "/v1/detect", json=ITEM, headers={"host": "detector.internal:8000"}).status_code == 200


def test_backpressure_429_and_deadline_504(artifacts):
    cfg = ServeConfig(artifact_dir=str(artifacts), port=_free_port(), max_concurrent_requests=1, max_wait_ms=1500,
                      max_batch=64)
    with Server(cfg) as s:
        first = threading.Thread(target=httpx.post, args=(s.url + "/v1/detect",), kwargs={"json": ITEM, "timeout": 30})
        first.start()
        time.sleep(0.4)  # the first request now waits in the 1.5 s batch window
        r = httpx.post(s.url + "/v1/detect", json=ITEM)
        first.join()
        assert r.status_code == 429 and r.headers["retry-after"] == "1"
    with Server(ServeConfig(artifact_dir=str(artifacts), port=_free_port(), request_timeout_s=0.3, max_wait_ms=1500,
                            max_batch=64)) as s:
        r = httpx.post(s.url + "/v1/detect", json=ITEM, timeout=30)
        assert r.status_code == 504 and "request-timeout" in r.json()["error"]


def test_unverified_artifact_is_refused(artifacts, tmp_path, capsys):
    d = tmp_path / "a"
    shutil.copytree(artifacts / "onnxruntime-fp32", d)
    m = json.loads((d / "manifest.json").read_text())
    m["parity"] = {}  # as if `port` stopped between writing the files and checking parity
    (d / "manifest.json").write_text(json.dumps(m))
    assert main(["serve", str(d), "--port", str(_free_port())]) == 1
    assert "no parity figures" in capsys.readouterr().err
    m["parity"] = {"probes": {"pass": False, "max_abs_logit_diff": 0.7, "decision_agreement": 0.5}}
    (d / "manifest.json").write_text(json.dumps(m))
    assert main(["serve", str(d), "--port", str(_free_port())]) == 1
    assert "failed its parity check" in capsys.readouterr().err
    from npuport.serve.engine import Engine

    assert Engine(str(d), allow_unverified=True).manifest.parity["probes"]["pass"] is False
