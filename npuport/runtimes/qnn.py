"""qnn: Qualcomm Hexagon NPU (HTP) through ONNX Runtime's QNN execution provider (`pip install "npuport[qnn]"`,
the onnxruntime-qnn plugin wheel, which carries the QNN SDK libraries).

Compile = the captured ONNX graph, its dims pinned per shape, handed to the QNN EP, which partitions it, compiles the
NPU part for the HTP and writes an offline *context binary* (`qnn_BxT.onnx` holding `EPContext` nodes +
`qnn_BxT_qnn.bin`). Loading a context binary skips compilation. What executes: on an x86 host the libQnnHtp backend
is Qualcomm's HTP *simulator* (bit-accurate, slow: a functional check, not a speed figure); on a Snapdragon device
the same artifact runs on the chip. The manifest records which ops the EP kept on the host (CPU fallback).
"""

from __future__ import annotations

import platform
from pathlib import Path

from ..spec import EVERY_GROUP
from .base import Runtime, ShapeSession
from .registry import register_runtime

EP = "QNNExecutionProvider"
# Device options of the HTP backend. soc_model / htp_arch name the target chip (57 / v75: Snapdragon 8 Gen 3); fp16
# on the HTP needs them. On a device, set them to its SoC (Qualcomm's QNN SDK docs list the ids).
HTP_OPTIONS = {"soc_model": "57", "htp_arch": "75"}
_registered = False
# A QDQ graph ends in a DequantizeLinear of the logits, which the EP leaves to the host: an edge op, not a fallback
IO_OPS = {"QuantizeLinear", "DequantizeLinear"}


def _devices():
    """Register the plugin EP once per process and return its devices."""
    global _registered
    import onnxruntime as ort
    import onnxruntime_qnn

    if not _registered:
        try:
            ort.register_execution_provider_library(EP, onnxruntime_qnn.get_library_path())
        except Exception as e:  # noqa: BLE001 - already registered by another user of this process
            if "already" not in str(e).lower():
                raise
        _registered = True
    return [d for d in ort.get_ep_devices() if d.ep_name == EP]


def _options(precision: str, dims: dict | None = None, context: Path | None = None):
    import onnxruntime as ort
    import onnxruntime_qnn

    so = ort.SessionOptions()
    so.log_severity_level = 3
    for name, value in (dims or {}).items():
        so.add_free_dimension_override_by_name(name, int(value))
    if context is not None:
        so.add_session_config_entry("ep.context_enable", "1")
        so.add_session_config_entry("ep.context_file_path", str(context))
    opts = {"backend_path": onnxruntime_qnn.get_qnn_htp_path(), **HTP_OPTIONS}
    # fp16 runs the float graph in the HTP's fp16 units; int8 / int16 artifacts are QDQ graphs the HTP runs as is
    if precision == "fp16":
        opts["enable_htp_fp16_precision"] = "1"
    so.add_provider_for_devices(_devices(), opts)
    return so


def host_ops(context_onnx: Path) -> list[str]:
    """Op types the QNN EP left to the host CPU (everything but EPContext nodes)."""
    import onnx

    model = onnx.load(str(context_onnx), load_external_data=False)
    return sorted({n.op_type for n in model.graph.node if n.op_type != "EPContext"})


def on_simulator() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64")


class QnnSession(ShapeSession):
    def open_shape(self, b, t):
        import onnxruntime as ort

        return ort.InferenceSession(str(self.directory / f"qnn_{b}x{t}.onnx"), _options(self.manifest.precision))

    def run_shape(self, session, feeds):
        return session.run(None, feeds)[0]


