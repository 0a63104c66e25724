"""OpenVINO's CPU plugin installs a small alternate signal stack on the thread that compiles, in memory freed with the
compiled model; Python runs signal handlers on it, so a Ctrl-C after such a model was freed segfaulted the process
(CI: exit 139 in the Ctrl-C test, after the OpenVINO training tests). npuport puts the thread's stack back."""

import ctypes
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sigaltstack is read through Linux's libc")


class _Stack(ctypes.Structure):
    _fields_ = [("ss_sp", ctypes.c_void_p), ("ss_flags", ctypes.c_int), ("ss_size", ctypes.c_size_t)]


def _altstack():
    s = _Stack()
    assert ctypes.CDLL(None).sigaltstack(None, ctypes.byref(s)) == 0
    return s.ss_sp, s.ss_flags, s.ss_size


def _relu_graph(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])])
    path = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_compiling_for_openvino_leaves_the_signal_stack_as_it_was(tmp_path):
    from npuport.runtimes import Graph, get_runtime

    before = _altstack()
    ex = get_runtime("openvino").open_graph(Graph(onnx=_relu_graph(tmp_path), workdir=tmp_path), 1)
    np.testing.assert_array_equal(ex.run({"x": -np.ones((4, 4), np.float32)})[0], np.zeros((4, 4), np.float32))
    assert _altstack() == before  # without the fix: an 11,568-byte stack inside OpenVINO's compiled model
