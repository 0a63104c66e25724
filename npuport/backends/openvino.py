"""openvino: one IR (model.xml + model.bin) converted from the adapted PyTorch module, reshaped per bucket at
load. Weights are saved uncompressed for fp32 (ov.save_model compresses to fp16 by default: that would not be
an fp32 artifact)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from .base import Backend, CompileSpec, Session
from .registry import register_backend

OV_PRECISION = {"fp32": "f32", "fp16": "f16", "bf16": "bf16"}


class OvSession(Session):
    def __init__(self, directory: Path, manifest: dict, threads: int | None = None):
        import openvino as ov

        core = ov.Core()
        model = core.read_model(str(directory / "model.xml"))
        opts = manifest["backend"].get("options", {})
        threads = threads or opts.get("threads")
        config = {"INFERENCE_PRECISION_HINT": OV_PRECISION[manifest["precision"]], "PERFORMANCE_HINT": "LATENCY"}
        if threads:
            config["INFERENCE_NUM_THREADS"] = int(threads)
        device = manifest["device"].upper()
        self.shapes = [tuple(s) for s in manifest["shapes"]]
        self.compiled, self.requests = {}, {}
        self.execution_precision = None
        for b, t in self.shapes:
            m = model.clone() if len(self.shapes) > 1 else model
            m.reshape({m.inputs[0]: [b, t], m.inputs[1]: [b, t]})
            cm = core.compile_model(m, device, config)
            self.compiled[(b, t)] = cm
            self.requests[(b, t)] = cm.create_infer_request()
            hint = cm.get_property("INFERENCE_PRECISION_HINT")  # what the plugin really runs, not what we asked
            self.execution_precision = hint.to_string() if hasattr(hint, "to_string") else str(hint)

    def run(self, feeds):
        shape = self.check_shape(feeds)
        req = self.requests[shape]
        req.infer([feeds["input_ids"], feeds["attention_mask"]], share_inputs=True)
        return np.array(req.get_output_tensor(0).data, dtype=np.float32)


@register_backend
class OpenVinoBackend(Backend):
    name = "openvino"
    sdk = "openvino"
    install_hint = "pip install openvino"
    capture_method = "torch"
    description = "OpenVINO (CPU; GPU/NPU devices when present)"

    def versions(self):
        import openvino as ov

        return {"openvino": ov.get_version()}

    def list_devices(self):
        import openvino as ov

        return [d.lower() for d in ov.Core().available_devices]

    def precisions(self, device):
        # A hint: on a CPU without native bf16/fp16 OpenVINO silently stays in f32; the manifest records what ran.
        return ("fp32", "bf16", "fp16")

    def compile(self, captured, spec: CompileSpec, out: Path):
        import openvino as ov

        out.mkdir(parents=True, exist_ok=True)
        shapes = captured.shapes
        dims = [
            (-1 if len(shapes.batch_sizes) > 1 else shapes.batch_sizes[0]),
            (-1 if len(shapes.buckets) > 1 else shapes.buckets[0]),
        ]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = ov.convert_model(
                captured.static, example_input=captured.example(),
                input=[("input_ids", dims, ov.Type.i64), ("attention_mask", dims, ov.Type.i64)],
            )
        ov.save_model(model, str(out / "model.xml"), compress_to_fp16=(spec.precision == "fp16"))
        return {"format": "openvino-ir", "weights": "f16" if spec.precision == "fp16" else "f32"}

    def load(self, directory: Path, manifest: dict) -> Session:
        self.require()
        return OvSession(directory, manifest)
