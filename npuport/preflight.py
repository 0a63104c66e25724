"""`npuport check`: before any long compile, what each target will place on its NPU, what falls back to the host,
what it rejects and why, and what the adapter already changed so that the model captures at all.

The field report's team heard "ModernBERT is not supported" from an NPU toolchain; the real blockers were a CUDA-only
attention kernel, torch.compile inside forward and data-dependent shapes. This command names such things per op.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ConfigError, ExportError
from .runtimes import get_runtime, runtime_names
from .spec import ShapeSpec
from .ui import ProgressFn as Progress
from .ui import silent


@dataclass(frozen=True, kw_only=True)
class CheckConfig:
    source: "object"  # api.ModelSource
    targets: tuple[str, ...] = field(default_factory=lambda: tuple(runtime_names(partitions=True)))
    shapes: ShapeSpec = ShapeSpec(batch_sizes=(1,), buckets=(128,))
    precision: str | None = None
    device: str | None = None

    def __post_init__(self):
        known = runtime_names(ports=True)
        for t in self.targets:
            if t not in known:
                raise ConfigError(f"unknown target {t!r}; known: {', '.join(known)}")


# What the adapter's actions fix, in the words of the error a toolchain would give without them.
ADAPTER_FIXES = {
    "attn_implementation": "FlashAttention-2 is a CUDA-only kernel: no NPU compiler can lower it (the adapter forces SDPA)",
    "reference_compile": "torch.compile inside forward breaks tracing and export (the adapter sets reference_compile=False)",
    "unpadding": "unpadding makes every shape depend on the data (the adapter keeps padded, static shapes)",
    "masks": "data-dependent mask branches, sliding windows included (the adapter builds them in-graph, static)",
}


def _explain(action: str) -> dict:
    """What an adapter action guards against, and whether this model needed the change (`changed`)."""
    low = action.lower()
    why = next((w for key, w in ADAPTER_FIXES.items() if key in low), None)
    return {"changed": "->" in low or ": off" in low, **({"fixes": why} if why else {})}


def check(cfg: CheckConfig, progress: Progress = silent) -> dict:
    from .porting import check_lengths as _check_lengths
    from .porting import compile_specs
    from .static.capture import capture

    specs = compile_specs(cfg.targets, cfg.shapes, cfg.precision, cfg.device)
    progress("loading model")
    model = cfg.source.load()
    _check_lengths(model, cfg.shapes)
    work = Path(tempfile.mkdtemp(prefix="npuport-check-"))
    try:
        progress("adapting and capturing")
        try:
            captured = capture(model, cfg.shapes, work / "capture")
            captured.exported()  # the graph every target starts from must exist
        except ExportError as e:
            return {"model_type": model.model_type, "capture": {"ok": False, "error": str(e)}, "targets": {}}
        actions = [{"action": a, **_explain(a)} for a in captured.adapter.actions]
        out = {"model_type": model.model_type, "parameters": sum(p.numel() for p in model.parameters()),
               "shapes": cfg.shapes.to_json(), "capture": {"ok": True, "adapter": captured.adapter.adapter,
                                                           "actions": actions}, "targets": {}}
        for name, spec in specs.items():
            progress(f"{name}: partitioning for {spec.device} at {spec.precision}")
            t0 = time.perf_counter()
            d = work / name
            d.mkdir()
            try:
                res = get_runtime(name).preflight(captured, spec, d)
            except Exception as e:  # noqa: BLE001 - a toolchain failure is the finding, reported per target
                res = {"verdict": f"fails: {type(e).__name__}: {str(e).splitlines()[0][:300]}", "npu_ops": {},
                       "host_ops": {}, "rejected": [], "failed": True}
            out["targets"][name] = {"device": spec.device, "precision": spec.precision,
                                    "executes": get_runtime(name).executes, "seconds": round(time.perf_counter() - t0, 1),
                                    **res}
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)
