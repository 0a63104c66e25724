"""The protocols real clients already speak, on a real uvicorn server on loopback, through the real client libraries:
KServe V2 / Open Inference Protocol with `tritonclient.http` (binary tensors, its default, and JSON), and TEI's
classification contract with `huggingface_hub.InferenceClient`. Answers must equal npuport's own /v1 routes, and the
V2 route must meet P8's hostile inputs like /v1 does."""

from __future__ import annotations

import json
import struct
import threading
import time

import httpx
import numpy as np
import pytest
import tritonclient.http as triton
import uvicorn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from test_classifiers import LABELS, PAIRS, fine_tuned
from test_serve import ITEM, Server, _free_port

from npuport.cli import main
from npuport.serve.app import ServeConfig

ITEMS = [ITEM, {"persona": "You are Grandma Okoye, a storyteller.", "reply": "As an AI language model, I cannot."},
         {"persona": "You are Tomo, a fox spirit.", "user": "Hi!", "reply": "Kon kon! Who visits my shrine?"}]


@pytest.fixture(scope="module")
def detector(artifacts):
    with Server(ServeConfig(artifact_dir=str(artifacts), port=_free_port(), max_items=8, max_chars=2000,
                            max_body_bytes=1 << 16)) as s:
        yield s


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    root = tmp_path_factory.mktemp("clf")
    d = fine_tuned(root, "tiny-bert")
    out = root / "out"
    assert main(["-q", "port", str(d), "-o", str(out), "--buckets", "16,32", "--runtime", "onnxruntime",
                 "--bench-runs", "1"]) == 0
    with Server(ServeConfig(artifact_dir=str(out), port=_free_port(), max_items=8)) as s:
        s.artifact_dir = str(out)  # for a second server on the same artifact
        yield s


def _client(server) -> triton.InferenceServerClient:
    return triton.InferenceServerClient(server.url.removeprefix("http://"), network_timeout=30)


def _bytes_input(name: str, values: list[str], binary: bool) -> triton.InferInput:
    x = triton.InferInput(name, [len(values)], "BYTES")
    x.set_data_from_numpy(np.array([v.encode() for v in values], dtype=object), binary_data=binary)
    return x


def _as_str(a) -> list[str]:
    return [v.decode() if isinstance(v, bytes) else v for v in a.tolist()]


def test_tritonclient_versioned_metadata_and_model_config(detector, classifier):
    """KServe V2 names a model with or without its version; Triton's model configuration states the same
    signature as the metadata (tritonclient's get_model_config). Version 1 only: another is 404."""
    from tritonclient.utils import InferenceServerException

    for server, name in ((detector, "detector"), (classifier, "classifier")):
        c = _client(server)
        meta = c.get_model_metadata(name)
        assert c.get_model_metadata(name, "1") == meta and c.is_model_ready(name, "1")
        assert "model_configuration" in c.get_server_metadata()["extensions"]
        for cfg in (c.get_model_config(name), c.get_model_config(name, "1")):
            assert cfg["name"] == name and cfg["max_batch_size"] == 0
            assert [(t["name"], t["dims"]) for t in cfg["input"]] == [(t["name"], t["shape"]) for t in meta["inputs"]]
            assert [(t["name"], t["dims"]) for t in cfg["output"]] == [(t["name"], t["shape"]) for t in meta["outputs"]]
            assert {t["data_type"] for t in cfg["input"]} == {"TYPE_STRING"}
            assert cfg["parameters"]["labels"]["string_value"].split(",") == meta["parameters"]["labels"]
        assert not c.is_model_ready(name, "2")
        for call in (lambda: c.get_model_metadata(name, "2"), lambda: c.get_model_config(name, "2"),
                     lambda: c.get_model_config("nobody")):
            with pytest.raises(InferenceServerException) as e:
                call()
            assert "version 1 only" in str(e.value) or "unknown model" in str(e.value)
    assert httpx.get(detector.url + "/v2/models/detector/versions/zz9/config").status_code == 404
    metrics = httpx.get(detector.url + "/metrics").text  # one label per route template, whatever version was asked
    assert 'route="/v2/models/{name}/config"' in metrics and "zz9" not in metrics


