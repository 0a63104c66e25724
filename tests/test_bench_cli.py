"""`npuport bench` on a tiny preset: structure of the results and plots, never timing values."""

import json

import pytest

from npuport.api import BenchConfig, ModelSource, PortConfig, bench, port
from npuport.cli import main
from npuport.errors import ConfigError
from npuport.runtimes import ShapeSpec
from npuport.spec import QuantOptions


def test_bench_cli_ports_and_reports(tmp_path):
    js, png = tmp_path / "b.json", tmp_path / "lat.png"
    assert main(["-q", "bench", "--preset", "tiny-bert", "--random-init", "--buckets", "16,32", "--backend",
                 "onnxruntime,openvino", "--vs", "eager", "--runs", "3", "--warmup", "1", "--json", str(js),
                 "--plot", str(png)]) == 0
    r = json.loads(js.read_text())
    assert set(r["results"]) == {"eager", "onnxruntime", "openvino"}
    for st in r["results"].values():
        for k in ("p50_ms", "p99_ms", "max_ms", "p90_ms", "mean_ms", "stdev_ms", "jitter", "sequences_per_s"):
            assert k in st
        assert st["runs"] == 3 and st["p50_ms"] <= st["p99_ms"] <= st["max_ms"]
    assert set(r["per_shape"]) == {"1x16", "1x32"} and r["ratios_vs_eager_p50"]["eager"] == 1.0
    assert png.stat().st_size > 1000 and (tmp_path / "lat_vs_length.png").is_file()


def test_bench_existing_artifacts_and_int8(tmp_path):
    out = tmp_path / "o"
    rep = port(PortConfig(source=ModelSource(preset="tiny-modernbert", random_init=True), out=str(out),
                          runtimes=("onnxruntime",), shapes=ShapeSpec(buckets=(24,)), precision="int8", bench_runs=1,
                          quant=QuantOptions(mode="dynamic", min_agreement=0)))
    r8 = rep["backends"]["onnxruntime"]["int8"]
    assert r8["pass"] and 0 < r8["max_abs_logit_diff"] <= 0.5  # quantised: close, not exact
    res = bench(BenchConfig(artifact_dir=str(out), vs=("eager",), runs=2, warmup=0))
    assert set(res["results"]) == {"eager", "onnxruntime-int8"} and res["best"] == "onnxruntime-int8"


def test_bench_times_the_shapes_all_artifacts_share(tmp_path):
    """Artifacts compiled for different shapes sit side by side: bench times the shapes they share, and refuses
    (naming each artifact's shapes) when there is none."""
    import shutil

    src = ModelSource(preset="tiny-bert", random_init=True)
    for name, buckets, backend in (("a", (16, 32), "onnxruntime"), ("b", (32,), "openvino"), ("c", (24,), "openvino")):
        port(PortConfig(source=src, out=str(tmp_path / name), runtimes=(backend,), shapes=ShapeSpec(buckets=buckets),
                        capture_methods=(), bench_runs=1))
    shutil.move(str(tmp_path / "b" / "openvino-fp32"), str(tmp_path / "a" / "openvino-fp32"))
    res = bench(BenchConfig(artifact_dir=str(tmp_path / "a"), vs=("eager",), runs=2, warmup=0))
    assert set(res["per_shape"]) == {"1x32"} and set(res["results"]) == {"eager", "onnxruntime", "openvino"}
    shutil.rmtree(tmp_path / "a" / "openvino-fp32")
    shutil.move(str(tmp_path / "c" / "openvino-fp32"), str(tmp_path / "a" / "openvino-fp32"))
    with pytest.raises(ConfigError, match="share no compiled shape.*1x16, 1x32.*1x24"):
        bench(BenchConfig(artifact_dir=str(tmp_path / "a"), vs=("eager",), runs=2, warmup=0))


def test_bench_bad_input(tmp_path):
    with pytest.raises(ConfigError, match="unknown --vs path 'tensorflow'"):
        BenchConfig(source=ModelSource(preset="tiny-bert", random_init=True), vs=("tensorflow",))
    with pytest.raises(ConfigError, match="exactly one"):
        BenchConfig()
    assert main(["bench", "--preset", "tiny-bert", "--random-init", "--vs", "nope", "--seq-len", "16"]) == 2


def test_bench_leaves_no_temporary_directory_on_error(tmp_path, monkeypatch):
    """A bench that ports first and then fails removes its npuport-bench-* directory (it was made outside the try)."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(ConfigError, match="supports precision"):
        bench(BenchConfig(source=ModelSource(preset="tiny-bert", random_init=True), runtimes=("onnxruntime",),
                          shapes=ShapeSpec(buckets=(16,)), runs=1, vs=("eager",),
                          precision="fp16"))  # fp16 on the CPU EP is refused before any artifact exists
    assert not list(tmp_path.glob("npuport-bench-*"))
