"""openvino: one IR (model.xml + model.bin) converted from the adapted PyTorch module, reshaped per bucket at
load. Weights are saved uncompressed for fp32 (ov.save_model compresses to fp16 by default: that would not be
an fp32 artifact). Also runs standard-ONNX graphs (training steps) with output tensors bound to the caller's
buffers."""

from __future__ import annotations

import contextlib
import ctypes
import io
import warnings
from pathlib import Path

import numpy as np

from .base import Executor, Graph, Runtime, ShapeSession
from .registry import register_runtime

# int8 IRs carry their FakeQuantize ops; what is not quantised runs in f32
OV_PRECISION = {"fp32": "f32", "fp16": "f16", "bf16": "bf16", "int8": "f32"}


class _Stack(ctypes.Structure):
    _fields_ = [("ss_sp", ctypes.c_void_p), ("ss_flags", ctypes.c_int), ("ss_size", ctypes.c_size_t)]


@contextlib.contextmanager
def signal_stack_kept():
    """Put the calling thread's alternate signal stack back after OpenVINO compiles.

    OpenVINO's CPU plugin (2026.4, measured) installs an 11,568-byte alternate signal stack (sigaltstack) on the
    thread that calls compile_model, in memory that goes away with the compiled model. Python runs its signal
    handlers on the alternate stack, so after that model is freed, a Ctrl-C (or any handled signal) segfaults the
    process instead of raising KeyboardInterrupt: CI's Ctrl-C test died with exit 139 after an OpenVINO training
    test. Linux only (elsewhere a no-op)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        before = _Stack()
        ok = libc.sigaltstack(None, ctypes.byref(before)) == 0
    except (OSError, AttributeError):
        ok = False
    try:
        yield
    finally:
        if ok:
            libc.sigaltstack(ctypes.byref(before), None)


# int8 IRs: the per-token groups' MatMuls (int8 weights, float input) quantise their input at run time, per token in
# groups of this many channels (the CPU plugin's default, pinned so an artifact does not change with OpenVINO's)
DYNAMIC_GROUP = 32


def compile_config(precision: str = "fp32", threads: int | None = None, device: str = "cpu") -> dict:
    """The one place OpenVINO compile options are set. fp32 is pinned: the CPU plugin would otherwise pick bf16
    on AVX512-BF16 machines."""
    cfg = {"INFERENCE_PRECISION_HINT": OV_PRECISION[precision], "PERFORMANCE_HINT": "LATENCY"}
    if precision == "int8" and device.lower() == "cpu":
        cfg["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = DYNAMIC_GROUP
    if threads:
        cfg["INFERENCE_NUM_THREADS"] = int(threads)
    return cfg


class OvSession(ShapeSession):
    def prepare(self):
        import openvino as ov

        self.core = ov.Core()
        self.model = self.core.read_model(str(self.directory / "model.xml"))
        self.config = compile_config(self.manifest.precision, self.threads, self.manifest.device)

    def open_shape(self, b, t):
        m = self.model.clone() if len(self.shapes) > 1 else self.model
        m.reshape({m.inputs[0]: [b, t], m.inputs[1]: [b, t]})
        with signal_stack_kept():
            cm = self.core.compile_model(m, self.manifest.device.upper(), self.config)
        hint = cm.get_property("INFERENCE_PRECISION_HINT")  # what the plugin really runs, not what we asked
        self.execution_precision = hint.to_string() if hasattr(hint, "to_string") else str(hint)
        return cm, cm.create_infer_request()  # the request needs its compiled model alive

    def run_shape(self, program, feeds):
        req = program[1]
        req.infer([feeds["input_ids"], feeds["attention_mask"]], share_inputs=True)
        return np.array(req.get_output_tensor(0).data)  # a copy: the request reuses its output buffer


class OvExecutor(Executor):
    def __init__(self, graph: Graph, threads: int | None, device: str = "cpu"):
        import openvino as ov

        core = ov.Core()
        model = core.read_model(str(graph.onnx))
        # symbolic dims (graph.dims) stay dynamic: OpenVINO's CPU plugin infers them per call
        with signal_stack_kept():
            cm = core.compile_model(model, device.upper(), compile_config(graph.precision, threads, device))
        hint = cm.get_property("INFERENCE_PRECISION_HINT")  # what the plugin really runs, not what we asked
        self.execution_precision = hint.to_string() if hasattr(hint, "to_string") else str(hint)
        self.request = cm.create_infer_request()
        self.input_names = [i.any_name for i in model.inputs]
        self.output_names = [o.any_name for o in model.outputs]
        self._ov = ov

    def run(self, feeds):
        res = self.request.infer([feeds[n] for n in self.input_names])
        return [np.array(res[i]) for i in range(len(self.output_names))]

    def run_into(self, inputs, outputs):
        ov, req = self._ov, self.request
        for i, a in enumerate(inputs):
            req.set_input_tensor(i, ov.Tensor(a, shared_memory=True))
        for i, a in enumerate(outputs):  # OpenVINO writes into our numpy buffers
            req.set_output_tensor(i, ov.Tensor(a, shared_memory=True))
        req.infer()

    def close(self):
        # The request holds tensors that share memory with the caller's buffers: drop it first, deterministically.
        self.request = None


@register_runtime
class OpenVinoRuntime(Runtime):
    name = "openvino"
    compact_tables = True
    measures_sensitivity = True
    sdk = "openvino"
    install_hint = "pip install openvino"
    description = "OpenVINO (CPU; GPU/NPU devices when present)"
    compiles_from = ("torch", "onnx")
    default_port = True
    # bf16: the gradient graph at OpenVINO's bf16 hint (native on AVX512-BF16/AMX; elsewhere the plugin stays in f32
    # and the runner records that), the AdamW update graph pinned to f32
    train_precisions = ("fp32", "bf16")
    distributions = ("openvino", "nncf")
    # SmoothQuant strength: the paper's 0.5, as ONNX Runtime's. On the demo's unseen rows NNCF's own 0.95 for
    # transformers flipped as many decisions, with more logit drift (the P11 table has both): one recipe, both runtimes
    smooth_quant = 0.5
    # The static int8 default (p11_int8.py, the demo detector's unseen rows): the head in float, every FFN
    # down-projection quantised per token. Their inputs carry the outlier channels that flip decisions at per-tensor
    # int8 (spec.DEFAULT_KEEP); quantised per token in 32-channel groups (the CPU plugin's dynamic quantisation over
    # int8 weights) they hold the decisions that float held on ONNX Runtime, and run faster than in float
    # (mmBERT-small 1 x 512: the P11 speed table). With them in float instead, OpenVINO flipped 5 of 660 unseen
    # family rows (the P11 table's "default before" row).
    default_keep = ("head",)
    quantizes_per_token = True
    default_per_token = ("ffn_out",)
    session_class = OvSession
    executor_class = OvExecutor

    def versions(self):
        import openvino as ov

        return {"openvino": ov.get_version()}

    def list_devices(self):
        import openvino as ov

        return [d.lower() for d in ov.Core().available_devices]

    def precisions(self, device):
        # A hint: on a CPU without native bf16/fp16 OpenVINO silently stays in f32; the manifest records what ran.
        # int8: NNCF post-training quantisation calibrated on the user's rows (`pip install nncf`).
        return ("fp32", "bf16", "fp16", "int8")

    def compile(self, captured, spec, out: Path):
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
        meta = {"format": "openvino-ir", "weights": "f16" if spec.precision == "fp16" else "f32"}
        if spec.precision == "int8":
            model, q = _nncf_int8(model, captured, spec)
            meta.update(weights="int8", **q)
        ov.save_model(model, str(out / "model.xml"), compress_to_fp16=(spec.precision == "fp16"))
        return meta


# What `--keep-fp32` groups mean in an IR converted from the torch module (node names carry the module path)
_OV_GROUPS = {"embeddings": [".*embeddings.*"], "head": [".*detector[./]head.*", ".*classifier.*", ".*pooler.*"],
              "attention": [".*scaled_dot_product_attention.*"],
              # the FFN down-projection of every family (npuport/static/quantize.py FFN_OUT says why and which)
              "ffn_out": [r".*(layers?[./]\d+[./]output[./]dense|mlp[./](Wo|down_proj|c_proj|dense_4h_to_h)|ffn[./]lin2"
                          r"|[./]fc2)([./].*)?"]}


def _group_patterns(group: str) -> list[str]:
    if group.startswith("layer."):
        return [f".*layers?[./]{group.split('.')[1]}[./].*"]
    return _OV_GROUPS[group]


def _ov_groups(model) -> list[str]:
    """The quantisation groups this IR has: embeddings, layer.N for every layer index in its node names, attention,
    ffn_out where its MatMuls are named so, head (the same names ONNX Runtime's groups use)."""
    import re

    names = [op.get_friendly_name() for op in model.get_ops()]
    layers = sorted({int(m.group(1)) for n in names for m in [re.search(r"layers?[./](\d+)[./]", n)] if m})
    ffn = re.compile(_OV_GROUPS["ffn_out"][0])
    has_ffn = any(ffn.fullmatch(n) for op, n in zip(model.get_ops(), names) if op.get_type_name() == "MatMul")
    return ["embeddings", *(f"layer.{i}" for i in layers), "attention", *(["ffn_out"] if has_ffn else []), "head"]


def _nncf_int8(model, captured, spec):
    """NNCF post-training quantisation (transformer preset: softmax and norms stay float, MatMuls go int8) calibrated
    on the same rows as every other runtime's int8."""
    from ..errors import BackendUnavailable
    from ._quantize import calibration_feeds

    try:
        import nncf
    except ImportError:
        raise BackendUnavailable("openvino int8 needs NNCF: pip install nncf") from None
    import logging

    from ._quantize import resolve_keep, resolve_per_token

    groups = _ov_groups(model)
    keep, by_default = resolve_keep(spec.options, dict.fromkeys(groups), OpenVinoRuntime.default_keep)
    per_token, pt_default = resolve_per_token(spec.options, dict.fromkeys(groups), keep,
                                              OpenVinoRuntime.default_per_token)
    feeds = calibration_feeds(captured, spec)
    nncf.set_log_level(logging.ERROR)  # its notices would break npuport's own status line
    alpha = spec.options.get("smooth_quant")
    alpha = OpenVinoRuntime.smooth_quant if alpha is None else alpha
    sens = _nncf_sensitivity(nncf, model, feeds, groups, captured, alpha) if spec.options.get("sensitivity") else None
    q = _nncf_quantize(nncf, model, feeds, [p for g in (*keep, *per_token) for p in _group_patterns(g)], alpha)
    if per_token:
        q = _int8_weights(nncf, q, [p for g in per_token for p in _group_patterns(g)])
    sq = f"SmoothQuant alpha {alpha:g}" if alpha >= 0 else "no SmoothQuant"
    how = (f"; {', '.join(per_token)}: int8 weights per channel, input quantised per token in {DYNAMIC_GROUP}-channel "
           "groups at run time (the CPU plugin's dynamic quantisation)" if per_token else "")
    return q, {"quantization": f"NNCF post-training int8 (transformer model type, mixed preset, {sq}, {len(feeds)} "
                               f"calibration batches){how}", "calibration": spec.calibration_source,
               "smooth_quant": alpha, "kept_fp32": list(keep), "kept_by_default": by_default,
               "per_token": per_token, "per_token_by_default": pt_default, "nncf": nncf.__version__,
               **({"sensitivity": sens} if sens else {})}


def _int8_weights(nncf, model, patterns: list[str]):
    """The MatMuls named by `patterns` (left in float by the static pass) get int8 weights, symmetric per output
    channel (NNCF's weight compression, data-free): OpenVINO's CPU plugin then quantises their input per token at run
    time (DYNAMIC_QUANTIZATION_GROUP_SIZE). Every other weight is left as the static pass made it."""
    import re

    mine = re.compile("|".join(f"(?:{p})" for p in patterns))
    others = [op.get_friendly_name() for op in model.get_ops() if op.get_type_name() in ("MatMul", "Gather")
              and not mine.fullmatch(op.get_friendly_name())]
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):  # its progress bar: nowhere
        warnings.simplefilter("ignore")
        return nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT8_SYM,
                                     ignored_scope=nncf.IgnoredScope(names=others, validate=False))