@pytest.mark.parametrize("binary", [True, False], ids=["binary-tensors", "json-tensors"])
def test_tritonclient_infer_equals_v1_detect(detector, binary):
    v1 = httpx.post(detector.url + "/v1/detect", json={"items": ITEMS}).json()["items"]
    c = _client(detector)
    assert c.is_server_live() and c.is_server_ready() and c.is_model_ready("detector")
    meta = c.get_model_metadata("detector")
    assert [i["name"] for i in meta["inputs"]] == ["persona", "user", "reply"]
    assert {o["name"]: (o["datatype"], o["shape"]) for o in meta["outputs"]} == {
        "deviation_probability": ("FP32", [-1]), "label": ("BYTES", [-1])}
    inputs = [_bytes_input("persona", [i["persona"] for i in ITEMS], binary),
              _bytes_input("user", [i.get("user", "") for i in ITEMS], binary),
              _bytes_input("reply", [i["reply"] for i in ITEMS], binary)]
    outputs = [triton.InferRequestedOutput(n, binary_data=binary) for n in ("deviation_probability", "label")]
    for asked in (None, outputs):  # no outputs named: every output, binary (the client's default)
        r = c.infer("detector", inputs, outputs=asked)
        probs = r.as_numpy("deviation_probability")
        assert probs.dtype == np.float32 and probs.shape == (3,)
        np.testing.assert_allclose(probs, [x["deviation_probability"] for x in v1], rtol=0, atol=1e-6)
        assert _as_str(r.as_numpy("label")) == [x["label"] for x in v1]


def test_tritonclient_statistics_and_repository_index(artifacts):
    """Triton's statistics extension counts what this server answered, per phase, through tritonclient's
    get_inference_statistics (all models, one model, one version); the repository index lists the one model, and
    load / unload are refused with the reason, since the model is fixed at start."""
    from tritonclient.utils import InferenceServerException

    with Server(ServeConfig(artifact_dir=str(artifacts), port=_free_port(), max_items=8, reject_long=True)) as s:
        c = _client(s)
        assert {"statistics", "model_repository"} <= set(c.get_server_metadata()["extensions"])
        assert c.get_model_repository_index() == [{"name": "detector", "version": "1", "state": "READY"}]
        zero = c.get_inference_statistics("detector")["model_stats"][0]
        assert zero["inference_count"] == 0 and zero["inference_stats"]["success"] == {"count": 0, "ns": 0}
        for n in (3, 1, 1):
            c.infer("detector", [_bytes_input("persona", [i["persona"] for i in ITEMS[:n]], True),
                                 _bytes_input("reply", [i["reply"] for i in ITEMS[:n]], True)])
        assert httpx.post(s.url + "/v1/detect", json={"items": ITEMS[:2]}).status_code == 200
        long = {"persona": "p", "reply": "word " * 400}  # past the largest bucket (64 tokens): 413 with --reject-long
        assert httpx.post(s.url + "/v1/detect", json={"items": [long]}).status_code == 413
        stats = [c.get_inference_statistics(*a)["model_stats"] for a in ((), ("detector",), ("detector", "1"))]
        assert stats[0] == stats[1] == stats[2]
        m = stats[0][0]
        assert (m["name"], m["version"], m["inference_count"]) == ("detector", "1", 3 + 1 + 1 + 2)
        st_ = m["inference_stats"]
        assert st_["success"]["count"] == 4 and st_["fail"]["count"] == 1
        for phase in ("queue", "compute_input", "compute_infer", "compute_output"):
            assert st_[phase]["count"] == 4, phase
        assert st_["compute_infer"]["ns"] > 0 and st_["success"]["ns"] >= st_["compute_infer"]["ns"]
        # requests one at a time: one runtime execution each, recorded under its number of rows
        assert m["execution_count"] == 4 and m["last_inference"] > 0
        assert {b["batch_size"]: b["compute_infer"]["count"] for b in m["batch_stats"]} == {3: 1, 1: 2, 2: 1}
        with pytest.raises(InferenceServerException) as e:
            c.get_inference_statistics("nobody")
        assert "unknown model" in str(e.value)
        for call in (lambda: c.load_model("detector"), lambda: c.unload_model("detector")):
            with pytest.raises(InferenceServerException) as e:
                call()
            assert "fixed when it starts" in str(e.value)
        assert httpx.post(s.url + "/v2/repository/index", json={"ready": "yes"}).status_code == 400
        metrics = httpx.get(s.url + "/metrics").text
        assert 'route="/v2/models/stats"' in metrics and 'route="/v2/repository/models/{name}/load"' in metrics


