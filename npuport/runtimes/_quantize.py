"""Static (calibrated) quantisation of a captured ONNX graph, shared by the runtimes that compile from ONNX.

Static int8 fixes each activation's range ahead of time from calibration rows (`--calibration-data`, else
`--eval-data`). Three things decide whether it keeps the detector's decisions, and each lives here once:
  * the calibration method (MinMax, Percentile, Entropy): `--calibration-method`;
  * what stays in float: the additive attention mask (its finfo.min would take every 8-bit step, see
    `attention_mask_nodes`) always, and the groups named by `--keep-fp32` (embeddings, attention, head, layer.N);
  * which ops quantise: MatMul / Gemm (weights per channel) and what QDQ needs around them.
`node_groups` names every node by the module it came from (the dynamo exporter's name scopes), so sensitivity can be
measured and reported per group: quantise one group alone, everything else in float, and see what it costs.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from ..errors import BackendUnavailable, ConfigError
from ..parity import agreement  # noqa: F401  (runtimes gate their graphs with it)
from ..spec import CALIBRATION_METHODS, EVERY_GROUP

_LAYER = re.compile(r"\.layers?\.(\d+)$|\.layer\.(\d+)$")
# ffn_out: the feed-forward down-projection of every layer, by its module name in each family (BERT / RoBERTa /
# MiniLM / XLM-R / DeBERTa: layer.N.output.dense; ModernBERT / mmBERT: mlp.Wo; DistilBERT: ffn.lin2; Llama-style:
# mlp.down_proj; GPT-2: mlp.c_proj; GPT-NeoX: dense_4h_to_h; OPT: fc2). Its input is the FFN's activation output,
# whose range holds the outliers transformers are known for (Bondarenko et al., 2021, "Understanding and Overcoming
# the Challenges of Efficient Transformer Quantization"): one int8 scale per tensor rounds most of it away. Measured
# on the demo detector (OpenVINO NNCF int8, calibrated on train rows): test split 99.44 -> 100 % decisions, held-out
# family 98.89 -> 100 %, mean |dlogit| 0.20 -> 0.09 with ffn_out in float (benchmarks/p11_int8.py).
FFN_OUT = re.compile(r"(layers?\.\d+\.output\.dense|mlp\.(Wo|down_proj|c_proj|dense_4h_to_h)|ffn\.lin2|\.fc2)$")


class CalibrationReader:
    """onnxruntime's CalibrationDataReader protocol over a list of feeds."""

    def __init__(self, feeds: list[dict]):
        self.feeds = list(feeds)
        self.it = iter(self.feeds)

    def get_next(self):
        return next(self.it, None)

    def rewind(self):
        self.it = iter(self.feeds)


