"""onnxruntime: one ONNX file (weights as external data) for every bucket; each compiled shape is a session
whose symbolic dims are pinned by free-dimension overrides, and all sessions share one copy of the weights
(SessionOptions.add_initializer)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from .base import Backend, CompileSpec, Session
from .registry import register_backend

PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider", "tensorrt": "TensorrtExecutionProvider"}


class OrtSession(Session):
    def __init__(self, directory: Path, manifest: dict, threads: int | None = None):
        import onnx
        import onnxruntime as ort
        from onnx import numpy_helper

        path = directory / "model.onnx"
        opts = manifest["backend"].get("options", {})
        threads = threads or opts.get("threads")
        provider = PROVIDERS[manifest["device"]]
        self.shapes = [tuple(s) for s in manifest["shapes"]]
        shared = []
        if len(self.shapes) > 1:
            # Load the weights once as OrtValues and hand the same buffers to every per-shape session.
            model = onnx.load(str(path), load_external_data=True)
            shared = [(t.name, ort.OrtValue.ortvalue_from_numpy(numpy_helper.to_array(t))) for t in model.graph.initializer]
            del model
        self._keep = shared  # OrtValues must outlive the sessions that borrow them
        self.sessions = {}
        for b, t in self.shapes:
            so = ort.SessionOptions()
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            so.add_free_dimension_override_by_name("batch", b)
            so.add_free_dimension_override_by_name("seq", t)
            if threads:
                so.intra_op_num_threads = int(threads)
            # No spin-waiting between calls: idle pool threads would otherwise burn the cores that the HTTP event
            # loop and tokenizer need between micro-batches (serve_load on 2 cores: 147 -> 245 requests/s at
            # concurrency 16).
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
            for name, value in shared:
                so.add_initializer(name, value)
            self.sessions[(b, t)] = ort.InferenceSession(str(path), so, providers=[provider])

    def run(self, feeds):
        shape = self.check_shape(feeds)
        return self.sessions[shape].run(None, feeds)[0].astype(np.float32, copy=False)


@register_backend
class OnnxRuntimeBackend(Backend):
    name = "onnxruntime"
    sdk = "onnxruntime"
    install_hint = "pip install onnxruntime  (GPU: onnxruntime-gpu)"
    capture_method = "onnx"
    description = "ONNX Runtime (CPU EP; CUDA / TensorRT EPs when present)"

    def versions(self):
        import onnxruntime as ort

        return {"onnxruntime": ort.__version__}

    def list_devices(self):
        import onnxruntime as ort

        have = set(ort.get_available_providers())
        return [d for d, p in PROVIDERS.items() if p in have]

    def precisions(self, device):
        # The CPU EP has no fp16/bf16 kernels for most ops; fp16 only where a GPU EP runs it. int8 is dynamic
        # quantisation (int8 weights, activations quantised per call), the CPU EP's fast path.
        return ("fp32", "int8") if device == "cpu" else ("fp32", "fp16")

    def compile(self, captured, spec: CompileSpec, out: Path):
        src = captured.onnx()
        out.mkdir(parents=True, exist_ok=True)
        if spec.precision == "int8":
            from onnxruntime.quantization import QuantType, quantize_dynamic

            quantize_dynamic(str(src), str(out / "model.onnx"), weight_type=QuantType.QInt8, use_external_data_format=True,
                             extra_options={"MatMulConstBOnly": True})
            return {"format": "onnx", "provider": PROVIDERS[spec.device], "quantization": "dynamic int8 (MatMul weights)"}
        if spec.precision == "fp16":
            import onnx
            from onnxruntime.transformers.float16 import convert_float_to_float16

            model = convert_float_to_float16(onnx.load(str(src)), keep_io_types=True)
            onnx.save(model, str(out / "model.onnx"), save_as_external_data=True, location="model.onnx.data")
        else:
            # Move, not copy or hard-link: no second copy of a 1.2 GB weight file on disk (and the onnx checker
            # refuses hard-linked external data). Later users of the capture follow the file to its new home.
            for f in list(src.parent.iterdir()):
                shutil.move(str(f), out / f.name)
            captured._onnx = out / "model.onnx"
        return {"format": "onnx", "provider": PROVIDERS[spec.device]}

    def load(self, directory: Path, manifest: dict) -> Session:
        self.require()
        return OrtSession(directory, manifest)
