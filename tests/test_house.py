"""The house rules DESIGN.md states, checked on the source: imports point down (no cycles, counting imports inside
functions; `if TYPE_CHECKING:` blocks aside), runtimes sit at the bottom, leaves import nothing above them, and no
runtime's name is branched on outside `npuport/runtimes/`."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from npuport.runtimes import get_runtime, runtime_names

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "npuport"


def _modules() -> dict[str, Path]:
    mods = {}
    for f in PKG.rglob("*.py"):
        parts = list(f.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = f
    return mods


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test):
            skip.update(id(s) for s in ast.walk(n))
    return skip


def import_graph() -> dict[str, set[str]]:
    """module -> the npuport modules it imports, from every import statement (module level and inside functions)."""
    mods = _modules()
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, f in mods.items():
        tree = ast.parse(f.read_text(encoding="utf-8"))
        skip = _type_checking_nodes(tree)
        is_pkg = f.name == "__init__.py"
        for n in ast.walk(tree):
            if id(n) in skip:
                continue
            if isinstance(n, ast.Import):
                targets = [a.name for a in n.names]
            elif isinstance(n, ast.ImportFrom):
                base = n.module or ""
                if n.level:
                    here = m.split(".") if is_pkg else m.split(".")[:-1]
                    here = here[: len(here) - (n.level - 1)]
                    base = ".".join(here + ([base] if base else []))
                targets = [base] + [f"{base}.{a.name}" for a in n.names]
            else:
                continue
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != m and t.startswith("npuport"):
                    edges[m].add(t)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), a package and its own submodule aside
    (an __init__ that re-exports what it contains is not a layering cycle)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in edges:
        if v not in index:
            strong(v)
    return [c for c in out if not (len(c) == 2 and (c[1].startswith(c[0] + ".") or c[0].startswith(c[1] + ".")))]


def test_the_import_graph_has_no_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles (imports inside functions count): " + "; ".join(" <-> ".join(c) for c in found)


def test_the_cycle_finder_finds_a_cycle():
    """The check above can fail: a graph with a cycle hidden behind a function-level import is reported."""
    assert cycles({"npuport.a": {"npuport.b"}, "npuport.b": {"npuport.c"}, "npuport.c": {"npuport.a"}}) == [
        ["npuport.a", "npuport.b", "npuport.c"]]
    assert cycles({"npuport.a": {"npuport.b"}, "npuport.b": set()}) == []


# What each layer may import from npuport. Leaves import only other leaves; runtimes import leaves and model
# definitions (the eager runtime's artifact is a model directory), never capture, proof, training or serving.
LEAVES = {"npuport", "npuport._version", "npuport.errors", "npuport.spec", "npuport.manifest", "npuport.fsio", "npuport.parity",
          "npuport.task", "npuport.registry", "npuport.interrupt"}


@pytest.mark.parametrize("leaf", sorted(LEAVES - {"npuport"}))
def test_leaves_import_only_leaves(leaf):
    above = import_graph()[leaf] - LEAVES
    assert not above, f"{leaf} is a leaf but imports {sorted(above)}"


def _outside(targets: set[str], *allowed_prefixes: str) -> set[str]:
    return {t for t in targets - LEAVES if not t.startswith(allowed_prefixes)}


def test_runtimes_sit_above_models_and_leaves_only():
    for m, targets in import_graph().items():
        if m.startswith("npuport.runtimes"):
            above = _outside(targets, "npuport.runtimes", "npuport.models")
            assert not above, f"{m} imports {sorted(above)}: runtimes take a CompileInput, never capture or training"


def test_models_import_only_models_and_leaves():
    for m, targets in import_graph().items():
        if m.startswith("npuport.models"):
            above = _outside(targets, "npuport.models")
            assert not above, f"{m} imports {sorted(above)}: model definitions sit below everything but the leaves"


def _string_literals(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            yield n.lineno, n.value


def test_no_runtime_name_is_branched_on_outside_runtimes():
    """A new accelerator is one file: what differs between runtimes is a capability flag or a method, so no module
    outside npuport/runtimes/ names one (not even the eager reference: `runtimes.REFERENCE`)."""
    names = set(runtime_names())
    assert {"eager", "onnxruntime", "qnn"} <= names  # the check below looks for something real
    hits = [f"{f.relative_to(ROOT)}:{line}: {value!r}" for f in sorted(PKG.rglob("*.py"))
            if "runtimes" not in f.relative_to(PKG).parts for line, value in _string_literals(f) if value in names]
    assert not hits, "runtime names outside npuport/runtimes/:\n" + "\n".join(hits)


def test_distributions_in_version_reports_come_from_the_runtimes():
    from npuport.machine import tracked

    declared = {d for n in runtime_names() for d in get_runtime(n).distributions}
    assert declared and declared <= set(tracked())


def test_ruff_is_clean():
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if not Path(ruff).is_file():
        pytest.skip("ruff is not installed (pip install -e '.[test]' installs it)")
    res = subprocess.run([ruff, "check", "npuport", "tests", "benchmarks"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
