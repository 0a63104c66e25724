"""Which step runner a runtime gets: read from its capability flag (`Runtime.step_runner`), never from its name.

    graph  the step graph(s) exported to standard ONNX and run through `runtime.open_graph` (train/runner.py)
    torch  PyTorch itself on the runtime's first device: the control run (train/runner.py)
    mixed  a loss-scaled 16-bit gradient graph compiled by `runtime.open_step_graph`, AdamW in fp32 on the host
           (train/mixed.py)
"""

from __future__ import annotations

from ..errors import ConfigError
from ..runtimes import get_runtime, train_precision
from .mixed import MixedPrecisionRunner
from .options import training_runtimes
from .runner import EagerRunner, GraphRunner, StepRunner
from .step import OptimConfig


def open_step_runner(runtime: str, model, opt: OptimConfig, **kw) -> StepRunner:
    """The runner for `runtime` (a registered runtime name): ask the registry, never a second list."""
    rt = get_runtime(runtime)
    if not rt.trains:
        raise ConfigError(f"runtime {runtime!r} cannot run a training step; runtimes that can: "
                          f"{', '.join(training_runtimes())}")
    kw["precision"] = train_precision(runtime, kw.get("precision"))
    rt.require()
    if rt.step_runner == "torch":
        return EagerRunner(model, opt, name=rt.name, device=rt.devices[0], **kw)
    if rt.step_runner == "mixed":
        return MixedPrecisionRunner(rt, model, opt, open_graph=rt.open_step_graph, **kw)
    return GraphRunner(rt, model, opt, **kw)