def calibration_feeds(captured, spec) -> list[dict]:
    """The calibration rows as ONNX feeds, cut to every compiled shape."""
    return [{"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
            for shape in spec.shapes.shapes() for ids, mask in captured.calibration_batches(shape, spec.calibration)]


def _scopes(node) -> list[str]:
    for p in node.metadata_props:
        if p.key == "pkg.torch.onnx.name_scopes":
            try:
                import ast

                return list(ast.literal_eval(p.value))
            except (ValueError, SyntaxError):
                return []
    return []


def group_of(node) -> str | None:
    """The quantisation group a node belongs to, from the module path the exporter recorded."""
    scopes = _scopes(node)
    joined = " ".join(scopes)
    if "scaled_dot_product_attention" in joined or node.op_type == "Softmax":
        return "attention"  # activation x activation products and their softmax, in every layer
    if ".embeddings" in joined:
        return "embeddings"
    for s in reversed(scopes):
        m = _LAYER.search(s)
        if m:
            return f"layer.{m.group(1) or m.group(2)}"
    if any(s.startswith("detector.head") or s.startswith("detector.classifier") or s.endswith(".pooler")
           or ".head" in s for s in scopes):
        return "head"
    return None


def is_ffn_out(node) -> bool:
    return node.op_type in ("MatMul", "Gemm") and any(FFN_OUT.search(s) for s in _scopes(node))


def node_groups(path: Path) -> dict[str, list[str]]:
    """group -> node names, for the nodes of the graph that static quantisation can touch. ffn_out overlaps the
    layer.N groups (its nodes are in both): it names a role across layers, layer.N a place."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    groups: dict[str, list[str]] = {}
    for n in model.graph.node:
        g = group_of(n)
        if g is not None:
            groups.setdefault(g, []).append(n.name)
        if is_ffn_out(n):
            groups.setdefault("ffn_out", []).append(n.name)
    return dict(sorted(groups.items(), key=lambda kv: _order(kv[0])))


def role_of(node) -> str | None:
    """The role group (spec.ROLE_GROUPS) of a node: every LayerNorm, every FFN activation (GELU, its tanh / erf
    forms, GeGLU's gate)."""
    if node.op_type in ("LayerNormalization", "SimplifiedLayerNormalization", "SkipLayerNormalization"):
        return "layernorm"
    if node.op_type in ("Gelu", "FastGelu", "BiasGelu") or any(s.endswith(("act_fn", ".act", "activation_fn"))
                                                                for s in _scopes(node)):
        return "gelu"
    return None


def npu_groups(path: Path) -> dict[str, list[str]]:
    """The groups an integer NPU can raise to 16-bit activations: node_groups' groups plus the role groups."""
    import onnx

    groups = node_groups(path)
    for n in onnx.load(str(path), load_external_data=False).graph.node:
        r = role_of(n)
        if r is not None:
            groups.setdefault(r, []).append(n.name)
    return dict(sorted(groups.items(), key=lambda kv: _order(kv[0])))


def matmul_weights(path: Path) -> list[str]:
    """The 2-D float initializers MatMuls multiply by ([K, N]: per output channel is axis 1)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    inits = {i.name: i for i in model.graph.initializer
             if i.data_type == onnx.TensorProto.FLOAT and len(i.dims) == 2}
    return sorted({n.input[1] for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in inits})


def activation_tensors(path: Path, nodes: list[str] | None) -> list[str]:
    """The activations (not weights, constants or graph inputs) that `nodes` (None: every node) read and write:
    what a 16-bit override names (its weights stay 8-bit)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    fixed = {i.name for i in model.graph.initializer} | {i.name for i in model.graph.input}
    fixed |= {o for n in model.graph.node if n.op_type == "Constant" for o in n.output}
    wanted, names = set(nodes or ()), set()
    for n in model.graph.node:
        if nodes is None or n.name in wanted:
            names.update(t for t in (*n.input, *n.output) if t and t not in fixed)
    return sorted(names)


# ops whose output the QDQ quantiser gives its input's type (data moved or cast, not computed)
_PASS_THROUGH = ("Cast", "Reshape", "Unsqueeze", "Squeeze", "Transpose", "Flatten")
TABLE_ELEMENTS = 1 << 20  # a lookup table this large is the model's vocabulary (me5-small's: 96M codes, 3M scales)


def table_activations(path: Path, min_elements: int | None = None) -> set[str]:
    """The activations that carry a large lookup table's type: a Gather's output from a constant table of at least
    `min_elements`, and what passes it on unchanged (Cast, Reshape, ...). On the HTP a Gather's output shares its
    table's quantisation, so raising one of these to 16 bits stores the whole vocabulary at 16 bits (its size twice
    over); the sums and products computed from them are ordinary activations."""
    import math

    import onnx

    model = onnx.load(str(path), load_external_data=False)
    limit = TABLE_ELEMENTS if min_elements is None else min_elements
    big = {i.name for i in model.graph.initializer if math.prod(i.dims) >= limit}
    carried: set[str] = set()
    for n in model.graph.node:  # topological order: a chain's producer comes first
        if (n.op_type == "Gather" and n.input[0] in big) or (n.op_type in _PASS_THROUGH and n.input[0] in carried):
            carried.update(n.output)
    return carried


def _order(group: str):
    rank = {"embeddings": 0, "layernorm": 2, "attention": 3, "gelu": 4, "ffn_out": 5, "head": 6}
    if group.startswith("layer."):
        return (1, int(group.split(".")[1]))
    return (rank.get(group, 7), 0)


def check_keep(keep: tuple[str, ...], groups: dict[str, list[str]]) -> None:
    unknown = [k for k in keep if k not in groups]
    if unknown:
        raise ConfigError(f"--keep-fp32 {','.join(unknown)}: this model has no such group; it has "
                          f"{', '.join(groups) or '(none)'}")


def resolve_keep(options: dict, groups, runtime_default: tuple[str, ...]) -> tuple[tuple[str, ...], list[str]]:
    """(the groups to leave in float, those of them kept by default): a named group the model lacks is an error;
    where the default applies (options' keep_fp32_default: --keep-fp32 not given), the runtime's own
    (Runtime.default_keep) where the model has the group."""
    named = tuple(options.get("keep_fp32", ()))
    check_keep(named, groups)
    applies = bool(options.get("keep_fp32_default"))
    default = [g for g in (runtime_default if applies else ()) if g in groups and g not in named]
    return (*named, *default), default


def resolve_per_token(options: dict, groups, keep: tuple[str, ...],
                      runtime_default: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(the groups quantised per token, those of them by default): `--per-token` as given (each must exist), else the
    runtime's default where the model has the group, for static int8; a group kept in float stays in float."""
    named = options.get("per_token")
    if named is not None:
        unknown = [g for g in named if g not in groups]
        if unknown:
            raise ConfigError(f"--per-token {','.join(unknown)}: this model has no such group; it has "
                              f"{', '.join(groups)}")
        return [g for g in named if g not in keep], []
    if options.get("quantization", "static") != "static":
        return [], []
    mine = [g for g in runtime_default if g in groups and g not in keep]
    return mine, mine


def raised_groups(spec, groups, default: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """An integer NPU's groups at 16-bit activations and those of them from its default recipe: `--int16` as given
    (each must exist), else `default` where the model has the group, for int8 (int16 raises everything anyway)."""
    named = spec.options.get("int16")
    if named is not None:
        unknown = [g for g in named if g not in groups]
        if unknown:
            raise ConfigError(f"--int16 {','.join(unknown)}: this model has no such group; it has {', '.join(groups)}")
        return list(named), []
    if spec.precision != "int8":
        return [], []
    mine = list(groups) if default == EVERY_GROUP else [g for g in default if g in groups]
    return mine, mine


def attention_mask_nodes(path: Path) -> list[str]:
    """The additive attention mask and what it feeds: Where(mask, 0, finfo.min) -> Add(scores, bias) -> Softmax.

    Calibrated as ordinary activations, their range spans -3.4e38..x, so one 8- or 16-bit step is ~1e36 and every
    attention score rounds to the same value (measured on the demo detector: 70-75% decisions at int8 and int16).
    They stay in float; everything else is quantised."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path), load_external_data=False)
    consts = {i.name: i for i in model.graph.initializer}
    consts.update({n.output[0]: a.t for n in model.graph.node if n.op_type == "Constant"
                   for a in n.attribute if a.name == "value"})

    def huge_negative(name: str) -> bool:
        t = consts.get(name)
        return t is not None and t.data_type in (1, 10, 11) and float(numpy_helper.to_array(t).min()) <= -1e30

    users: dict[str, list] = {}
    for n in model.graph.node:
        for i in n.input:
            users.setdefault(i, []).append(n)
    keep = []
    for n in model.graph.node:
        if n.op_type == "Where" and any(huge_negative(i) for i in n.input):
            keep.append(n.name)
            for add in users.get(n.output[0], []):
                keep.append(add.name)
                keep += [sm.name for sm in users.get(add.output[0], []) if sm.op_type == "Softmax"]
    return sorted(set(keep))


def quantize_qdq(src: Path, dst: Path, feeds: list[dict], *, method: str = "minmax", keep_fp32: tuple[str, ...] = (),
                 only: str | None = None, activation: str = "QUInt8", weight: str = "QInt8") -> dict:
    """Static QDQ quantisation for ONNX Runtime's CPU EP: per-channel int8 weights, uint8 activations calibrated on
    `feeds`. `keep_fp32`: groups left in float. `only`: quantise that one group and nothing else (sensitivity).
    Returns what the manifest records."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    if method not in CALIBRATION_METHODS:
        raise ConfigError(f"--calibration-method {method!r}: choose one of {', '.join(CALIBRATION_METHODS)}")
    if not feeds:
        raise ConfigError("static quantisation needs calibration rows: pass --calibration-data or --eval-data")
    if method != "minmax":
        # ORT's histogram calibrators stack every batch into one array: one shape only. The largest bucket's rows
        # (every calibration row fits it; padding is masked) stand for all buckets.
        big = max(f["input_ids"].shape for f in feeds)
        feeds = [f for f in feeds if f["input_ids"].shape == big]
    groups = node_groups(src)
    check_keep(keep_fp32, groups)
    excluded = set(attention_mask_nodes(src))
    for g in keep_fp32:
        excluded.update(groups[g])
    include = None
    if only is not None:
        include = [n for n in groups.get(only, []) if n not in excluded]
    cal = {"minmax": CalibrationMethod.MinMax, "percentile": CalibrationMethod.Percentile,
           "entropy": CalibrationMethod.Entropy}[method]
    # MatMul/Gemm outputs stay float: ORT then fuses each one into MatMulIntegerToFloat (int8 product, scaled once to
    # float) instead of QLinearMatMul followed by a Quantize/Dequantize pair of its output. One rounding step fewer
    # per layer and fewer passes over the activations: mmBERT-base 1 x 512 banded ran 396 -> 347 ms, and the demo
    # detector (MinMax) on its test split: max |dlogit| 4.7 -> 2.0, decisions 97.2 -> 98.9 %, 1 x 128 15 -> 12 ms.
    extra = {"WeightSymmetric": True, "ActivationSymmetric": False,
             "OpTypesToExcludeOutputQuantization": ["MatMul", "Gemm"]}
    if method == "percentile":
        extra["CalibPercentile"] = 99.999
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # "consider pre-processing": the dynamo exporter's graph is already optimised
    try:
        quantize_static(str(src), str(dst), CalibrationReader(feeds), quant_format=QuantFormat.QDQ,
                        op_types_to_quantize=["MatMul", "Gemm"], per_channel=True,
                        activation_type=getattr(QuantType, activation), weight_type=getattr(QuantType, weight),
                        nodes_to_quantize=include, nodes_to_exclude=sorted(excluded), use_external_data_format=True,
                        calibrate_method=cal, extra_options=extra)
    finally:
        root.setLevel(level)
    return {"quantization": f"static QDQ: MatMul/Gemm inputs (outputs stay float), weights {weight} per channel, "
                            f"activations {activation} ({method} calibration)", "calibration_method": method,
            "kept_fp32": list(keep_fp32), "calibration_batches": len(feeds)}


def quantize_nncf(src: Path, dst: Path, feeds: list[dict], *, alpha: float, keep_fp32: tuple[str, ...] = (),
                  only: str | None = None) -> dict:
    """Static int8 through NNCF's ONNX backend, into a QDQ graph for ONNX Runtime: the transformer model type and
    mixed preset (int8 weights per channel, symmetric; uint8 activations, asymmetric, MinMax ranges; softmax and
    norms stay float), SmoothQuant at strength `alpha` on every MatMul (spec.SMOOTH_QUANT_DEFAULT says why), fast
    bias correction. MatMul outputs stay float, as with quantize_qdq. `keep_fp32` / `only` as there."""
    import contextlib
    import io
    import warnings

    try:
        import nncf
        from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, AdvancedSmoothQuantParameters
    except ImportError:
        raise BackendUnavailable("ONNX Runtime's static int8 applies SmoothQuant through NNCF: pip install nncf "
                                 "(npuport[int8]); or --smooth-quant off for ONNX Runtime's own quantiser") from None
    import onnx

    if not feeds:
        raise ConfigError("static quantisation needs calibration rows: pass --calibration-data or --eval-data")
    # SmoothQuant's per-channel statistics stack the batches: one shape. The largest bucket's rows (every calibration
    # row fits it; padding is masked) stand for all buckets, as with the histogram calibrators.
    big = max(f["input_ids"].shape for f in feeds)
    feeds = [f for f in feeds if f["input_ids"].shape == big]
    groups = node_groups(src)
    check_keep(keep_fp32, groups)
    model = onnx.load(str(src))
    ignored = set(attention_mask_nodes(src))
    # MatMuls only. NNCF would also store the embedding tables as int8, which ONNX Runtime dequantises whole on every
    # call (the demo's 250k x 384 table: 35 ms of a 74 ms call at 1 x 128), and a 2-D Gemm (the head, on one pooled
    # row per sequence) with a float output is not fused either: it would run over weights dequantised per call for
    # no gain. In float it costs nothing and rounds nothing on the logits themselves.
    ignored |= {n.name for n in model.graph.node if n.op_type != "MatMul"}
    for g in keep_fp32:
        ignored.update(groups[g])
    if only is not None:
        mine = set(groups.get(only, []))
        ignored |= {n.name for n in model.graph.node if n.name not in mine}
    params = AdvancedQuantizationParameters(smooth_quant_alphas=AdvancedSmoothQuantParameters(matmul=alpha))
    nncf.set_log_level(logging.ERROR)  # its notices would break npuport's status line
    # its rich progress bars write to stdout whatever its log level: they go nowhere
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        q = nncf.quantize(model, nncf.Dataset(feeds), preset=nncf.QuantizationPreset.MIXED,
                          model_type=nncf.ModelType.TRANSFORMER, subset_size=len(feeds), advanced_parameters=params,
                          ignored_scope=nncf.IgnoredScope(names=sorted(ignored), validate=False))
    del model
    unsigned_activations(q)
    onnx.save(q, str(dst), save_as_external_data=True, location=dst.name + ".data")
    return {"quantization": f"static QDQ (NNCF {nncf.__version__}, transformer preset): MatMul inputs (outputs stay "
                            f"float; 2-D Gemms such as the head stay float), weights int8 per channel, activations uint8 (minmax calibration), SmoothQuant "
                            f"alpha {alpha:g}, fast bias correction", "calibration_method": "minmax",
            "smooth_quant": alpha, "kept_fp32": list(keep_fp32), "calibration_batches": len(feeds)}


def unsigned_activations(model) -> int:
    """Re-express every int8 activation Quantize/Dequantize pair as uint8 (zero point + 128, same scale), in place.

    NNCF writes an activation whose calibrated range dips below zero as int8, but ONNX Runtime's x86 kernels multiply
    uint8 activations by int8 weights (VNNI's vpdpbusd): an int8 x int8 pair is not fused and ran as a float MatMul
    over dequantised values (measured on the demo detector: 36 of 60 linear layers fused). The two grids are the same
    255 steps shifted by 128, so every dequantised value is bit-identical. Returns how many pairs changed."""
    import numpy as np
    from onnx import TensorProto, numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    zero_points = {n.input[2] for n in model.graph.node if n.op_type == "QuantizeLinear" and len(n.input) > 2}
    weights_zp = {n.input[2] for n in model.graph.node if n.op_type == "DequantizeLinear" and len(n.input) > 2
                  and n.input[0] in inits}
    changed = set()
    for name in sorted(zero_points - weights_zp):
        t = inits.get(name)
        if t is None or t.data_type != TensorProto.INT8:
            continue
        shifted = (numpy_helper.to_array(t).astype(np.int16) + 128).astype(np.uint8)
        t.CopyFrom(numpy_helper.from_array(shifted, name))
        changed.add(name)
    outputs = {n.output[0] for n in model.graph.node if n.op_type == "QuantizeLinear" and len(n.input) > 2
               and n.input[2] in changed}
    for v in model.graph.value_info:  # the quantised tensors' recorded type follows
        if v.name in outputs:
            v.type.tensor_type.elem_type = TensorProto.UINT8
    return len(changed)
