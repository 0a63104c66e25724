"""The configs of the library surface (api.py): one frozen dataclass per stage, validated on construction, before
anything is written. The stages (porting.py, api.py) import them from here."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import ConfigError
from .latency import COMPARISONS
from .models.detector import PRESETS, Detector, build_preset, load_detector, load_tokenizer
from .proof import CAPTURE_METHODS
from .runtimes import REFERENCE, runtime_names
from .spec import ATTENTION_FORMS, QuantOptions, ShapeSpec

if TYPE_CHECKING:
    from .models.classifier import HFClassifier
    from .models.custom import UserModel

DEFAULT_PORT_RUNTIMES = tuple(runtime_names(default_port=True))  # from the registry's flags, not a second list


@dataclass(frozen=True, kw_only=True)
class ModelSource:
    model_dir: str | None = None
    preset: str | None = None
    random_init: bool = False
    seed: int = 0
    new_head: bool = False  # a plain backbone directory: start a random detector head (never silently)
    # npuport.port(module, tokenizer, ...): a user's own nn.Module wrapped as models.custom.UserModel, its tokenizer
    module: UserModel | None = None
    tokenizer: object | None = None

    def __post_init__(self):
        given = [x for x in (self.model_dir, self.preset, self.module) if x is not None]
        if len(given) != 1:
            raise ConfigError("give exactly one of MODEL_DIR or --preset NAME" if self.module is None else
                              "a module source takes no model directory or preset")
        if self.preset is not None:
            PRESETS.get(self.preset)  # raises, listing the known presets
            if not self.random_init:
                raise ConfigError(
                    f"preset {self.preset!r} has no weights here (nothing is downloaded); add --random-init to build "
                    "it from its published config, or give a local model directory"
                )

    def load(self) -> Detector | HFClassifier:
        """A detector, or a stock Hugging Face *ForSequenceClassification kept as it is."""
        if self.module is not None:
            return self.module
        if self.preset is not None:
            return build_preset(self.preset, seed=self.seed)
        return load_detector(self.model_dir, new_head=self.new_head)

    def load_tokenizer(self):
        """The tokenizer to save beside the artifact and to encode --eval-data with, or None."""
        if self.module is not None:
            return self.tokenizer
        return load_tokenizer(self.model_dir) if self.model_dir else None

    def describe(self, model: Detector, fingerprint: str) -> dict:
        base = {"model_type": model.model_type, "sha256": fingerprint,
                "parameters": sum(p.numel() for p in model.parameters())}
        origin = getattr(model.config, "npuport_origin", None)  # e.g. me5-small: dequantised from a 4-bit file
        if origin:
            base["origin"] = origin
        if self.module is not None:
            return {"kind": "module", "class": self.module.spec.head.removeprefix("module:"),
                    "backbone": self.module.backbone_path, **base}
        if self.preset is not None:
            return {"kind": "preset", "preset": self.preset, "random_init": True, "seed": self.seed, **base}
        head = {"new_head": True} if self.new_head else {}
        return {"kind": "dir", "path": str(Path(self.model_dir).resolve()), **head, **base}

    @classmethod
    def from_manifest(cls, source: dict) -> "ModelSource":
        if source.get("kind") == "module":
            raise ConfigError(f"this artifact was ported from a Python module object ({source.get('class')}), which "
                              "npuport cannot load again by itself; in Python: npuport.verify(OUT, eval_data=FILE, "
                              "model=your_module)")
        if source.get("kind") == "preset":
            return cls(preset=source["preset"], random_init=True, seed=source.get("seed", 0))
        return cls(model_dir=source["path"], new_head=bool(source.get("new_head")))


@dataclass(frozen=True, kw_only=True)
class PortConfig:
    source: ModelSource
    out: str
    runtimes: tuple[str, ...] = DEFAULT_PORT_RUNTIMES
    shapes: ShapeSpec = field(default_factory=ShapeSpec)
    auto_buckets: int | None = None  # --buckets auto: plan at most this many buckets from the data's token lengths
    precision: str | None = None  # None: each runtime's default (fp32 where it has it; qnn: fp16)
    device: str | None = None  # None: each runtime's default (cpu where it has it; qnn: htp)
    eval_data: str | None = None
    calibration_data: str | None = None  # rows that calibrate static int8 / int16 (default: the eval data)
    quant: QuantOptions = field(default_factory=QuantOptions)  # integer precisions: how, and the bar they must clear
    capture_methods: tuple[str, ...] = ("trace", "export", "onnx")
    attention: str = "dense"  # or "banded": sliding-window layers compute only their band (static/banded.py)
    bench_runs: int = 5
    overwrite: bool = False

    def __post_init__(self):
        if not self.runtimes:
            raise ConfigError("--runtime needs at least one runtime name")
        if self.attention not in ATTENTION_FORMS:
            raise ConfigError(f"--attention {self.attention!r}: choose one of {', '.join(ATTENTION_FORMS)}")
        known = runtime_names(ports=True)
        for b in self.runtimes:
            if b not in known:
                raise ConfigError(f"unknown runtime {b!r} for port; known: {', '.join(known)}")
        for m in self.capture_methods:
            CAPTURE_METHODS.get(m)
        if self.bench_runs < 1:
            raise ConfigError(f"bench runs {self.bench_runs} must be >= 1")
        if self.auto_buckets is not None:
            if self.auto_buckets < 1:
                raise ConfigError(f"--max-buckets {self.auto_buckets} must be >= 1")
            if not (self.eval_data or self.calibration_data):
                raise ConfigError("--buckets auto plans the buckets from your rows' token lengths: pass --eval-data FILE "
                                  "(or --calibration-data FILE)")


@dataclass(frozen=True, kw_only=True)
class VerifyConfig:
    path: str
    eval_data: str | None = None
    public_key: str | None = None  # also require a valid signature (npuport sign) under this key
    module: object | None = None  # an artifact ported from a module object: that module, for parity on data


@dataclass(frozen=True, kw_only=True)
class BenchConfig:
    artifact_dir: str | None = None  # a `port` output or artifact directory ...
    source: ModelSource | None = None  # ... or a model to port first
    runtimes: tuple[str, ...] | None = None
    vs: tuple[str, ...] = (REFERENCE,)
    shapes: ShapeSpec = field(default_factory=ShapeSpec)
    precision: str = "fp32"
    runs: int = 20
    warmup: int = 2
    json_out: str | None = None
    plot: str | None = None
    # When bench ports a model first: what port takes for parity on data and integer precisions
    eval_data: str | None = None
    calibration_data: str | None = None
    quant: QuantOptions = field(default_factory=QuantOptions)

    def __post_init__(self):
        if (self.artifact_dir is None) == (self.source is None):
            raise ConfigError("give exactly one of ARTIFACT_DIR, MODEL_DIR or --preset NAME --random-init")
        if self.artifact_dir is not None and (self.eval_data or self.calibration_data):
            raise ConfigError("--eval-data and --calibration-data apply when bench ports a model first; an artifact "
                              f"is checked on data with: npuport verify {self.artifact_dir} --eval-data FILE")
        for v in self.vs:
            if v not in COMPARISONS:
                raise ConfigError(f"unknown --vs path {v!r}; known: {', '.join(COMPARISONS)}")
        if self.runs < 1 or self.warmup < 0:
            raise ConfigError(f"--runs must be >= 1 and --warmup >= 0 (got {self.runs}, {self.warmup})")