def _nncf_quantize(nncf, model, feeds: list[dict], ignored: list[str], alpha: float = -1):
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, AdvancedSmoothQuantParameters

    names = [i.any_name for i in model.inputs]
    data = nncf.Dataset(feeds, lambda f: {n: f[n] for n in names})
    preset = nncf.QuantizationPreset.MIXED  # symmetric weights, asymmetric activations (the transformer default)
    # NNCF compiles the model to calibrate it (signal stack); its rich progress bars write to stdout whatever its log
    # level, through npuport's own status line: they go nowhere
    with warnings.catch_warnings(), signal_stack_kept(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        return nncf.quantize(model.clone(), data, preset=preset, model_type=nncf.ModelType.TRANSFORMER,
                             subset_size=len(feeds), advanced_parameters=AdvancedQuantizationParameters(
                                 smooth_quant_alphas=AdvancedSmoothQuantParameters(matmul=alpha)),
                             ignored_scope=nncf.IgnoredScope(patterns=ignored, validate=False) if ignored else None)


def _nncf_sensitivity(nncf, model, feeds: list[dict], groups: list[str], captured, alpha: float) -> dict:
    """Per group: NNCF quantises that group alone (every other group in its ignored scope) and the result is compared
    with the float IR on the calibration rows, as ONNX Runtime's runtime does with its QDQ graphs."""
    import openvino as ov

    from ._quantize import agreement

    core, task = ov.Core(), captured.task

    def outputs(m):
        with signal_stack_kept():
            cm = core.compile_model(m, "CPU", compile_config("fp32"))
        return np.concatenate([np.array(cm(f)[0]) for f in feeds])

    ref, res = outputs(model), {}
    for g in groups:
        others = [p for o in groups if o != g for p in _group_patterns(o)]
        agree, dl = agreement(ref, outputs(_nncf_quantize(nncf, model, feeds, others, alpha)), task)
        res[g] = {"max_abs_logit_diff": dl, "decision_agreement": agree}
    return res