def test_v2_metadata_errors_and_replica_header(detector):
    assert httpx.get(detector.url + "/v2").json()["extensions"] == ["binary_tensor_data", "model_configuration",
                                                                    "statistics", "model_repository"]
    assert httpx.get(detector.url + "/v2/models/other").status_code == 404
    r = httpx.post(detector.url + "/v2/models/detector/infer", json={"inputs": [
        {"name": "persona", "datatype": "BYTES", "shape": [1], "data": [ITEM["persona"]]},
        {"name": "reply", "datatype": "BYTES", "shape": [1], "data": [ITEM["reply"]]}]})
    assert r.status_code == 200 and r.headers["x-npuport-replica"].startswith("local-")
    assert r.json()["outputs"][1]["data"][0] in ("in_character", "deviation")
    metrics = httpx.get(detector.url + "/metrics").text
    for series in ("npuport_queue_size", "npuport_batch_padded_tokens_bucket", "npuport_queue_duration_seconds_bucket",
                   "npuport_tokenization_duration_seconds_bucket", "npuport_inference_duration_seconds_bucket",
                   'route="/v2/models/{name}/infer"'):
        assert series in metrics, series


def _v2(persona=("p",), reply=("r",), **extra):
    inputs = [{"name": "persona", "datatype": "BYTES", "shape": [len(persona)], "data": list(persona)},
              {"name": "reply", "datatype": "BYTES", "shape": [len(reply)], "data": list(reply)}]
    return {"inputs": inputs, **extra}


def _binary(size: int, payload: bytes) -> tuple[bytes, dict]:
    """A binary-extension body: JSON header (length in the header field), then the tensor bytes."""
    head = json.dumps({"inputs": [{"name": "reply", "datatype": "BYTES", "shape": [1],
                                   "parameters": {"binary_data_size": size}}]}).encode()
    return head + payload, {"inference-header-content-length": str(len(head))}


BAD_V2 = [  # (body or raw bytes, headers, status, needle)
    (b"{not json", {}, 400, "malformed"),
    (b"[" * 60_000, {}, 400, "malformed"),
    ({"inputs": "x"}, {}, 400, "'inputs' list"),
    (_v2() | {"inputs": [{"name": "reply", "datatype": "FP32", "shape": [1], "data": [1.0]}]}, {}, 400, "BYTES"),
    ({"inputs": [{"name": "reply", "datatype": "BYTES", "shape": [2], "data": ["a"]}]}, {}, 400, "shape [2]"),
    (_v2(reply=("r", "s")), {}, 400, "same number"),
    ({"inputs": [{"name": "reply", "datatype": "BYTES", "shape": [1], "data": ["r"]}]}, {}, 400, "missing input"),
    (_v2() | {"inputs": _v2()["inputs"] + [{"name": "x", "datatype": "BYTES", "shape": [1], "data": ["a"]}]}, {},
     400, "unknown inputs"),
    (_v2(persona=("p",) * 9, reply=("r",) * 9), {}, 413, "at most 8"),
    (_v2(reply=("r" * 2001,)), {}, 413, "at most 2000"),
    (_v2(reply=("   ",)), {}, 422, "empty"),
    (_v2(outputs=[{"name": "logits"}]), {}, 400, "unknown outputs"),
    (*_binary(99, b"ab"), 400, "runs past"),  # binary_data_size beyond the body
    (b"{}", {"inference-header-content-length": "9999"}, 400, "does not fit"),
    (*_binary(6, struct.pack("<I", 50) + b"ab"), 400, "runs past"),  # an element's length beyond its tensor
]


