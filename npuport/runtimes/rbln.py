"""rbln: Rebellions ATOM/ATOM+ NPUs through the vendor SDK (`rebel-compiler`). Optional: available only where
the SDK is installed; elsewhere every use raises BackendUnavailable with the install hint.

The NPU compiler takes one static shape per compiled graph, so each (batch, bucket) becomes its own `.rbln`
file compiled from the adapted module (the same static module every other backend is proven on).

Not tested here (no SDK, no board): tests/test_backends.py lists it as out of reach, never as covered. The SDK calls
it makes, checked against the public sources (optimum-rbln's `_create_runtimes` / `get_compiled_model`, and
rbln-model-zoo's examples, read with the search tools):
    rebel.compile_from_torch(module, [(name, shape, dtype), ...]) -> compiled;  compiled.save(path)
        (optimum-rbln passes the same list as `input_info=`, plus optional `npu=`/`fusion=`; defaults here)
    rebel.Runtime(path) -> runtime;  runtime.run(input_ids, attention_mask) -> logits (numpy in, numpy out)
        (optimum-rbln builds `rebel.Runtime(compiled, tensor_type="pt", device=...)` and calls `runtime(*args)`;
        the numpy `.run` form is the model zoo's and needs no torch tensors)
With the SDK installed, `python -m pytest tests/test_backends.py` after adding "rbln" to PARITY_TESTED (at fp16,
the only precision the ATOM compiler takes) runs the same parity checks against it."""

from __future__ import annotations

from pathlib import Path

from .base import Runtime, ShapeSession
from .registry import register_runtime


class RblnSession(ShapeSession):
    def open_shape(self, b, t):
        import rebel  # vendor SDK

        return rebel.Runtime(str(self.directory / f"model_{b}x{t}.rbln"))

    def run_shape(self, runtime, feeds):
        out = runtime.run(feeds["input_ids"], feeds["attention_mask"])
        return out[0] if isinstance(out, (list, tuple)) else out


@register_runtime
class RblnRuntime(Runtime):
    name = "rbln"
    sdk = "rebel"
    install_hint = "pip install rebel-compiler  (Rebellions SDK; needs an ATOM device and the vendor's package index)"
    compiles_from = ("torch",)
    max_buckets = 4  # one compile per shape
    devices = ("npu",)
    runs_graphs = False  # the SDK compiles torch modules; training steps are not wired to it
    trains = False
    distributions = ("rebel-compiler",)
    session_class = RblnSession
    description = "Rebellions ATOM NPU (vendor SDK, optional)"

    def versions(self):
        import rebel

        return {"rebel-compiler": getattr(rebel, "__version__", "unknown")}

    def precisions(self, device):
        return ("fp16",)  # the ATOM compiler lowers to fp16 (the field report: logits within ~4e-2)

    def compile(self, captured, spec, out: Path):
        self.require()
        import rebel

        out.mkdir(parents=True, exist_ok=True)
        for b, t in captured.shapes.shapes():
            compiled = rebel.compile_from_torch(
                captured.static, [("input_ids", [b, t], "int64"), ("attention_mask", [b, t], "int64")]
            )
            compiled.save(str(out / f"model_{b}x{t}.rbln"))
        return {"format": "rbln"}


