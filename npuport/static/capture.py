"""Capture: turn the adapted detector into static graphs (torch.jit.trace, torch.export, ONNX) and prove each
equals eager.

Proof = max|logit(eager HF model) - logit(captured)| over >= 3 distinct inputs per compiled shape: different
token ids, no padding, half padding, heavy padding. The eager side is the *unmodified* HF model, so the proof
covers the adapter too.
"""

from __future__ import annotations

import copy
import gc
import logging
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ..spec import DTYPES, INPUT_NAMES, OUTPUT_NAMES, ShapeSpec
from ..errors import ExportError
from ..models.detector import Detector
from ..registry import Registry
from .adapters import AdapterReport, StaticDetector, adapt

log = logging.getLogger(__name__)



def make_probes(model: Detector, batch: int, seq: int, seed: int = 0, n: int = 3) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """n distinct (input_ids, attention_mask) pairs of shape (batch, seq): no padding, half, heavy padding.

    Rows within a batch get different lengths too, so batching bugs show. Token ids avoid special ids.
    """
    cfg = model.config
    vocab = cfg.vocab_size
    pad = cfg.pad_token_id if cfg.pad_token_id is not None else 0
    cls_id = getattr(cfg, "cls_token_id", None) or getattr(cfg, "bos_token_id", None) or 1
    sep_id = getattr(cfg, "sep_token_id", None) or getattr(cfg, "eos_token_id", None) or 2
    g = torch.Generator().manual_seed(seed * 1000 + seq * 7 + batch)
    fractions = [1.0, 0.5, 0.1, 0.8, 0.3][: max(n, 3)]
    probes = []
    for k, frac in enumerate(fractions):
        ids = torch.randint(10, vocab, (batch, seq), generator=g)
        mask = torch.zeros(batch, seq, dtype=torch.long)
        for r in range(batch):
            length = max(2, int(round(seq * frac)) - r * max(1, seq // (4 * batch)))
            length = min(seq, length)
            mask[r, :length] = 1
            ids[r, 0] = cls_id
            ids[r, length - 1] = sep_id
            ids[r, length:] = pad
        probes.append((ids, mask))
    return probes


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
        return m.to(DTYPES[precision]).eval()

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

    def release(self) -> None:
        self._exported.clear()
        gc.collect()


def capture(detector: Detector, shapes: ShapeSpec, workdir: Path, attention: str = "dense") -> Captured:
    static, report = adapt(detector, attention)
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


# -- capture methods and their proof --------------------------------------------------------------------------

Runner = Callable[[torch.Tensor, torch.Tensor], np.ndarray]
CAPTURE_METHODS: Registry[Callable[[Captured, tuple[int, int]], Runner]] = Registry("capture method")


def _trace(c: Captured, shape) -> Runner:
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(c.static, c.example(shape), check_trace=False)

    def run(ids, mask):
        with torch.no_grad():
            return traced(ids, mask).float().numpy()

    return run


def _export(c: Captured, shape) -> Runner:
    # With one compiled shape the program the inductor backend compiles is this very one: export it once.
    ep = c.exported("fp32") if c.shapes.static else export_program(c.static, c.example(shape), None)
    mod = ep.module()

    def run(ids, mask):
        with torch.no_grad():
            return mod(ids, mask).float().numpy()

    return run


def _onnx(c: Captured, shape) -> Runner:
    # The ONNX file is proven by running it in ONNX Runtime, the reference ONNX executor (built in its runtime file).
    from ..runtimes import Graph, get_runtime

    onnx = c.onnx()
    ex = get_runtime("onnxruntime").open_graph(Graph(onnx=onnx, workdir=onnx.parent, name="proof",
                                                     dims={"batch": shape[0], "seq": shape[1]}))

    def run(ids, mask):
        return ex.run({"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]

    return run


CAPTURE_METHODS.register("trace", _trace)
CAPTURE_METHODS.register("export", _export)
CAPTURE_METHODS.register("onnx", _onnx)


def reference_logits(detector: Detector, ids: torch.Tensor, mask: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        return detector(ids, mask).float().numpy()


def prove(c: Captured, methods: list[str], progress: Callable[[str], None] | None = None) -> dict:
    """{method: {max_abs_diff, exact, inputs, per_shape, seconds}} plus an `adapter` entry (adapted vs HF eager)."""
    shapes = c.shapes.shapes()
    probes = {s: make_probes(c.detector, *s) for s in shapes}
    refs = {s: [reference_logits(c.detector, *p) for p in probes[s]] for s in shapes}
    out: dict[str, dict] = {}

    def record(name: str, runner_for: Callable[[tuple[int, int]], Runner]):
        t0 = time.perf_counter()
        per_shape, worst, nan = {}, 0.0, False
        for s in shapes:
            if progress:
                progress(f"proof: {name} at {s[0]}x{s[1]}")
            run = runner_for(s)
            diffs = []
            for (ids, mask), ref in zip(probes[s], refs[s]):
                got = run(ids, mask)
                nan |= bool(np.isnan(got).any())
                diffs.append(float(np.abs(got - ref).max()))
            per_shape[f"{s[0]}x{s[1]}"] = max(diffs)
            worst = max(worst, max(diffs))
            del run
            gc.collect()
        out[name] = {
            "max_abs_diff": float("nan") if nan else worst,
            "exact": (worst == 0.0 and not nan),
            "nan": nan,
            "inputs": sum(len(probes[s]) for s in shapes),
            "per_shape": per_shape,
            "seconds": round(time.perf_counter() - t0, 2),
        }

    def adapted(shape):
        def run(ids, mask):
            with torch.no_grad():
                return c.static(ids, mask).float().numpy()

        return run

    record("adapter", adapted)
    for m in methods:
        fn = CAPTURE_METHODS.get(m)
        try:
            record(m, lambda s, fn=fn: fn(c, s))
        except ExportError as e:
            out[m] = {"error": str(e), "max_abs_diff": None, "exact": False}
    return out
