"""The capture proof: every captured form of the model equals the unmodified eager model, on several inputs.

Proof = max|logit(eager HF model) - logit(captured)| over >= 3 distinct inputs per compiled shape: different
token ids, no padding, half padding, heavy padding. The eager side is the *unmodified* HF model, so the proof
covers the adapter too. It sits above `runtimes/`: the ONNX form is proven by running it in the runtime that
declares itself the reference ONNX executor.
"""

from __future__ import annotations

import gc
import time
import warnings
from typing import Callable

import numpy as np
import torch

from .errors import ExportError
from .models.detector import Detector
from .registry import Registry
from .runtimes import Graph, get_runtime, onnx_reference
from .static.capture import Captured, export_program, make_probes

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
    # The program the inductor backend compiles (static at one shape, else symbolic dims over the buckets), exported
    # once and proven at every shape: one export instead of one per shape (5 s each for the demo detector), and the
    # proof is of the very program that compiles. A model whose symbolic export fails is proven per static shape.
    try:
        ep = c.exported("fp32")
    except ExportError:
        ep = export_program(c.static, c.example(shape), None)
    mod = ep.module()

    def run(ids, mask):
        with torch.no_grad():
            return mod(ids, mask).float().numpy()

    return run


def _onnx(c: Captured, shape) -> Runner:
    # The ONNX file is proven by running it in the reference ONNX executor (a capability flag; built in its file).
    onnx = c.onnx()
    ex = get_runtime(onnx_reference()).open_graph(Graph(onnx=onnx, workdir=onnx.parent, name="proof",
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
