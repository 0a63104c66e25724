"""onnxruntime: one ONNX file (weights as external data) for every bucket; each compiled shape is a session whose
symbolic dims are pinned by free-dimension overrides, and all sessions share one copy of the weights
(SessionOptions.add_initializer). Also runs any standard-ONNX graph (training steps, sampling, capture proof)
with IOBinding, so outputs land in the caller's buffers."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from ..spec import SMOOTH_QUANT_DEFAULT
from .base import Executor, Graph, Runtime, ShapeSession
from .registry import register_runtime

PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider", "tensorrt": "TensorrtExecutionProvider"}


def session_options(threads: int | None = None, dims: dict[str, int] | None = None, *, sequential: bool = False,
                    spinning: bool = False):
    """The one place ORT session options are set, for artifacts, step graphs and proofs alike."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3  # CastLike constant-folding notices are harmless and noisy
    for name, value in (dims or {}).items():
        so.add_free_dimension_override_by_name(name, int(value))
    if threads:
        so.intra_op_num_threads = int(threads)
        so.inter_op_num_threads = 1
    if sequential:
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if not spinning:
        # No spin-waiting between calls: idle pool threads would otherwise burn the cores that the HTTP event loop
        # and tokenizer need between micro-batches (serve_load on 2 cores: 147 -> 245 requests/s at concurrency 16).
        # Back-to-back graph calls (training steps) keep ORT's default spinning.
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return so


def disabled_optimizers(precision: str) -> list[str]:
    """ORT graph transformers to skip for an artifact of this precision.

    int8 (QDQ): with the dims pinned, ORT 1.32's MatMulAddFusion rewrites each 3-D MatMul + bias Add into
    Reshape + Gemm + Reshape *before* the QDQ fusions run, so those layers no longer match DequantizeLinear -> MatMul:
    they ran as float Gemms over weights dequantised on every call (the demo detector's int8 at 1 x 128: 40 ms
    instead of 12 ms, and logits 2e-2 from the int8 graph it claimed to be). Without it every MatMul fuses into
    MatMulIntegerToFloat, as with free dims. fp32 graphs keep it (the same speed either way, measured at 1 x 512)."""
    return ["MatMulAddFusion"] if precision == "int8" else []


class OrtSession(ShapeSession):
    def prepare(self):
        import onnx
        import onnxruntime as ort
        from onnx import numpy_helper

        self.path = self.directory / "model.onnx"
        self._keep = []  # OrtValues must outlive the sessions that borrow them
        if len(self.shapes) > 1:
            # Load the weights once as OrtValues and hand the same buffers to every per-shape session.
            model = onnx.load(str(self.path), load_external_data=True)
            self._keep = [(t.name, ort.OrtValue.ortvalue_from_numpy(numpy_helper.to_array(t)))
                          for t in model.graph.initializer]
            del model

    def open_shape(self, b, t):
        import onnxruntime as ort

        so = session_options(self.threads, {"batch": b, "seq": t})
        for name, value in self._keep:
            so.add_initializer(name, value)
        return ort.InferenceSession(str(self.path), so, providers=[PROVIDERS[self.manifest.device]],
                                    disabled_optimizers=disabled_optimizers(self.manifest.precision))

    def run_shape(self, session, feeds):
        return session.run(None, feeds)[0]


class OrtExecutor(Executor):
    def __init__(self, graph: Graph, threads: int | None, device: str = "cpu"):
        import onnxruntime as ort

        providers = [PROVIDERS[device]] + (["CPUExecutionProvider"] if device != "cpu" else [])
        self.session = ort.InferenceSession(str(graph.onnx), session_options(threads, graph.dims, sequential=True, spinning=True),
                                            providers=providers)
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]

    def run(self, feeds):
        return self.session.run(None, feeds)

    def run_into(self, inputs, outputs):
        b = self.session.io_binding()
        for name, a in zip(self.input_names, inputs):
            b.bind_input(name, "cpu", 0, a.dtype, list(a.shape), a.ctypes.data)
        for name, a in zip(self.output_names, outputs):  # ORT writes into our numpy buffers: no copy back
            b.bind_output(name, "cpu", 0, a.dtype, list(a.shape), a.ctypes.data)
        self.session.run_with_iobinding(b)


