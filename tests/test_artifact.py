"""Tampered, incomplete or mismatched artifacts refuse to load."""

import json
import shutil

import pytest

from npuport.api import ModelSource, PortConfig, port
from npuport.artifact import check_files, check_source, load_session, read_manifest
from npuport.errors import ArtifactError
from npuport.runtimes import ShapeSpec


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    out = tmp_path_factory.mktemp("art") / "out"
    port(PortConfig(source=ModelSource(preset="tiny-bert", random_init=True), out=str(out), runtimes=("onnxruntime",),
                    shapes=ShapeSpec(buckets=(16,)), capture_methods=("trace",), bench_runs=1))
    return out / "onnxruntime-fp32"


@pytest.fixture
def copy(artifact, tmp_path):
    d = tmp_path / "a"
    shutil.copytree(artifact, d)
    return d


def test_clean_artifact_loads(copy):
    manifest, session = load_session(copy)
    assert manifest.runtime.name == "onnxruntime"
    for key in ("source", "precision", "shape_spec", "capture", "files", "parity", "runtime", "device"):
        assert key in manifest.to_json()
    assert manifest.capture["proof"]["trace"]["max_abs_diff"] == 0.0


def test_flipped_byte_is_refused(copy):
    data = copy / "model.onnx.data"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))
    with pytest.raises(ArtifactError, match="model.onnx.data changed"):
        load_session(copy)


def test_missing_and_extra_files_are_refused(copy):
    (copy / "model.onnx").rename(copy / "renamed.onnx")
    with pytest.raises(ArtifactError, match="model.onnx missing.*renamed.onnx not in manifest"):
        check_files(copy)


def test_missing_or_corrupt_manifest(copy):
    (copy / "manifest.json").write_text("{not json")
    with pytest.raises(ArtifactError, match="not valid JSON"):
        read_manifest(copy)
    (copy / "manifest.json").unlink()
    with pytest.raises(ArtifactError, match="not an npuport artifact"):
        read_manifest(copy)


def test_source_mismatch_is_refused(copy):
    manifest = read_manifest(copy)
    with pytest.raises(ArtifactError, match="compiled from model"):
        check_source(manifest, "0" * 64)


def test_manifest_edit_is_caught(copy):
    m = json.loads((copy / "manifest.json").read_text())
    m["files"]["model.onnx"] = "f" * 64
    (copy / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ArtifactError, match="changed"):
        load_session(copy)
