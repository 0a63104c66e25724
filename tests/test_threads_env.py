"""$NPUPORT_THREADS: the threads a loaded artifact's runtime takes when none are asked for."""

import pytest

from npuport.artifact import find_artifacts, load_session
from npuport.cli import main


def _ort_threads(session):
    """ONNX Runtime's own record of the intra-op pool size of the first compiled shape."""
    prog = next(iter(session.programs.values()))
    return int(prog.get_session_options().intra_op_num_threads)


def test_unset_leaves_the_runtime_default_and_set_caps_every_shape(artifacts, monkeypatch):
    (art,) = find_artifacts(artifacts)
    monkeypatch.delenv("NPUPORT_THREADS", raising=False)
    assert load_session(art)[1].threads is None
    monkeypatch.setenv("NPUPORT_THREADS", "1")
    _, s = load_session(art)
    assert s.threads == 1 and _ort_threads(s) == 1
    assert load_session(art, threads=2)[1].threads == 2  # an explicit request wins


@pytest.mark.parametrize("value", ["0", "two", "-1", "1.5"])
def test_a_bad_value_is_one_line_naming_the_variable(artifacts, eval_jsonl, monkeypatch, capsys, value):
    (art,) = find_artifacts(artifacts)
    monkeypatch.setenv("NPUPORT_THREADS", value)
    assert main(["-q", "verify", str(art), "--eval-data", str(eval_jsonl)]) == 2
    err = capsys.readouterr().err
    assert f"NPUPORT_THREADS={value!r}" in err and "NPUPORT_THREADS=1" in err and "Traceback" not in err
