"""Capture: turn the adapted detector into static graphs (torch.export, ONNX) that runtimes compile.

`Captured` is what every runtime compiles from: it satisfies `runtimes.base.CompileInput` (ONNX path, example
inputs, probes, calibration batches, the float reference), so runtimes never import this package. The proof that
each captured form equals eager lives one layer up, in `npuport/proof.py`.
"""

from __future__ import annotations

import copy
import gc
import logging
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..errors import ExportError
from ..models.detector import Detector
from ..spec import INPUT_NAMES, OUTPUT_NAMES, ShapeSpec, torch_dtype
from ..task import Task
from .adapters import AdapterReport, StaticDetector, adapt
from .compact import compact_embeddings
from .probes import calibration_batches, make_probes

log = logging.getLogger(__name__)



@dataclass
class Captured:
    """What backends compile from: the adapted module plus lazily produced graphs (ONNX file, ExportedPrograms)."""

    detector: Detector
    static: StaticDetector
    adapter: AdapterReport
    shapes: ShapeSpec
    workdir: Path
    _onnx: Path | None = None
    _exported: dict = field(default_factory=dict)

    def example(self, shape: tuple[int, int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        b, t = shape or (self.shapes.batch_sizes[-1], self.shapes.buckets[-1])
        return make_probes(self.detector, b, t, n=3)[1]

    def module(self, precision: str = "fp32") -> StaticDetector:
        if precision == "fp32":
            return self.static
        m = copy.deepcopy(self.static)
        return m.to(torch_dtype(precision)).eval()

    def onnx(self) -> Path:
        """One ONNX file for every shape: static when one shape, else symbolic `batch`/`seq` dims that each
        session pins (free-dimension overrides), so all buckets share one copy of the weights."""
        if self._onnx is None:
            with self.static.onnx_masks():  # see adapters.additive: no per-layer NaN guard in ONNX attention
                self._onnx = export_onnx(self.static, self.example(), self.shapes, self.workdir / "onnx")
        return self._onnx

    def exported(self, precision: str = "fp32", dynamic: bool | None = None) -> torch.export.ExportedProgram:
        dynamic = (not self.shapes.static) if dynamic is None else dynamic
        key = (precision, dynamic)
        if key not in self._exported:
            module = self.module(precision)
            self._exported[key] = export_program(module, self.example(), self.shapes if dynamic else None)
        return self._exported[key]

    def moved_onnx(self, path: Path) -> None:
        """A runtime moved the ONNX files into its artifact (no second copy of the weights on disk)."""
        self._onnx = path

    @property
    def task(self) -> Task:
        return Task.from_spec(self.detector.spec.to_json())

    def probes(self, shape: tuple[int, int], n: int = 3, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return make_probes(self.detector, *shape, seed=seed, n=n)

    def calibration_batches(self, shape: tuple[int, int], rows=()) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return calibration_batches(self.detector, shape, rows)

    def reference(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The unmodified model's fp32 logits (the float side of a quantised graph's drift)."""
        with torch.no_grad():
            return self.detector(ids, mask).float()

    def export(self, module: torch.nn.Module, example) -> torch.export.ExportedProgram:
        """Strict torch.export of any module at one static shape (a quantiser's input), typed errors."""
        return export_program(module, example, None)

    def save_source(self, out: Path) -> None:
        """The model as a Hugging Face directory (the eager runtime's artifact)."""
        self.detector.save_pretrained(out)

    def release(self) -> None:
        self._exported.clear()
        gc.collect()


def capture(detector: Detector, shapes: ShapeSpec, workdir: Path, attention: str = "dense",
            compact: bool = False) -> Captured:
    """compact: store an exactly block-quantised word-embedding table as int8 codes x scales in the graphs (every
    runtime compiling from this capture must take it: `Runtime.compact_tables`); the proofs show it is exact."""
    static, report = adapt(detector, attention)
    if compact and isinstance(static, StaticDetector):
        coded = compact_embeddings(static.detector)
        if coded is not None:
            static, facts = StaticDetector(coded[0], static._masks), coded[1]
            report.embeddings = facts
            report.actions.append(f"{facts['table']}: {facts['weights'] / 1e6:.1f}M frozen weights stored as "
                                  f"{facts['form']} ({facts['fp32_bytes'] / 2**20:.0f} MB -> "
                                  f"{facts['bytes'] / 2**20:.0f} MB), exact: every weight equals its code x scale")
    workdir.mkdir(parents=True, exist_ok=True)
    return Captured(detector=detector, static=static, adapter=report, shapes=shapes, workdir=workdir)


def _dims(shapes: ShapeSpec):
    # torch.export needs max >= 2 for a symbolic dim; a single batch size of 1 stays static.
    dyn = {}
    if len(shapes.batch_sizes) > 1:
        dyn[0] = torch.export.Dim("batch", min=shapes.batch_sizes[0], max=shapes.batch_sizes[-1])
    if len(shapes.buckets) > 1:
        dyn[1] = torch.export.Dim("seq", min=shapes.buckets[0], max=shapes.buckets[-1])
    return {"input_ids": dict(dyn), "attention_mask": dict(dyn)} if dyn else None


def export_program(module: torch.nn.Module, example, shapes: ShapeSpec | None) -> torch.export.ExportedProgram:
    dyn = _dims(shapes) if shapes is not None else None
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.export.export(module, tuple(example), dynamic_shapes=dyn, strict=True)
    except Exception as e:  # torch raises many types here; we re-raise one typed error with the cause
        raise ExportError(f"torch.export (strict) failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}") from e


def export_onnx(module: torch.nn.Module, example, shapes: ShapeSpec, outdir: Path) -> Path:
    """Dynamo ONNX exporter: lower peak memory than the TorchScript one, weights as external data."""
    outdir.mkdir(parents=True, exist_ok=True)
    path = outdir / "model.onnx"
    dyn = _dims(shapes)
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            logging.getLogger("torch.onnx").setLevel(logging.ERROR)
            torch.onnx.export(
                module, tuple(example), str(path), dynamo=True, input_names=list(INPUT_NAMES), output_names=list(OUTPUT_NAMES),
                dynamic_shapes=dyn, external_data=True, optimize=True, verbose=False,
            )
    except Exception as e:
        raise ExportError(f"ONNX export failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}") from e
    return path
