"""The HTTP service on a real uvicorn server on loopback: API, batching, metrics, every error path, fuzzing."""

import json
import socket
import threading
import time

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npuport.serve.app import ServeConfig, create_app

ITEM = {"persona": "You are Captain Mara Voss, a weathered sky-pirate.", "user": "Are you an AI?",
        "reply": "An AI? Hah. I'm as real as the wind, deckhand."}


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, cfg: ServeConfig):
        import uvicorn

        self.server = uvicorn.Server(uvicorn.Config(create_app(cfg), host="127.0.0.1", port=cfg.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = f"http://127.0.0.1:{cfg.port}"

    def __enter__(self):
        self.thread.start()
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("server did not become healthy")

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(timeout=30)


@pytest.fixture(scope="module")
def server(artifacts):
    with Server(ServeConfig(artifact_dir=str(artifacts), port=_free_port(), max_items=8, max_body_bytes=4096,
                            max_wait_ms=20)) as s:
        yield s


def test_single_and_batch(server):
    r = httpx.post(server.url + "/v1/detect", json=ITEM)
    assert r.status_code == 200
    j = r.json()
    assert 0 <= j["deviation_probability"] <= 1 and j["label"] in ("in_persona", "deviation")
    assert j["bucket"] in (16, 32, 64) and j["truncated"] is False and j["latency_ms"] > 0 and j["model"]
    long = {**ITEM, "reply": "word " * 300}
    r = httpx.post(server.url + "/v1/detect", json={"items": [ITEM, long]})
    assert r.status_code == 200, r.text
    items = r.json()["items"]
    assert len(items) == 2 and items[1]["truncated"] and items[1]["bucket"] == 64


def test_batched_equals_unbatched(server):
    """Concurrent requests are micro-batched; each answer equals the one it gets alone."""
    texts = [{**ITEM, "reply": f"Reply number {i}: " + "aye " * (i * 3)} for i in range(8)]
    alone = [httpx.post(server.url + "/v1/detect", json=t).json()["deviation_probability"] for t in texts]
    results = [None] * len(texts)

    def call(i):
        results[i] = httpx.post(server.url + "/v1/detect", json=texts[i]).json()["deviation_probability"]

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(texts))]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert results == alone
    batch = httpx.post(server.url + "/v1/detect", json={"items": texts}).json()["items"]
    assert [b["deviation_probability"] for b in batch] == alone
    metrics = httpx.get(server.url + "/metrics").text
    assert "npuport_batch_rows_bucket" in metrics and 'npuport_requests_total{route="/v1/detect",status="200"}' in metrics


def test_model_card_health_docs_page(server):
    m = httpx.get(server.url + "/v1/model").json()
    assert m["backend"] == "onnxruntime" and m["buckets"] == [16, 32, 64] and m["proof"]["trace"] == 0.0
    assert httpx.get(server.url + "/healthz").json() == {"status": "ok"}
    assert "/v1/detect" in httpx.get(server.url + "/openapi.json").json()["paths"]
    page = httpx.get(server.url + "/").text
    assert "Persona-deviation detector" in page and "__NEEDS_KEY__" not in page


@pytest.mark.parametrize("body,status,needle", [
    (b"{not json", 400, "malformed JSON"),
    (b"\xff\xfe", 400, "UTF-8"),
    (json.dumps([1, 2]).encode(), 422, "JSON object"),
    (json.dumps({"reply": "x"}).encode(), 422, "missing field 'persona'"),
    (json.dumps({"persona": "p", "reply": 5}).encode(), 422, "must be a string"),
    (json.dumps({"persona": "p", "reply": "  "}).encode(), 422, "is empty"),
    (json.dumps({"persona": "p", "reply": "r", "extra": 1}).encode(), 422, "unknown fields"),
    (json.dumps({"items": []}).encode(), 422, "non-empty list"),
    (b'{"persona": "p", "reply": 1e999}', 422, "must be a string"),  # hypothesis once drew inf: kept as a case
    (json.dumps({"items": [ITEM] * 9}).encode(), 413, "at most 8"),
    (json.dumps({"persona": "p", "reply": "r" * 5000}).encode(), 413, "larger than 4096 bytes"),
])
def test_bad_input_is_4xx_json(server, body, status, needle):
    r = httpx.post(server.url + "/v1/detect", content=body, headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    assert needle in r.json()["error"]


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=40),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                        st.sampled_from(["persona", "user", "reply", "items", "x"]), inner, max_size=4), max_leaves=12))
def test_fuzz_never_5xx(server, body):
    r = httpx.post(server.url + "/v1/detect", json=body)
    assert r.status_code < 500, (body, r.text)
    assert r.status_code == 200 or "error" in r.json()


def test_api_key_and_reject_long(artifacts, tmp_path):
    keyfile = tmp_path / "key"
    keyfile.write_text("s3cret-key-0123456789\n")
    with Server(ServeConfig(artifact_dir=str(artifacts), port=_free_port(), api_key_file=str(keyfile), reject_long=True)) as s:
        assert httpx.post(s.url + "/v1/detect", json=ITEM).status_code == 401
        assert httpx.post(s.url + "/v1/detect", json=ITEM, headers={"X-API-Key": "wrong"}).status_code == 401
        ok = httpx.post(s.url + "/v1/detect", json=ITEM, headers={"Authorization": "Bearer s3cret-key-0123456789"})
        assert ok.status_code == 200
        r = httpx.post(s.url + "/v1/detect", json={**ITEM, "reply": "word " * 300}, headers={"X-API-Key": "s3cret-key-0123456789"})
        assert r.status_code == 413 and "reject-long" in r.json()["error"]
        assert httpx.get(s.url + "/healthz").status_code == 200  # health stays open for probes


def test_tampered_artifact_is_not_served(artifacts, tmp_path):
    import shutil

    from npuport.errors import ArtifactError
    from npuport.serve.engine import Engine

    d = tmp_path / "a"
    shutil.copytree(artifacts / "onnxruntime-fp32", d)
    data = d / "model.onnx.data"
    raw = bytearray(data.read_bytes())
    raw[10] ^= 1
    data.write_bytes(bytes(raw))
    with pytest.raises(ArtifactError):
        Engine(str(d))


def test_graceful_shutdown_finishes_in_flight_requests(artifacts):
    """SIGTERM to the real CLI server while requests wait in the batcher: every one still gets its 200."""
    import signal
    import subprocess
    import sys
    from concurrent.futures import ThreadPoolExecutor

    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "npuport.cli", "serve", str(artifacts), "--port", str(port),
                             "--max-batch", "64", "--max-wait-ms", "5000"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while time.time() < deadline:
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        with ThreadPoolExecutor(4) as pool:
            futs = [pool.submit(httpx.post, url + "/v1/detect", json=ITEM, timeout=30) for _ in range(4)]
            # SIGTERM only once the server holds all four (they wait in the batcher's 5 s window): a request not yet
            # read when the signal lands is a connection uvicorn may close, which is not what this test is about
            # (a fixed sleep here failed once on a loaded machine with "connection reset by peer")
            waited = time.time() + 20
            while "npuport_inflight_requests 4.0" not in httpx.get(url + "/metrics", timeout=5).text:
                assert time.time() < waited, "the server never held the four requests"
                time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            codes = [f.result().status_code for f in futs]
        assert codes == [200] * 4
        # uvicorn drains, runs the lifespan shutdown, then re-raises the signal: exit status is SIGTERM's
        assert proc.wait(timeout=60) in (0, -signal.SIGTERM)
        log = proc.stdout.read().decode(errors="replace")
        assert "Application shutdown complete" in log, log[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
