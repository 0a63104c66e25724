"""KServe V2 over gRPC (`serve --grpc-port`) through the real `tritonclient.grpc`, on a real uvicorn server on
loopback: answers equal /v1's, the same limits and API key as HTTP, each refusal with its gRPC code, and the
statistics extension counting what gRPC answered."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

grpcclient = pytest.importorskip("tritonclient.grpc")  # npuport[grpc]: in the test extra, so CI runs this
from test_serve import ITEM, Server, _free_port  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

from npuport.cli import main  # noqa: E402
from npuport.errors import ConfigError  # noqa: E402
from npuport.serve.app import ServeConfig  # noqa: E402

ITEMS = [ITEM, {"persona": "You are Grandma Okoye, a storyteller.", "reply": "As an AI language model, I cannot."},
         {"persona": "You are Tomo, a fox spirit.", "user": "Hi!", "reply": "Kon kon! Who visits my shrine?"}]
KEY = "s3cret-key-0123456789"


@pytest.fixture(scope="module")
def served(artifacts, tmp_path_factory):
    keyfile = tmp_path_factory.mktemp("key") / "key"
    keyfile.write_text(KEY)
    cfg = ServeConfig(artifact_dir=str(artifacts), port=_free_port(), grpc_port=_free_port(), max_items=4,
                      max_chars=2000, api_key_file=str(keyfile))
    with Server(cfg) as s:
        s.grpc = f"127.0.0.1:{cfg.grpc_port}"
        yield s


def _client(s) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(s.grpc)


def _inputs(items: list[dict]) -> list:
    out = []
    for name in ("persona", "user", "reply"):
        x = grpcclient.InferInput(name, [len(items)], "BYTES")
        x.set_data_from_numpy(np.array([i.get(name, "").encode() for i in items], dtype=object))
        out.append(x)
    return out


def _code(e: InferenceServerException) -> str:
    return e.status()


def test_infer_equals_v1_detect_and_metadata(served):
    v1 = httpx.post(served.url + "/v1/detect", json={"items": ITEMS}, headers={"X-API-Key": KEY}).json()["items"]
    c = _client(served)
    auth = {"x-api-key": KEY}
    assert c.is_server_live() and c.is_server_ready()  # probes are open, like /v2/health/*
    assert c.is_model_ready("detector", headers=auth)
    meta = c.get_model_metadata("detector", headers=auth, as_json=True)
    assert [i["name"] for i in meta["inputs"]] == ["persona", "user", "reply"]
    assert {o["name"]: o["datatype"] for o in meta["outputs"]} == {"deviation_probability": "FP32", "label": "BYTES"}
    cfg = c.get_model_config("detector", headers=auth, as_json=True)["config"]
    assert cfg["name"] == "detector" and [i["data_type"] for i in cfg["input"]] == ["TYPE_STRING"] * 3
    assert cfg["input"][1].get("optional") is True
    r = c.infer("detector", _inputs(ITEMS), headers={"authorization": f"Bearer {KEY}"}, request_id="r1")
    probs = r.as_numpy("deviation_probability")
    assert probs.dtype == np.float32 and probs.shape == (3,)
    np.testing.assert_allclose(probs, [x["deviation_probability"] for x in v1], rtol=0, atol=1e-6)
    assert [v.decode() for v in r.as_numpy("label")] == [x["label"] for x in v1]
    assert r.get_response().id == "r1"
    only = c.infer("detector", _inputs(ITEMS[:1]), headers=auth,
                   outputs=[grpcclient.InferRequestedOutput("label")])
    assert only.as_numpy("deviation_probability") is None and only.as_numpy("label").shape == (1,)
    index = c.get_model_repository_index(headers=auth, as_json=True)["models"]
    assert index == [{"name": "detector", "version": "1", "state": "READY"}]
    stats = c.get_inference_statistics("detector", headers=auth, as_json=True)["model_stats"][0]
    assert int(stats["inference_count"]) >= 4 and int(stats["inference_stats"]["success"]["count"]) >= 2


@pytest.mark.parametrize("case, code, words", [
    ("no key", "StatusCode.UNAUTHENTICATED", "API key"),
    ("unknown model", "StatusCode.NOT_FOUND", "unknown model"),
    ("version 2", "StatusCode.NOT_FOUND", "version 1 only"),
    ("too many items", "StatusCode.INVALID_ARGUMENT", "at most 4"),
    ("too long", "StatusCode.INVALID_ARGUMENT", "at most 2000"),
    ("empty reply", "StatusCode.INVALID_ARGUMENT", "is empty"),
    ("unknown input", "StatusCode.INVALID_ARGUMENT", "unknown inputs"),
    ("fp32 input", "StatusCode.INVALID_ARGUMENT", "must be BYTES"),
    ("unknown output", "StatusCode.INVALID_ARGUMENT", "unknown outputs"),
])
def test_refusals_carry_the_grpc_code_and_the_reason(served, case, code, words):
    c, auth = _client(served), {"x-api-key": KEY}
    model, version, items, extra, outputs = "detector", "", ITEMS[:1], [], None
    if case == "no key":
        auth = {}
    elif case == "unknown model":
        model = "nope"
    elif case == "version 2":
        version = "2"
    elif case == "too many items":
        items = ITEMS + ITEMS
    elif case == "too long":
        items = [{**ITEM, "reply": "x" * 2001}]
    elif case == "empty reply":
        items = [{**ITEM, "reply": "  "}]
    elif case == "unknown input":
        x = grpcclient.InferInput("colour", [1], "BYTES")
        x.set_data_from_numpy(np.array([b"red"], dtype=object))
        extra = [x]
    elif case == "fp32 input":
        x = grpcclient.InferInput("reply", [1], "FP32")
        x.set_data_from_numpy(np.zeros(1, np.float32))
        ins = [i for i in _inputs(items) if i.name() != "reply"] + [x]
    elif case == "unknown output":
        outputs = [grpcclient.InferRequestedOutput("logits")]
    with pytest.raises(InferenceServerException) as e:
        c.infer(model, ins if case == "fp32 input" else _inputs(items) + extra, model_version=version, headers=auth,
                outputs=outputs)
    assert _code(e.value) == code and words in e.value.message(), (e.value.status(), e.value.message())


def test_model_control_and_unoffered_rpcs_are_refused(served):
    c, auth = _client(served), {"x-api-key": KEY}
    for call in (lambda: c.load_model("detector", headers=auth), lambda: c.unload_model("detector", headers=auth)):
        with pytest.raises(InferenceServerException) as e:
            call()
        assert _code(e.value) == "StatusCode.FAILED_PRECONDITION" and "holds one model" in e.value.message()
    with pytest.raises(InferenceServerException) as e:
        c.get_system_shared_memory_status(headers=auth)
    assert _code(e.value) == "StatusCode.UNIMPLEMENTED"
    assert c.infer("detector", _inputs(ITEMS[:1]), headers=auth).as_numpy("label").shape == (1,)  # still serving


def test_grpc_port_is_checked_before_anything_starts(artifacts, capsys):
    with pytest.raises(ConfigError, match="differ from --port"):
        ServeConfig(artifact_dir=str(artifacts), port=8123, grpc_port=8123)
    # a fleet's ingress replica opens it on the local cluster only (tests/test_serve_fleet.py serves it there)
    for extra in (["--ray-address", "auto"], ["--write-ray-config", "x.yaml"]):
        assert main(["serve", str(artifacts), "--grpc-port", "8124", "--replicas", "2", *extra]) == 2
        assert "drop --grpc-port" in capsys.readouterr().err


def test_one_in_flight_count_for_http_and_grpc(artifacts):
    """--max-concurrent-requests counts both protocols together: while an HTTP request waits in the batcher (a long
    --max-wait-ms holds it there), a gRPC infer is refused RESOURCE_EXHAUSTED, and the other way round (429)."""
    import threading
    import time

    cfg = ServeConfig(artifact_dir=str(artifacts), port=_free_port(), grpc_port=_free_port(),
                      max_concurrent_requests=1, max_wait_ms=3000)
    with Server(cfg) as s:
        c = grpcclient.InferenceServerClient(f"127.0.0.1:{cfg.grpc_port}")
        held = threading.Thread(target=lambda: httpx.post(s.url + "/v1/detect", json=ITEM, timeout=30))
        held.start()
        time.sleep(1.0)  # the HTTP request is admitted and waiting for its batch to fill
        with pytest.raises(InferenceServerException) as e:
            c.infer("detector", _inputs([ITEM]))
        assert _code(e.value) == "StatusCode.RESOURCE_EXHAUSTED" and "limit 1" in e.value.message()
        held.join(30)
        got = {}
        held = threading.Thread(target=lambda: got.setdefault("r", c.infer("detector", _inputs([ITEM]))))
        held.start()
        time.sleep(1.0)
        r = httpx.post(s.url + "/v1/detect", json=ITEM, timeout=30)
        assert r.status_code == 429 and r.headers["Retry-After"] == "1", r.text
        held.join(30)
        assert got["r"].as_numpy("label").shape == (1,)  # the held gRPC request was answered
        assert httpx.post(s.url + "/v1/detect", json=ITEM, timeout=30).status_code == 200  # and the count went back