@register_runtime
class QnnRuntime(Runtime):
    name = "qnn"
    sdk = "onnxruntime_qnn"
    install_hint = 'pip install "npuport[qnn]"  (onnxruntime-qnn: QNN EP + HTP libraries, x86 simulator included)'
    description = "Qualcomm Hexagon NPU (HTP) via onnxruntime-qnn; x86 hosts run Qualcomm's HTP simulator"
    compiles_from = ("onnx",)
    max_buckets = 4  # one HTP context binary compile per shape
    devices = ("htp",)
    runs_graphs = False
    trains = True  # mixed precision: fp16 gradient graph on the HTP, fp32 AdamW on the host (train/mixed.py)
    train_precisions = ("fp16",)
    step_runner = "mixed"
    partitions = True
    measures_sensitivity = True  # on the HTP simulator itself, per group (_sensitivity)
    mixes_int16 = True
    # Every activation at 16 bits (w8a16) but the tensors that carry the vocabulary table's type
    # (`table_activations`: at 16 bits the table doubles; int16 everywhere is 410 MB of context against 229).
    # Measured on the HTP simulator (benchmarks/npu_verify.py, the me5-small demo detector, calibrated on the whole
    # validation split, 300 rows of each unseen split; its table holds the earlier defaults beside this one):
    # LayerNorm (the residual stream's outlier channels) and the FFN down-projection were the worst groups at 8 bits
    # and raised first; with the MatMul weights per output channel (below) the remaining flips came from 8-bit
    # activations elsewhere. The role groups (embeddings, layernorm, attention, gelu, ffn_out, head) at 16 bits still
    # left each layer's other tensors at 8 (the Q/K/V/O projections' inputs and outputs: they belong to layer.N
    # only) and the pooling's sums (in no group): 99.33 % of the family rows against 100 % with every activation
    # raised, max |Δlogit| 0.66 -> 0.40, context +1 % (the table's last two qnn rows).
    default_int16 = EVERY_GROUP
    distributions = ("onnxruntime-qnn",)
    # The HTP computes every op in fp16, accumulations and normalisations included (a GPU's fp16 accumulates in fp32):
    # measured max |Δlogit| 8.5e-2 on the demo detector (logits of magnitude ~5-10), |Δprob| 1.7e-2, decisions 100%
    tolerances = {"fp16": {"logit": 1.5e-1, "prob": 3e-2, "agreement": 0.99}}
    session_class = QnnSession

    @property
    def executes(self) -> str:  # type: ignore[override]
        return "simulator" if on_simulator() else "executes"

    def versions(self):
        from importlib.metadata import version

        import onnxruntime as ort

        return {"onnxruntime": ort.__version__, "onnxruntime-qnn": version("onnxruntime-qnn")}

    def precisions(self, device):
        # fp16: the HTP's float path. int8 / int16: QDQ graphs (8-bit weights, 8- or 16-bit activations) whose
        # activation ranges are calibrated on the user's rows; the HTP's integer units run them.
        return ("fp16", "int8", "int16")

    def compile(self, captured, spec, out: Path):
        import onnxruntime as ort

        src = captured.onnx()
        out.mkdir(parents=True, exist_ok=True)
        quant = {}
        if spec.precision in ("int8", "int16"):
            src, quant = _quantize(src, captured, spec)
        fallback = {}
        for b, t in spec.shapes.shapes():
            ctx = out / f"qnn_{b}x{t}.onnx"
            ort.InferenceSession(str(src), _options(spec.precision, {"batch": b, "seq": t}, context=ctx))  # writes ctx
            fallback[f"{b}x{t}"] = host_ops(ctx)
        context_mb = sum(f.stat().st_size for f in out.glob("qnn_*")) / 2**20
        host = sorted({op for v in fallback.values() for op in v} - IO_OPS)
        return {"format": "qnn-context-binary", "backend": "HTP", "options": HTP_OPTIONS,
                "executes_on": "HTP simulator (x86)" if on_simulator() else "HTP",
                "host_ops": fallback, "whole_graph_on_npu": all(set(v) <= IO_OPS for v in fallback.values()),
                # what a recipe costs on this target (recorded per --keep-fp32 auto round): the context binaries'
                # size (weights + the HTP's compiled graph) and the compute ops left to the host CPU
                "cost": {"context_mb": round(context_mb, 2), "host_ops": host}, **quant}


    def open_step_graph(self, path: Path):
        """Training: the fp16 gradient graph (scaled loss) compiled for the HTP once (the AdamW update runs in fp32
        on the host, train/mixed.py) -> (its session, the op types left on the host)."""
        import onnxruntime as ort

        self.require()
        ctx = path.with_name(path.stem + "_ctx.onnx")
        for stale in (ctx, ctx.with_name(ctx.stem + "_qnn.bin")):  # this graph was just re-exported: recompile
            stale.unlink(missing_ok=True)
        ort.InferenceSession(str(path), _options("fp16", context=ctx))  # compile once, keep the context binary
        return ort.InferenceSession(str(ctx), _options("fp16")), host_ops(ctx)

    def preflight(self, captured, spec, work: Path):
        """Compile each shape for the HTP (seconds: the QNN EP partitions and builds the context) and list which
        op types stayed on the host. What the EP rejects falls back to ONNX Runtime's CPU kernels."""
        import collections

        import onnx
        import onnxruntime as ort

        src = captured.onnx()
        graph_ops = collections.Counter(n.op_type for n in onnx.load(str(src), load_external_data=False).graph.node)
        per_shape = {}
        for b, t in spec.shapes.shapes():
            ctx = work / f"qnn_{b}x{t}.onnx"
            ort.InferenceSession(str(src), _options("fp16", {"batch": b, "seq": t}, context=ctx))
            host = host_ops(ctx)
            per_shape[f"{b}x{t}"] = host
        host = sorted({op for v in per_shape.values() for op in v})
        return {"verdict": "whole graph on the HTP" if not host else f"partial: {', '.join(host)} on the host CPU",
                "npu_ops": {op: c for op, c in sorted(graph_ops.items()) if op not in host},
                "host_ops": {op: graph_ops.get(op, 0) for op in host}, "rejected": [], "per_shape": per_shape}