@pytest.mark.parametrize("body,headers,status,needle", BAD_V2, ids=[b[3] for b in BAD_V2])
def test_v2_bad_input_is_4xx_json(detector, body, headers, status, needle):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = httpx.post(detector.url + "/v2/models/detector/infer", content=content, headers=headers)
    assert r.status_code == status, r.text
    assert needle in r.json()["error"], r.json()


def test_v2_policies_are_v1s(artifacts, tmp_path, detector):
    r = httpx.post(detector.url + "/v2/models/detector/infer", content=json.dumps(_v2()),
                   headers={"content-type": "text/plain"})
    assert r.status_code == 415
    r = httpx.post(detector.url + "/v2/models/detector/infer", json=_v2(), headers={"host": "attacker.example"})
    assert r.status_code == 400 and "Host" in r.json()["error"]
    r = httpx.post(detector.url + "/v2/models/detector/infer", content=b"x" * (1 << 17))
    assert r.status_code == 413
    keyfile = tmp_path / "key"
    keyfile.write_text("s3cret-key-0123456789")
    with Server(ServeConfig(artifact_dir=str(artifacts), port=_free_port(), api_key_file=str(keyfile))) as s:
        assert httpx.post(s.url + "/v2/models/detector/infer", json=_v2()).status_code == 401
        assert httpx.get(s.url + "/v2/models/detector").status_code == 401
        assert httpx.get(s.url + "/v2/health/ready").status_code == 200  # probes stay open, like /healthz
        c = triton.InferenceServerClient(s.url.removeprefix("http://"))
        r = c.infer("detector", [_bytes_input("persona", ["p"], True), _bytes_input("reply", ["r"], True)],
                    headers={"X-API-Key": "s3cret-key-0123456789"})
        assert r.as_numpy("deviation_probability").shape == (1,)


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(max_size=400), header=st.one_of(st.none(), st.integers(-5, 500).map(str)))
def test_v2_fuzz_never_5xx(detector, body, header):
    headers = {} if header is None else {"inference-header-content-length": header}
    r = httpx.post(detector.url + "/v2/models/detector/infer", content=body, headers=headers)
    assert r.status_code < 500, (r.status_code, r.text)


def test_inference_client_text_classification_equals_v1_classify(classifier):
    from huggingface_hub import InferenceClient

    text = PAIRS[0][0]
    v1 = httpx.post(classifier.url + "/v1/classify", json={"text": text}).json()
    got = InferenceClient(classifier.url).text_classification(text)
    assert [g.label for g in got] == sorted(v1["scores"], key=lambda k: -v1["scores"][k])
    for g in got:
        assert abs(g.score - v1["scores"][g.label]) < 1e-6
    assert got[0].label == v1["label"] and set(v1["scores"]) == set(LABELS.values())
    top = InferenceClient(classifier.url).text_classification(text, top_k=1)
    assert [t.label for t in top] == [v1["label"]]
    # function_to_apply as the transformers pipeline reads it: on the logits
    z = {g.label: g.score for g in InferenceClient(classifier.url).text_classification(text, function_to_apply="none")}
    zs = np.array([z[k] for k in v1["scores"]])
    assert np.exp(zs) / np.exp(zs).sum() == pytest.approx([v1["scores"][k] for k in v1["scores"]], abs=1e-6)
    sig = InferenceClient(classifier.url).text_classification(text, function_to_apply="sigmoid")
    assert {g.label: g.score for g in sig} == pytest.approx({k: 1 / (1 + np.exp(-v)) for k, v in z.items()}, abs=1e-6)
    soft = InferenceClient(classifier.url).text_classification(text, function_to_apply="softmax")
    assert {g.label: g.score for g in soft} == pytest.approx(v1["scores"], abs=1e-6)


