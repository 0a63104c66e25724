"""What to compile, as types: precisions, the shape spec (batch sizes x sequence buckets) and the compile spec.

This module sits below both capture and the runtimes: both import it, it imports neither.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import ConfigError

PRECISIONS = ("fp32", "fp16", "bf16", "int8", "int16")  # int8 / int16: quantisation where a runtime offers it
# What a training step can run in (a subset of PRECISIONS). fp32: every op in fp32. bf16: mixed precision as GPUs
# train: forward and backward in bf16, gradients returned in fp32, master weights, Adam moments and the update in fp32
# (bf16 keeps fp32's exponent range: no loss scaling). fp16: the same with loss scaling (qnn's HTP: train/mixed.py).
TRAIN_PRECISIONS = ("fp32", "bf16", "fp16")
_TORCH_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "int8": "float32", "int16": "float32"}


def torch_dtype(precision: str):
    """The torch dtype a precision computes in on the PyTorch side (int8 / int16 quantise in the runtime; the module
    stays fp32). torch is imported here, not with this module: the CLI's parser reads this module's names, and a
    command that never touches a model should not pay for torch."""
    import torch

    return getattr(torch, _TORCH_DTYPES[precision])


# How attention is written into the captured graph (`--attention`): dense = the HF model's exact computation; banded =
# sliding-window layers in blocks (static/banded.py)
ATTENTION_FORMS = ("dense", "banded")
INPUT_NAMES = ("input_ids", "attention_mask")
OUTPUT_NAMES = ("logits",)


@dataclass(frozen=True, kw_only=True)
class ShapeSpec:
    """The static shapes to compile: every batch size x every sequence-length bucket."""

    batch_sizes: tuple[int, ...] = (1,)
    buckets: tuple[int, ...] = (512,)

    def __post_init__(self):
        for name, vals in (("batch size", self.batch_sizes), ("sequence length", self.buckets)):
            if not vals:
                raise ConfigError(f"at least one {name} is needed")
            for v in vals:
                if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                    raise ConfigError(f"{name} {v!r} must be a positive integer")
        object.__setattr__(self, "batch_sizes", tuple(sorted(set(self.batch_sizes))))
        object.__setattr__(self, "buckets", tuple(sorted(set(self.buckets))))

    def shapes(self) -> list[tuple[int, int]]:
        return [(b, t) for b in self.batch_sizes for t in self.buckets]

    @property
    def static(self) -> bool:
        return len(self.batch_sizes) == 1 and len(self.buckets) == 1

    @property
    def largest(self) -> tuple[int, int]:
        return self.batch_sizes[-1], self.buckets[-1]

    def to_json(self) -> dict:
        return {"batch_sizes": list(self.batch_sizes), "buckets": list(self.buckets)}

    @classmethod
    def from_json(cls, d: dict) -> "ShapeSpec":
        return cls(batch_sizes=tuple(d["batch_sizes"]), buckets=tuple(d["buckets"]))


INTEGER_PRECISIONS = ("int8", "int16")  # lossy by construction: their decisions are checked on data
# Left in float unless --keep-fp32 says otherwise: every FFN down-projection, whose inputs carry the outlier channels
# transformers are known for. On the demo detector it was what flipped unseen decisions at int8 (98.9 -> 100 % on a
# held-out template family with OpenVINO, for ~20 % of int8's speed; benchmarks/NOTES.md). And the head, one small
# MatMul on the pooled row: ONNX Runtime's NNCF path never quantised it (2-D Gemm), OpenVINO's did; in float on both,
# the two CPU runtimes quantise the same groups. It cost nothing in speed and changed no decision on the demo (the P11
# table's "head in int8" row). Applied by the runtimes that keep groups in float, to models that have the group, for
# static quantisation.
DEFAULT_KEEP = ("ffn_out", "head")
CALIBRATION_METHODS = ("minmax", "percentile", "entropy")
# Group names `--keep-fp32` takes besides layer.N (N = a transformer layer index); runtimes/_quantize.py finds them
NAMED_GROUPS = ("embeddings", "attention", "head", "ffn_out")
# A default recipe (Runtime.default_int16) that raises every group the model has, layer.N included
EVERY_GROUP = ("*",)
# Groups by role across layers that integer NPUs (qnn, ethos-u) can raise to 16-bit activations (`--int16`): the ops
# whose int8 error flips decisions in transformers (onnxruntime#9599, optimum#151: LayerNorm, GELU, the residual path)
ROLE_GROUPS = ("layernorm", "gelu")
# SmoothQuant (Xiao et al., 2023): before int8, each MatMul's activation channels are divided by s_j and its weight
# rows multiplied by s_j = max|x_j|^a / max|w_j|^(1-a), which is exact in float and moves the outlier channels' range
# into the weights, quantised per channel. a = 0.5 is the paper's default and ONNX Runtime's (SmoothQuantAlpha).
# On the demo detector (ONNX Runtime int8, ffn_out in float) it was what held the unseen rows (test_family) that ONNX
# Runtime's own QDQ quantiser flipped; NNCF's own 0.95 held fewer, 0.5 more and with half the logit drift (the P11
# table in benchmarks/RESULTS.md, benchmarks/p11_int8.py).
SMOOTH_QUANT_DEFAULT = 0.5


@dataclass(frozen=True, kw_only=True)
class QuantOptions:
    """How an integer precision is made, and the bar it must clear (`port --precision int8|int16`).

    min_agreement: the share of eval rows whose decision must equal the fp32 reference's; below it, port refuses to
    write the artifact (0 turns the check off). mode: static (calibrated activations) or dynamic (ONNX Runtime only).
    keep_fp32: quantisation groups left in float (embeddings, attention, head, ffn_out, layer.N); "auto" among them: measure
    every group's cost and keep the costliest in float, one at a time, until min_agreement holds (npuport/gate.py).
    None (the default): DEFAULT_KEEP where the runtime and the model have it; () or ("none",): quantise every group.
    sensitivity: measure every group's cost alone and record it in the manifest and report.
    int16: groups whose activations are 16-bit (weights stay 8-bit) on runtimes that mix precisions in one integer
    graph (qnn, ethos-u); None: the runtime's own default recipe (`Runtime.default_int16`), () or ("none",): none.
    There `--keep-fp32 auto` raises groups to 16-bit instead of moving them to float on the host.
    smooth_quant: SmoothQuant's migration strength a in [0, 1] on runtimes that apply it (Runtime.smooth_quant);
    None: the runtime's default, a negative value: off.
    per_token: groups whose MatMuls take int8 weights and quantise their input per token at run time, on runtimes
    that can (Runtime.quantizes_per_token); None: the runtime's default (`Runtime.default_per_token`) for static int8,
    () or ("none",): none. A group also named in keep_fp32 stays in float."""

    method: str = "minmax"
    mode: str = "static"
    keep_fp32: tuple[str, ...] | None = None
    sensitivity: bool = False
    min_agreement: float = 0.995
    int16: tuple[str, ...] | None = None
    smooth_quant: float | None = None
    per_token: tuple[str, ...] | None = None

    def __post_init__(self):
        if self.method not in CALIBRATION_METHODS:
            raise ConfigError(f"--calibration-method {self.method!r}: choose one of {', '.join(CALIBRATION_METHODS)}")
        if self.mode not in ("static", "dynamic"):
            raise ConfigError(f"--quantization {self.mode!r}: choose static or dynamic")
        if self.keep_fp32 is not None and "none" in self.keep_fp32:
            if len(self.keep_fp32) > 1:
                raise ConfigError(f"--keep-fp32 {','.join(self.keep_fp32)}: none quantises every group; name it alone")
            object.__setattr__(self, "keep_fp32", ())
        if self.int16 is not None and "none" in self.int16:
            if len(self.int16) > 1:
                raise ConfigError(f"--int16 {','.join(self.int16)}: none keeps every group at 8 bits; name it alone")
            object.__setattr__(self, "int16", ())
        if self.per_token is not None and "none" in self.per_token:
            if len(self.per_token) > 1:
                raise ConfigError(f"--per-token {','.join(self.per_token)}: none quantises no group per token; name "
                                  "it alone")
            object.__setattr__(self, "per_token", ())
        for g in self.per_token or ():
            if g not in NAMED_GROUPS and not (g.startswith("layer.") and g[6:].isdigit()):
                raise ConfigError(f"--per-token {g!r}: name {', '.join(NAMED_GROUPS)} or layer.N (N a layer index)")
        if self.per_token and self.mode != "static":
            raise ConfigError("--per-token quantises some groups per token inside a statically quantised graph; "
                              "drop --quantization dynamic")
        for g in self.keep_fp32 or ():
            if g != "auto" and g not in NAMED_GROUPS and not (g.startswith("layer.") and g[6:].isdigit()):
                raise ConfigError(f"--keep-fp32 {g!r}: name {', '.join(NAMED_GROUPS)} or layer.N (N a layer index)")
        for g in self.int16 or ():
            if g not in NAMED_GROUPS + ROLE_GROUPS and not (g.startswith("layer.") and g[6:].isdigit()):
                raise ConfigError(f"--int16 {g!r}: name {', '.join(NAMED_GROUPS + ROLE_GROUPS)} or layer.N")
        if self.smooth_quant is not None and self.smooth_quant > 1.0:
            raise ConfigError(f"--smooth-quant {self.smooth_quant}: give a strength between 0 and 1 (0.5 is "
                              "SmoothQuant's default), or off")
        if self.smooth_quant is not None and self.smooth_quant >= 0 and (self.mode != "static" or self.method != "minmax"):
            raise ConfigError(f"--smooth-quant {self.smooth_quant}: SmoothQuant runs with static quantisation and "
                              f"minmax calibration (NNCF); drop --calibration-method {self.method}"
                              if self.mode == "static" else
                              f"--smooth-quant {self.smooth_quant}: SmoothQuant needs calibrated activations; drop "
                              "--quantization dynamic")
        if not 0.0 <= self.min_agreement <= 1.0:
            raise ConfigError(f"--min-agreement {self.min_agreement}: give a share between 0 and 1, e.g. 0.995")
        if self.auto_keep and (self.min_agreement <= 0 or self.mode != "static"):
            raise ConfigError("--keep-fp32 auto keeps groups in float until --min-agreement holds on --eval-data: it "
                              "needs static quantisation and a --min-agreement above 0")

    @property
    def auto_keep(self) -> bool:
        return "auto" in (self.keep_fp32 or ())

    @property
    def fixed_keep(self) -> tuple[str, ...]:
        """The groups named by hand (auto adds to these)."""
        return tuple(g for g in self.keep_fp32 or () if g != "auto")

    @property
    def default_keep(self) -> tuple[str, ...]:
        """Kept in float without being named: DEFAULT_KEEP unless --keep-fp32 was given (static quantisation only).
        A runtime with its own default (Runtime.default_keep) keeps that instead (_quantize.resolve_keep)."""
        return DEFAULT_KEEP if self.keep_fp32 is None and self.mode == "static" else ()

    def options(self) -> dict:
        return {"calibration_method": self.method, "quantization": self.mode, "keep_fp32": list(self.fixed_keep),
                "keep_fp32_default": list(self.default_keep), "sensitivity": self.sensitivity or self.auto_keep,
                "int16": None if self.int16 is None else list(self.int16), "smooth_quant": self.smooth_quant,
                "per_token": None if self.per_token is None else list(self.per_token)}


@dataclass(frozen=True, kw_only=True)
class CompileSpec:
    shapes: ShapeSpec
    precision: str = "fp32"
    device: str = "cpu"
    options: dict = field(default_factory=dict)
    # Token rows (unpadded int arrays) that calibrate static quantisation; empty: the runtime uses random probes and
    # says so in its manifest. `port` fills it from --calibration-data, else from --eval-data.
    calibration: tuple = ()
    calibration_source: str = "random probes"

    def __post_init__(self):
        if self.precision not in PRECISIONS:
            raise ConfigError(f"precision {self.precision!r} unknown; choose one of {', '.join(PRECISIONS)}")
