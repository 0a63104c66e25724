"""The backend interface: available() -> (ok, reason); compile(captured, spec, out) -> files; load(manifest) -> Session.

A backend module imports its SDK inside its functions only, so a missing SDK costs nothing until it is used,
and then raises BackendUnavailable naming the install command.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ..errors import BackendUnavailable, ConfigError

if TYPE_CHECKING:
    from ..static.capture import Captured

PRECISIONS = ("fp32", "fp16", "bf16", "int8")  # int8: dynamic quantisation where a backend offers it


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
                if not isinstance(v, int) or v <= 0:
                    raise ConfigError(f"{name} {v!r} must be a positive integer")
        object.__setattr__(self, "batch_sizes", tuple(sorted(set(self.batch_sizes))))
        object.__setattr__(self, "buckets", tuple(sorted(set(self.buckets))))

    def shapes(self) -> list[tuple[int, int]]:
        return [(b, t) for b in self.batch_sizes for t in self.buckets]

    @property
    def static(self) -> bool:
        return len(self.batch_sizes) == 1 and len(self.buckets) == 1

    def to_json(self) -> dict:
        return {"batch_sizes": list(self.batch_sizes), "buckets": list(self.buckets)}

    @classmethod
    def from_json(cls, d: dict) -> "ShapeSpec":
        return cls(batch_sizes=tuple(d["batch_sizes"]), buckets=tuple(d["buckets"]))


@dataclass(frozen=True, kw_only=True)
class CompileSpec:
    shapes: ShapeSpec
    precision: str = "fp32"
    device: str = "cpu"
    options: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.precision not in PRECISIONS:
            raise ConfigError(f"precision {self.precision!r} unknown; choose one of {', '.join(PRECISIONS)}")


class Session:
    """A loaded artifact: run(feeds) on one of the compiled shapes -> logits (B, 2) float32."""

    shapes: list[tuple[int, int]]

    def run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:  # pragma: no cover - interface
        raise NotImplementedError

    def close(self) -> None:
        pass

    def check_shape(self, feeds: dict[str, np.ndarray]) -> tuple[int, int]:
        ids = feeds["input_ids"]
        shape = (int(ids.shape[0]), int(ids.shape[1]))
        if shape not in self.shapes:
            raise ConfigError(f"input shape {shape} was not compiled; compiled shapes: {sorted(self.shapes)}")
        return shape


class Backend:
    name: ClassVar[str]
    sdk: ClassVar[str | None] = None  # python module whose presence makes the backend available
    install_hint: ClassVar[str] = ""
    capture_method: ClassVar[str] = "onnx"  # what it compiles from: onnx | export | torch
    devices: ClassVar[tuple[str, ...]] = ("cpu",)
    description: ClassVar[str] = ""

    def available(self) -> tuple[bool, str]:
        if self.sdk is None:
            return True, "built in"
        try:
            importlib.import_module(self.sdk)
        except ImportError as e:
            return False, f"{self.sdk} is not installed ({e.__class__.__name__}); install with: {self.install_hint}"
        return True, "ok"

    def require(self) -> None:
        ok, reason = self.available()
        if not ok:
            raise BackendUnavailable(f"backend {self.name!r} unavailable: {reason}")

    def versions(self) -> dict[str, str]:
        return {}

    def list_devices(self) -> list[str]:
        return list(self.devices)

    def precisions(self, device: str) -> tuple[str, ...]:
        return ("fp32",)

    def check(self, spec: CompileSpec) -> None:
        if spec.device not in self.list_devices():
            raise ConfigError(
                f"device {spec.device!r} not available for backend {self.name!r}; available: {', '.join(self.list_devices())}"
            )
        if spec.precision not in self.precisions(spec.device):
            raise ConfigError(
                f"backend {self.name!r} on {spec.device} supports precision {', '.join(self.precisions(spec.device))}, "
                f"not {spec.precision}"
            )

    def compile(self, captured: "Captured", spec: CompileSpec, out: Path) -> dict[str, Any]:
        """Write compiled files under `out`; return backend metadata for the manifest."""
        raise NotImplementedError

    def load(self, directory: Path, manifest: dict) -> Session:
        raise NotImplementedError


def feeds_of(input_ids: np.ndarray, attention_mask: np.ndarray) -> dict[str, np.ndarray]:
    return {
        "input_ids": np.ascontiguousarray(input_ids, dtype=np.int64),
        "attention_mask": np.ascontiguousarray(attention_mask, dtype=np.int64),
    }