def test_inference_client_health_check_and_endpoint_info(classifier, tmp_path):
    """TEI's GET /health and GET /info, read by huggingface_hub's own methods: /info names the labels in the head's
    order and the limits this server enforces, and /health stays open while /info needs the key, like /healthz
    and /v1/model."""
    from huggingface_hub import InferenceClient
    from huggingface_hub.errors import HfHubHTTPError

    endpoint = dict(provider="hf-inference")  # the client's name for a TEI / TGI endpoint: its health and info
    client = InferenceClient(classifier.url, **endpoint)
    assert client.health_check() is True
    info = client.get_endpoint_info()
    card = httpx.get(classifier.url + "/v1/model").json()
    id2label = info["model_type"]["classifier"]["id2label"]
    assert [id2label[str(i)] for i in range(len(id2label))] == card["labels"] == [LABELS[i] for i in range(3)]
    assert info["model_type"]["classifier"]["label2id"] == {lab: i for i, lab in enumerate(card["labels"])}
    assert (info["max_input_length"], info["max_client_batch_size"]) == (max(card["buckets"]), 8)
    assert info["model_sha"] == card["model_sha256"] and info["model_dtype"] == "float32"
    assert info["served_model_name"] == "classifier" and info["auto_truncate"] is True
    too_many = [PAIRS[0][0]] * (info["max_client_batch_size"] + 1)  # the limit /info states is the one enforced
    assert httpx.post(classifier.url + "/predict", json={"inputs": [[t] for t in too_many]}).status_code == 413
    keyfile = tmp_path / "key"
    keyfile.write_text("s3cret-key-0123456789")
    with Server(ServeConfig(artifact_dir=classifier.artifact_dir, port=_free_port(), api_key_file=str(keyfile))) as s:
        assert InferenceClient(s.url, **endpoint).health_check() is True  # open, like /healthz
        with pytest.raises(HfHubHTTPError) as e:
            InferenceClient(s.url, **endpoint).get_endpoint_info()
        assert e.value.response.status_code == 401
        keyed = InferenceClient(s.url, token="s3cret-key-0123456789", **endpoint)
        assert keyed.get_endpoint_info()["model_type"] == info["model_type"]


def test_tei_predict_and_v2_on_a_classifier(classifier):
    text, pair = PAIRS[0]
    v1 = httpx.post(classifier.url + "/v1/classify", json={"items": [{"text": text}, {"text": text, "text_pair": pair}]})
    a, b = v1.json()["items"]
    one = httpx.post(classifier.url + "/predict", json={"inputs": text}).json()
    assert one[0]["label"] == a["label"] and {d["label"]: d["score"] for d in one} == pytest.approx(a["scores"])
    batch = httpx.post(classifier.url + "/predict", json={"inputs": [[text], [text, pair]]}).json()
    assert [x[0]["label"] for x in batch] == [a["label"], b["label"]]
    assert {d["label"]: d["score"] for d in batch[1]} == pytest.approx(b["scores"])
    raw = httpx.post(classifier.url + "/predict", json={"inputs": [[text], [text, pair]], "raw_scores": True}).json()
    for got, want in zip(raw, (a, b)):  # TEI's raw scores: the head's logits, best first; softmax gives the scores
        assert [d["label"] for d in got] == sorted(want["scores"], key=lambda k: -want["scores"][k])
        z = np.array([d["score"] for d in got])
        assert dict(zip([d["label"] for d in got], np.exp(z - z.max()) / np.exp(z - z.max()).sum())) == pytest.approx(
            want["scores"], abs=1e-6)
        assert not np.allclose(z, [want["scores"][d["label"]] for d in got])  # logits, not the probabilities again
    for bad, status in (({"inputs": ""}, 422), ({"inputs": [[text]] * 9}, 413), ({"input": text}, 422),
                        ({"inputs": text, "raw_scores": "yes"}, 422)):
        assert httpx.post(classifier.url + "/predict", json=bad).status_code == status, bad
    c = _client(classifier)
    r = c.infer("classifier", [_bytes_input("text", [text, text], True), _bytes_input("text_pair", ["", pair], True)])
    scores = r.as_numpy("scores")
    assert scores.shape == (2, 3)
    np.testing.assert_allclose(scores[1], [b["scores"][LABELS[i]] for i in range(3)], atol=1e-6)
    assert _as_str(r.as_numpy("label")) == [a["label"], b["label"]]