SENSITIVITY_ROWS = 16  # calibration rows each group's sensitivity run takes through the HTP simulator


def _prepared(src: Path, captured, spec) -> tuple[Path, list[dict], dict[str, list[str]]]:
    """Qualcomm's preprocessing (LayerNorm / GELU fusion), the calibration feeds and the graph's groups."""
    from onnxruntime.quantization.execution_providers.qnn import qnn_preprocess_model

    from ._quantize import calibration_feeds, npu_groups

    work = captured.workdir / "qnn_pre"
    work.mkdir(parents=True, exist_ok=True)
    pre = work / "pre.onnx"
    if not pre.exists() and not qnn_preprocess_model(str(src), str(pre)):
        pre = src  # nothing to fuse
    return pre, calibration_feeds(captured, spec), npu_groups(pre)


def _quantize_mixed(pre: Path, dst: Path, feeds: list[dict], groups: dict, *, base: str, other: tuple[str, ...],
                    host: tuple[str, ...] = (), narrow_tables: bool = True):
    """QDQ for the HTP: 8-bit weights (MatMul's per output channel); activations `base` bits ("8" or "16"), the
    groups in `other` at the other width. ORT's QNN config inserts the conversions between 8- and 16-bit tensors
    (add_qtype_converts). `host`: groups left in float, which the HTP (integer graph, no fp16 here) leaves to the
    host CPU. `narrow_tables`: the tensors that carry the vocabulary table's type stay 8-bit (int8; --precision
    int16 widens them too). Returns (the nodes kept in float, the 16-bit tensors' neighbours left 8-bit because
    they carry the vocabulary table's type)."""
    from onnxruntime.quantization import QuantType, quantize
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config

    from ._quantize import (
        CalibrationReader,
        activation_tensors,
        attention_mask_nodes,
        matmul_weights,
        table_activations,
    )

    act, flip = ((QuantType.QUInt16, QuantType.QUInt8) if base == "16" else (QuantType.QUInt8, QuantType.QUInt16))
    keep = attention_mask_nodes(pre) + [n for g in host for n in groups[g]]
    nodes = [n for g in other for n in groups[g]]
    # the tensors that carry the vocabulary's type stay 8-bit (at 16 bits the table doubles; the 4-bit codes
    # me5-small ships are exact at 8 bits anyway); --precision int16 raises them too
    tables = table_activations(pre) if narrow_tables else set()
    tensors = activation_tensors(pre, nodes)
    if base == "16" and tables:
        # a 16-bit graph but for the table's tensors, built as an 8-bit graph with every other activation raised:
        # in a 16-bit graph ORT's QNN config spreads an 8-bit override to the tensors computed from it
        act, flip = QuantType.QUInt8, QuantType.QUInt16
        low = tables.union(tensors)
        overrides = {t: [{"quant_type": flip}] for t in activation_tensors(pre, None) if t not in low}
        narrowed = tables
    else:
        overrides = {t: [{"quant_type": flip}] for t in tensors if t not in tables}
        narrowed = tables.intersection(tensors)
    # MatMul weights per output channel (int8, symmetric: what the HTP takes per channel). ORT's QNN config still
    # forces them per tensor ("QNN does not support per-channel MatMul"), which onnxruntime-qnn no longer requires:
    # the HTP runs a per-channel DQ -> MatMul inside an integer QDQ group (onnxruntime-qnn#650). One scale per
    # [K, N] matrix was the detector's largest error: with float activations and every other tensor exact, 8-bit
    # per-tensor MatMul weights alone flipped 36 of 660 held-out-family decisions, per-channel ones none
    # (benchmarks/qnn_weights.py).
    overrides.update({w: [{"quant_type": QuantType.QInt8, "symmetric": True, "axis": 1}] for w in matmul_weights(pre)})
    config = get_qnn_qdq_config(str(pre), CalibrationReader(feeds), activation_type=act, weight_type=QuantType.QUInt8,
                                nodes_to_exclude=keep, init_overrides=overrides or None)
    quantize(str(pre), str(dst), config)
    return keep, sorted(narrowed)


