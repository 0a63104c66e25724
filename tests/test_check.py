"""P9 #3: `npuport check`, the NPU pre-flight: per target, which ops go on the NPU, which stay on the host, and
what the adapter changed so the model captures at all — in seconds-to-a-minute, before any long compile."""

import json

import pytest

from npuport.cli import main
from npuport.runtimes import get_runtime

pytestmark = pytest.mark.skipif(
    not (get_runtime("qnn").available()[0] and get_runtime("ethos-u").available()[0]) and not __import__("os").environ.get("CI"),
    reason='needs npuport[qnn] and npuport[ethos-u] (CI installs them)')


def test_check_names_host_ops_per_target_and_the_adapter_fixes(tmp_path, capsys):
    out = tmp_path / "check.json"
    assert main(["-q", "check", "--preset", "tiny-modernbert", "--random-init", "--seq-len", "16",
                 "--backend", "qnn,ethos-u", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["capture"]["ok"] and res["model_type"] == "modernbert"
    actions = res["capture"]["actions"]
    assert all(isinstance(a["changed"], bool) for a in actions)
    sdpa = next(a for a in actions if "attn_implementation" in a["action"])  # what it guards against, named
    assert "FlashAttention" in sdpa["fixes"], actions
    qnn, eu = res["targets"]["qnn"], res["targets"]["ethos-u"]
    assert qnn["executes"] == "simulator" and qnn["precision"] == "fp16" and qnn["npu_ops"]
    assert set(qnn["host_ops"]) == set(qnn["per_shape"]["1x16"])
    # The U55 has no Gather: the embedding lookup is named as a host op, the transformer body goes to the NPU
    assert eu["device"] == "ethos-u55-128" and "aten.index_select.default" in eu["host_ops"]
    assert eu["npu_ops"].get("aten.linear.default", 0) > 0 and eu["partitions"] >= 1
    assert "index_select" in eu["verdict"]
    printed = capsys.readouterr().out
    assert "ethos-u" in printed and "index_select" in printed  # the table, not only the JSON


def test_check_refuses_a_precision_the_target_lacks(capsys):
    assert main(["-q", "check", "--preset", "tiny-modernbert", "--random-init", "--seq-len", "16",
                 "--backend", "ethos-u", "--precision", "fp32"]) == 2
    assert "supports precision int8, int16, not fp32" in capsys.readouterr().err
