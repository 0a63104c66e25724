"""The README's commands: the test command is what CI runs, and every CLI command the tour shows exists."""

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()


def bash_blocks():
    return re.findall(r"```bash\n(.*?)```", README, flags=re.S)


def test_two_commands_first():
    first, second = bash_blocks()[:2]
    assert "npuport demo" in first and "pip install" in first
    assert "pytest" in second and "pip install" in second


def test_ci_runs_the_readme_test_command():
    test_cmd = bash_blocks()[1].strip().split("&&")
    ci = (REPO / ".ci" / "run").read_text()
    for part in test_cmd[2:]:  # after venv creation and activation
        assert part.strip() in ci, part


def test_tour_commands_parse():
    tour = bash_blocks()[2]
    seen = set()
    for line in tour.splitlines():
        words = line.split("#")[0].split()
        if not words or words[0] != "npuport":
            continue
        cmd = words[1:3] if words[1] in ("detector", "lm") else words[1:2]
        if tuple(cmd) in seen:
            continue
        seen.add(tuple(cmd))
        res = subprocess.run([sys.executable, "-m", "npuport.cli", *cmd, "--help"], capture_output=True, text=True)
        assert res.returncode == 0, (cmd, res.stderr)
    assert {("doctor",), ("port",), ("verify",), ("demo",), ("detector", "train"), ("detector", "eval")} <= seen


def test_results_block_is_generated():
    """README's results block and RESULTS.md are exactly what benchmarks/render.py makes of the result JSONs."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("render", REPO / "benchmarks" / "render.py")
    render = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(render)
    results, block = render.build()
    assert README.split("<!-- results:start -->\n")[1].split("<!-- results:end -->")[0] == block, \
        "README's results block is stale or edited by hand: run python benchmarks/render.py"
    assert (REPO / "benchmarks" / "RESULTS.md").read_text() == results, "RESULTS.md is stale: run benchmarks/render.py"
    for link in re.findall(r"\]\((benchmarks/[^)]+)\)", block):
        assert (REPO / link).exists(), link
