"""The training CLI's choices, without torch: the CLI's parser reads them before any command runs, and a command
that never trains (`npuport demo` while its build runs in a child) should not hold torch for them."""

from __future__ import annotations

from ..runtimes import REFERENCE, runtime_names

FORMS = ("fused", "split")  # how the step graph is cut (train/step.py)
FAULT_TOLERANCE = ("torchft",)  # --fault-tolerance: the engines that keep survivors stepping (train/ft.py)
OUTER_DTYPES = ("fp32", "bf16", "int8")  # what DiLoCo's pseudo-gradients travel as (train/distributed.py)


def training_runtimes() -> list[str]:
    return runtime_names(trains=True)


def sample_runtimes() -> list[str]:
    """eager, plus every runtime that runs standard-ONNX graphs (from the registry)."""
    return [REFERENCE, *runtime_names(runs_graphs=True)]
