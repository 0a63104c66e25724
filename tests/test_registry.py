"""Registries: duplicates and unknown names raise; third-party backends arrive through the entry-point group."""

import subprocess
import sys
import textwrap

import pytest

from npuport.errors import ConfigError
from npuport.registry import Registry
from npuport.runtimes import get_runtime as get_backend
from npuport.runtimes import runtime_names as backend_names


def test_duplicate_and_unknown():
    r = Registry("thing")
    r.register("a", 1)
    with pytest.raises(ValueError, match="already registered"):
        r.register("a", 2)
    with pytest.raises(ConfigError, match="unknown thing 'b'; known: a"):
        r.get("b")


def test_builtin_backends():
    assert {"eager", "onnxruntime", "openvino", "inductor", "rbln"} <= set(backend_names())
    assert get_backend("onnxruntime").available()[0]


def test_entry_point_plugin(tmp_path):
    """A package that declares `npuport.runtimes` in its entry points shows up in the registry (and in doctor)."""
    (tmp_path / "myplug.py").write_text(textwrap.dedent('''
        from npuport.runtimes.onnxruntime import OnnxRuntime
        class MyBackend(OnnxRuntime):
            name = "my-npu"
            description = "plugin test backend"
    '''))
    dist = tmp_path / "myplug-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: myplug\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[npuport.runtimes]\nmy-npu = myplug:MyBackend\n")
    code = "from npuport.runtimes import runtime_names; print(runtime_names())"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**__import__("os").environ, "PYTHONPATH": str(tmp_path)})
    assert res.returncode == 0, res.stderr
    assert "my-npu" in res.stdout