@register_runtime
class OnnxRuntime(Runtime):
    name = "onnxruntime"
    compact_tables = True
    measures_sensitivity = True
    sdk = "onnxruntime"
    install_hint = "pip install onnxruntime  (GPU: onnxruntime-gpu)"
    description = "ONNX Runtime (CPU EP; CUDA / TensorRT EPs when present)"
    compiles_from = ("onnx",)
    default_port = True
    default_train = True
    onnx_reference = True  # the ONNX reference executor: it proves every captured ONNX file
    quantizes_dynamic = True
    calibration_methods = ("minmax", "percentile", "entropy")
    smooth_quant = SMOOTH_QUANT_DEFAULT  # with minmax calibration, through NNCF (_recipe)
    distributions = ("onnx", "onnxscript", "onnxruntime")
    session_class = OrtSession
    executor_class = OrtExecutor

    def versions(self):
        import onnxruntime as ort

        return {"onnxruntime": ort.__version__}

    def list_devices(self):
        import onnxruntime as ort

        have = set(ort.get_available_providers())
        return [d for d, p in PROVIDERS.items() if p in have]

    def precisions(self, device):
        # The CPU EP has no fp16/bf16 kernels for most ops; fp16 only where a GPU EP runs it. int8: static QDQ
        # calibrated on the user's rows (default), or dynamic quantisation (`--quantization dynamic`).
        return ("fp32", "int8") if device == "cpu" else ("fp32", "fp16")

    def compile(self, captured, spec, out: Path):
        src = captured.onnx()
        out.mkdir(parents=True, exist_ok=True)
        if spec.precision == "int8":
            return {"format": "onnx", "provider": PROVIDERS[spec.device], **_int8(captured, spec, src, out)}
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
            captured.moved_onnx(out / "model.onnx")
        return {"format": "onnx", "provider": PROVIDERS[spec.device]}


def _int8(captured, spec, src: Path, out: Path) -> dict:
    if spec.options.get("quantization") == "dynamic":
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(str(src), str(out / "model.onnx"), weight_type=QuantType.QInt8, use_external_data_format=True,
                         extra_options={"MatMulConstBOnly": True})
        return {"quantization": "dynamic int8 (MatMul weights; activations quantised per call)"}
    from . import _quantize as quantize

    feeds = quantize.calibration_feeds(captured, spec)
    keep, by_default = quantize.resolve_keep(spec.options, quantize.node_groups(src), OnnxRuntime.default_keep)
    recipe = _recipe(spec.options)
    meta = recipe(src, out / "model.onnx", feeds, keep_fp32=keep)
    meta.update(calibration=spec.calibration_source, kept_by_default=by_default)
    if spec.options.get("sensitivity"):
        meta["sensitivity"] = _sensitivity(captured, src, feeds, recipe)
    return meta


def _recipe(options: dict):
    """The static quantiser: NNCF with SmoothQuant (the default, spec.SMOOTH_QUANT_DEFAULT), or ONNX Runtime's own
    QDQ quantiser for `--smooth-quant off` and the histogram calibrations (percentile, entropy), which NNCF lacks."""
    import functools

    from . import _quantize as quantize

    method = options.get("calibration_method", "minmax")
    alpha = options.get("smooth_quant")
    alpha = OnnxRuntime.smooth_quant if alpha is None and method == "minmax" else alpha
    if alpha is None or alpha < 0:
        return functools.partial(quantize.quantize_qdq, method=method)
    return functools.partial(quantize.quantize_nncf, alpha=alpha)


def _sensitivity(captured, src: Path, feeds: list[dict], recipe) -> dict:
    """Per group: quantise that group alone (everything else float) with the artifact's own recipe and compare to the
    float graph on the calibration rows. The groups that move logits most are the ones `--keep-fp32` should name."""
    import tempfile

    import onnxruntime as ort

    from . import _quantize as quantize

    task = captured.task

    def outputs(path):
        s = ort.InferenceSession(str(path), session_options(), providers=["CPUExecutionProvider"],
                                 disabled_optimizers=disabled_optimizers("int8"))
        return np.concatenate([s.run(None, f)[0] for f in feeds])

    ref = outputs(src)
    res = {}
    with tempfile.TemporaryDirectory(prefix="npuport-sens-") as tmp:
        for group in quantize.node_groups(src):
            d = Path(tmp) / group
            d.mkdir()
            recipe(src, d / "model.onnx", feeds, only=group)
            agree, dl = quantize.agreement(ref, outputs(d / "model.onnx"), task)
            res[group] = {"max_abs_logit_diff": dl, "decision_agreement": agree}
    return res


def op_profile(path: Path, feeds: dict, threads: int, runs: int = 3) -> dict:
    """Share of kernel time per op type over `runs` calls of one graph (ONNX Runtime's own profiler)."""
    import collections
    import json

    import onnxruntime as ort

    so = session_options(threads, sequential=True, spinning=True)
    so.enable_profiling = True
    so.profile_file_prefix = str(path.parent / "ortprof")
    s = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    for _ in range(runs):
        s.run(None, feeds)
    events = json.loads(Path(s.end_profiling()).read_text())
    c: collections.Counter = collections.Counter()
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            c[e["args"]["op_name"]] += e["dur"]
    total = sum(c.values())
    return {k: round(v / total, 4) for k, v in c.most_common(12)}