def _quantize(src: Path, captured, spec) -> tuple[Path, dict]:
    """The captured graph as QDQ for the HTP: Qualcomm's preprocessing, then static quantisation calibrated on
    the user's rows (MinMax, per-tensor asymmetric activations, 8-bit weights) with ONNX Runtime on the CPU. int8:
    8-bit activations except the groups raised to 16-bit (`--int16`, or the default recipe); int16: all 16-bit."""
    from ._quantize import check_keep, raised_groups

    pre, feeds, groups = _prepared(src, captured, spec)
    raised, by_default = raised_groups(spec, groups, QnnRuntime.default_int16)
    host = tuple(spec.options.get("keep_fp32") or ())  # named only: spec.DEFAULT_KEEP is for CPU runtimes
    check_keep(host, groups)
    work = captured.workdir / f"qnn_{spec.precision}"
    work.mkdir(parents=True, exist_ok=True)
    qdq = work / "model.onnx"
    for f in work.glob("model.onnx*"):  # --keep-fp32 auto quantises again with another recipe
        f.unlink()
    # every group raised: a 16-bit graph, so that tensors in no group (a pooling's sums) are 16-bit as well
    every = spec.precision == "int8" and bool(groups) and set(groups) <= set(raised)
    base = "16" if spec.precision == "int16" or every else "8"
    keep, tables = _quantize_mixed(pre, qdq, feeds, groups, base=base, other=() if base == "16" else tuple(raised),
                                   host=host, narrow_tables=spec.precision == "int8")
    act = ("QUInt16" if spec.precision == "int16" else "QUInt16 in every group" if every
           else "QUInt8" + (f", QUInt16 in {', '.join(raised)}" if raised else ""))
    if tables:
        act += " (the vocabulary table's tensors at QUInt8)"
    meta = {"quantization": f"QDQ static: activations {act}, MatMul weights QInt8 per output channel, other weights "
                            f"QUInt8 (MinMax calibration); "
                            f"{len(keep)} nodes kept in float (the attention mask{', ' + ', '.join(host) if host else ''})",
            "kept_fp32": list(host), "matmul_weights": "int8 per output channel",
            "calibration": spec.calibration_source, "calibration_batches": len(feeds),
            "int16": raised if spec.precision == "int8" else ["all"], "int16_by_default": by_default,
            "int16_every_group": every,
            **({"int8_table_tensors": tables} if tables else {})}
    if spec.options.get("sensitivity") and spec.precision == "int8":
        meta["sensitivity"] = _sensitivity(captured, spec, pre, feeds, groups)
    return qdq, meta


def _sensitivity(captured, spec, pre: Path, feeds: list[dict], groups: dict) -> dict:
    """Per group, judged on the HTP simulator itself: every activation at 16 bits except this group's at 8, against
    the float graph, on up to SENSITIVITY_ROWS calibration rows at the smallest shape. The groups that lose most
    decisions (then move logits most) alone at 8-bit are the ones to raise first (`--keep-fp32 auto`)."""
    import tempfile

    import numpy as np
    import onnxruntime as ort

    from ._quantize import agreement

    b, t = spec.shapes.shapes()[0]
    rows = [f for f in feeds if f["input_ids"].shape == (b, t)][:SENSITIVITY_ROWS]
    ref = np.concatenate([ort.InferenceSession(str(pre), providers=["CPUExecutionProvider"]).run(None, f)[0]
                          for f in rows])
    res = {}
    names = [g for g in groups if not g.startswith("layer.")]  # roles, not places: a handful of simulator runs
    with tempfile.TemporaryDirectory(prefix="npuport-qnn-sens-", dir=captured.workdir) as tmp:
        for g in names:
            d = Path(tmp) / g
            d.mkdir()
            _quantize_mixed(pre, d / "q.onnx", feeds, groups, base="16", other=(g,))
            ctx = d / "ctx.onnx"
            ort.InferenceSession(str(d / "q.onnx"), _options("int8", {"batch": b, "seq": t}, context=ctx))
            sess = ort.InferenceSession(str(ctx), _options("int8"))
            got = np.concatenate([sess.run(None, f)[0] for f in rows])
            agree, dl = agreement(ref, got, captured.task)
            res[g] = {"max_abs_logit_diff": dl, "decision_agreement": agree, "rows": len(rows), "judged_on": "simulator"
                      if on_simulator() else "HTP"}
    return res