def test_a_lost_replica_is_503_with_retry_after(artifacts):
    """The one mapping of a lost model replica: the pool raises ReplicaLost (fleet.RayPool does when Ray gives up an
    ActorDiedError), the service answers 503 with Retry-After. A real pool and server; the replica is lost once."""
    from npuport.serve.app import create_app
    from npuport.serve.pool import LocalPool, ReplicaLost

    class LosesOnce(LocalPool):
        lost = False

        async def infer(self, rows):
            if not self.lost:
                self.lost = True
                raise ReplicaLost("ActorDiedError")
            return await super().infer(rows)

    cfg = ServeConfig(artifact_dir=str(artifacts), port=_free_port())
    app = create_app(cfg, pool=LosesOnce(cfg, CollectorRegistry()))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=cfg.port, log_level="warning"))
    th = threading.Thread(target=server.run, daemon=True)
    th.start()
    try:
        url = f"http://127.0.0.1:{cfg.port}"
        for _ in range(300):
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        r = httpx.post(url + "/v1/detect", json=ITEM, timeout=30)
        assert r.status_code == 503 and r.headers["retry-after"] == "1" and "replica" in r.json()["error"]
        assert httpx.post(url + "/v1/detect", json=ITEM, timeout=30).status_code == 200  # the retry it advises
    finally:
        server.should_exit = True
        th.join(30)


def test_not_ready_until_the_pool_has_a_model(artifacts):
    """Readiness follows the pool, not the HTTP listener: on Ray the ingress listens before any model replica has
    loaded (fleet.RayPool is ready once one answers). Until then every probe and route answers 503 "loading"; the
    liveness probe stays 200. A real pool and server; the pool's model arrives when the test says so."""
    from npuport.serve.app import create_app
    from npuport.serve.pool import LocalPool

    class Late(LocalPool):
        async def start(self):
            await super().start()
            self.ready = False  # loaded, but not announced yet

    cfg = ServeConfig(artifact_dir=str(artifacts), port=_free_port())
    pool = Late(cfg, CollectorRegistry())
    server = uvicorn.Server(uvicorn.Config(create_app(cfg, pool=pool), host="127.0.0.1", port=cfg.port,
                                           log_level="warning"))
    th = threading.Thread(target=server.run, daemon=True)
    th.start()
    try:
        url = f"http://127.0.0.1:{cfg.port}"
        for _ in range(300):
            if server.started:
                break
            time.sleep(0.1)
        assert httpx.get(url + "/v2/health/live", timeout=5).status_code == 200
        for path in ("/healthz", "/v2/health/ready", "/v1/model"):
            r = httpx.get(url + path, timeout=5)
            assert r.status_code == 503 and r.json()["error"] == "loading", (path, r.text)
        assert httpx.post(url + "/v1/detect", json=ITEM, timeout=30).status_code == 503
        pool.ready = True
        assert httpx.get(url + "/healthz", timeout=5).status_code == 200
        assert httpx.get(url + "/v2/health/ready", timeout=5).json() == {"ready": True}
        assert httpx.post(url + "/v1/detect", json=ITEM, timeout=30).status_code == 200
    finally:
        server.should_exit = True
        th.join(30)
