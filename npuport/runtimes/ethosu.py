"""ethos-u: Arm Ethos-U55 / U65 / U85 microNPUs through ExecuTorch's Arm backend (`pip install "npuport[ethos-u]"`).

Compile, per shape: torch.export of the adapted module -> PT2E int8 quantisation (EthosUQuantizer: symmetric,
per-channel weights) calibrated on the user's rows -> TOSA (INT profile) -> Vela, Arm's NPU compiler -> a `.pte`
for an Ethos-U board (ExecuTorch's arm_executor_runner). Vela's performance report (cycles, estimated time at the
target's clock, SRAM / flash use, ops on the NPU) goes into the manifest.

What executes here: no Ethos-U board or Arm FVP installs from a registry, so "running" the artifact means the TOSA
reference model (tosa-tools) executing the exact `.tosa` partitions that were handed to Vela, with the host-side
ops between them (embedding lookup on the U55, mask building, quantise / dequantise) run by PyTorch's kernels from
the stored edge graph. `executes: reference`. Vela compiles from the same TOSA, so what the reference model computes
is what the NPU binary is built to compute; the cycle figures are Vela's estimates, not a measurement.
"""

from __future__ import annotations

import contextlib
import csv
import json
import logging
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ArtifactError, ConfigError
from ._provenance import shared_provenance
from ._qkv_layout import separate_qkv_projections
from ._rope_layout import rope_in_token_layout
from .base import Runtime, ShapeSession
from .ethosu_quant import (
    MASKED_SCORE,
    SharedAnnotationGraph,
    compile_spec,
    integer_form,
    module_groups,
    quantize,
    quiet,
    scales_layernorm,
)
from .registry import register_runtime

if TYPE_CHECKING:  # torch is imported where it is used: the CLI's parser imports this module
    import torch

# Accelerator configurations Vela knows (MACs per cycle after the dash). Vela's default system configs: U55 on a
# 500 MHz Corstone-300 (shared SRAM), U65 at 1 GHz (384 KB dedicated SRAM), U85 at 1 GHz on DRAM.
TARGETS = ("ethos-u55-128", "ethos-u55-256", "ethos-u65-256", "ethos-u85-256", "ethos-u85-512")
TOP_OPS = 12  # per-op rows (by cycles) kept per shape for the report
# Host ops every integer NPU program has at its edges (quantise the inputs, cast, dequantise the logits): they do
# not count against "the whole graph on the NPU".
IO_OPS = {"quantized_decomposed.quantize_per_tensor.default", "quantized_decomposed.dequantize_per_tensor.default",
          "dim_order_ops._to_dim_order_copy.default"}


@contextlib.contextmanager
def _vela_parts(workdir: Path):
    """Give each partition Vela compiles its own output folder and keep the exact TOSA bytes it was handed.

    ExecuTorch's Ethos-U backend writes every partition's Vela report into one folder (the last one wins) and keeps
    no TOSA; wrapping its call to `vela_compile` is the one place both are visible."""
    from executorch.backends.arm.ethosu import backend

    parts: list[dict] = []
    original = backend.vela_compile

    def wrapped(tosa, args, verbose=False, intermediate_path=None, block_placements=None):
        d = workdir / f"part{len(parts)}"
        d.mkdir(parents=True, exist_ok=True)
        res = original(tosa, list(args), False, str(d), block_placements)
        parts.append({"tosa": bytes(tosa), "processed": res.processed_bytes, "dir": d})
        return res

    backend.vela_compile = wrapped
    try:
        yield parts
    finally:
        backend.vela_compile = original


def _vela_figures(part_dir: Path) -> dict:
    out = part_dir / "output"
    summary = next(out.glob("out_summary_*.csv"), None)
    if summary is None:
        raise ArtifactError(f"Vela wrote no performance summary in {out}")
    s = next(csv.DictReader(summary.open()))
    layers = list(csv.DictReader((out / "out_per-layer.csv").open()))
    by_op: Counter = Counter()
    for row in layers:
        by_op[(row["Original Operator"], row["Target"])] += int(float(row["Op Cycles"]))
    total = max(1, sum(by_op.values()))
    return {
        "accelerator": s["accelerator_configuration"], "system_config": s["system_config"],
        "clock_mhz": float(s["core_clock"]) / 1e6, "cycles": int(float(s["cycles_total"])),
        "npu_cycles": int(float(s["cycles_npu"])), "estimated_ms": float(s["inference_time"]) * 1e3,
        "sram_kib": float(s["sram_memory_used"]), "off_chip_flash_kib": float(s["off_chip_flash_memory_used"]),
        "dram_kib": float(s["dram_memory_used"]), "macs": int(float(s["nn_macs"])),
        "npu_ops": sum(1 for r in layers if r["Target"] == "NPU"), "cpu_ops": sum(1 for r in layers if r["Target"] != "NPU"),
        "top_ops": [{"op": op, "target": tgt, "cycles": c, "share": round(c / total, 4)}
                    for (op, tgt), c in by_op.most_common(TOP_OPS)],
    }


def _delegate_meta(lowered) -> list[dict]:
    outs = lowered.original_module.graph.output_node().args[0]
    meta = []
    for n in outs:
        v = n.meta["val"]
        meta.append({"shape": [int(d) for d in v.shape], "dtype": str(v.dtype).removeprefix("torch."),
                     "dim_order": [int(d) for d in v.dim_order()]})
    return meta


@contextlib.contextmanager
def _graph_layout(qat: bool):
    """ModernBERT's attention in the NPU-friendly layout while the compile exports it (_rope_layout, _qkv_layout).
    Not for a QAT port: its trained fake-quant modules belong to the graph as QAT exported it (HF's layout)."""
    if qat:
        yield [], []
        return
    with rope_in_token_layout() as rope, separate_qkv_projections() as qkv:
        yield rope, qkv


@contextlib.contextmanager
def _stdout_silenced():
    import os
    import sys

    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


class _Reference:
    """Runs delegate partitions in the TOSA reference model."""

    def __init__(self, tosa: list[bytes], outputs: list[list[dict]]):
        self.tosa, self.outputs = tosa, outputs

    def __call__(self, index: int, inputs: list) -> list[torch.Tensor]:
        import torch
        import tosa_reference_model as ref

        arrays = [np.ascontiguousarray(t.detach().numpy()) for t in inputs]
        with _stdout_silenced():  # the reference model prints a version note per load straight to fd 1
            results, status = ref.run(self.tosa[index], arrays, initialize_variable_tensor_from_numpy=True)
        if status != ref.GraphStatus.TOSA_VALID:
            raise ArtifactError(f"the TOSA reference model rejected partition {index}: {status}")
        tensors = []
        for arr, m in zip(results, self.outputs[index]):
            t = torch.from_numpy(np.ascontiguousarray(arr))
            order = m["dim_order"]
            t = t.reshape([m["shape"][i] for i in order]).permute([order.index(i) for i in range(len(order))])
            tensors.append(t.contiguous())
        return tensors


def _load_program(directory: Path, stem: str):
    from ._edgegraph import HostProgram

    graph = json.loads((directory / f"{stem}.json").read_text())
    tosa = [(directory / d["file"]).read_bytes() for d in graph["delegates"]]
    from safetensors.torch import load_file

    return HostProgram(graph, load_file(str(directory / f"{stem}.safetensors")),
                       _Reference(tosa, [d["outputs"] for d in graph["delegates"]]))


class EthosUSession(ShapeSession):
    def open_shape(self, b, t):
        return _load_program(self.directory, f"ethosu_{b}x{t}_host")

    def run_shape(self, program, feeds):
        import torch

        ids, mask = (torch.from_numpy(np.ascontiguousarray(feeds[k], dtype=np.int64)) for k in ("input_ids", "attention_mask"))
        with torch.no_grad():
            return program(ids, mask)[0].float().numpy()


def raised_groups(spec, groups: dict) -> tuple[list[str], list[str]]:
    from ._quantize import raised_groups as raised

    return raised(spec, groups, EthosURuntime.default_int16)


SENSITIVITY_ROWS = 16


def _sensitivity(captured, spec) -> dict:
    """Per group: every activation at 16 bits except this group's at 8, against the float model, on up to
    SENSITIVITY_ROWS calibration rows at the smallest shape. Judged on the fake-quantised PT2E graph, which the TOSA
    reference model reproduces (exactly at int8; within the 16-bit LayerNorm's rounding at a16w8, see the proof),
    so no Vela compile per group; the decisions of each --keep-fp32 auto round are judged on the reference model."""
    import torch

    from ..parity import agreement

    shape = spec.shapes.shapes()[0]
    eu_spec, example = compile_spec(spec.device), captured.example(shape)
    calib = captured.calibration_batches(shape, spec.calibration)
    rows = calib[:SENSITIVITY_ROWS]
    with torch.no_grad():
        ref = torch.cat([captured.reference(ids, mask) for ids, mask in rows]).float().numpy()
    res, shared = {}, SharedAnnotationGraph()  # each round quantises every node, only the widths differ
    for g in [g for g in module_groups(captured.static) if not g.startswith("layer.")]:
        qm = quantize(captured.export, captured.static, example, calib, eu_spec, "int16", lowered=(g,), shared=shared)
        with torch.no_grad():
            got = torch.cat([qm(ids, mask) for ids, mask in rows]).float().numpy()
        agree, dl = agreement(ref, got, captured.task)
        res[g] = {"max_abs_logit_diff": dl, "decision_agreement": agree, "rows": len(rows),
                  "judged_on": "fake-quantised graph"}
    return res


def _compile_shape(captured, spec, shape, out: Path, work: Path) -> dict:
    import torch
    from executorch.backends.arm.ethosu import EthosUPartitioner
    from executorch.exir import to_edge_transform_and_lower

    from . import _edgegraph as edgegraph

    b, t = shape
    eu_spec = compile_spec(spec.device)
    example = captured.example(shape)
    raised, _ = raised_groups(spec, module_groups(captured.static))
    qat_fq = None
    t0 = time.perf_counter()
    if spec.options.get("qat"):  # the ranges QAT trained, not a calibration
        from .ethosu_qat import from_qat

        qm, qat_fq = from_qat(captured, spec, shape, example)
    else:
        calib = captured.calibration_batches(shape, spec.calibration)
        qm = quantize(captured.export, captured.static, example, calib, eu_spec, spec.precision, tuple(raised),
                       host=tuple(spec.options.get("keep_fp32") or ()))
    with torch.no_grad():
        ep = torch.export.export(qm, tuple(example), strict=True)
    t1 = time.perf_counter()
    with _vela_parts(work / f"{b}x{t}") as parts:
        edge = to_edge_transform_and_lower(ep, partitioner=[EthosUPartitioner(eu_spec)])
    t2 = time.perf_counter()
    program = edge.exported_program()
    delegates, ids_of = [], {}
    for name, lowered in program.graph_module.named_children():
        if not name.startswith("lowered_module"):
            continue
        k = next((i for i, p in enumerate(parts) if p["processed"] == lowered.processed_bytes), None)
        if k is None:
            raise ArtifactError(f"partition {name}: no Vela compile matches its payload")
        fname = f"ethosu_{b}x{t}_p{len(delegates)}.tosa"
        (out / fname).write_bytes(parts[k]["tosa"])
        ids_of[name] = len(delegates)
        delegates.append({"file": fname, "outputs": _delegate_meta(lowered), "vela": _vela_figures(parts[k]["dir"])})
    graph, tensors = edgegraph.to_json(program, ids_of)
    graph["delegates"] = [{k: d[k] for k in ("file", "outputs")} for d in delegates]
    edgegraph.save(out, f"ethosu_{b}x{t}_host", graph, tensors)
    # last: to_executorch plans memory in place (out-variant kernels), after which the graph is no longer portable
    (out / f"ethosu_{b}x{t}.pte").write_bytes(edge.to_executorch().buffer)
    # where this shape's compile time went (Vela's own share is in each partition's figures)
    seconds = {"quantize": round(t1 - t0, 1), "lower": round(t2 - t1, 1), "pte": round(time.perf_counter() - t2, 1)}
    host_ops = Counter(n["op"] for n in graph["nodes"] if n["op"] not in ("constant", "delegate_ref", "delegate", "getitem"))
    proof = _probe_proof(captured, spec, shape, out, qm, qat_fq)
    vela = [d["vela"] for d in delegates]
    return {
        "partitions": len(delegates), "vela": vela, "compile_s": seconds,
        "cycles": sum(v["cycles"] for v in vela), "estimated_ms": round(sum(v["estimated_ms"] for v in vela), 4),
        "host_ops": dict(sorted(host_ops.items())),
        "proof": proof,
    }


def _probe_proof(captured, spec, shape, out: Path, qm, qat_fq) -> dict:
    """The proof of the quantised graph: the reference model must reproduce fake-quantised PyTorch exactly; float
    eager vs the reference model is the quantisation drift (parity on data measures what it does to decisions)."""
    import torch

    b, t = shape
    run = _load_program(out, f"ethosu_{b}x{t}_host")
    fq, fl, qf, form = [], [], [], []
    integer = integer_form(captured.static) if scales_layernorm(spec.precision) else captured.static
    with torch.no_grad():
        for i, (ids, mask) in enumerate(captured.probes((b, t), n=3)):
            got = run(ids, mask)[0].float()
            fq.append(float((qm(ids, mask).float() - got).abs().max()))
            ref = captured.reference(ids, mask)
            fl.append(float((ref - got).abs().max()))
            form.append(float((ref - integer(ids, mask).float()).abs().max()))
            if qat_fq is not None:
                qf.append(float((qat_fq[i] - got).abs().max()))
    return {"fake_quant_vs_reference_max_abs": max(fq), "float_vs_reference_max_abs": max(fl), "probes": len(fq),
            # the float model in the form that was quantised (LayerNorm scaled, ethosu_quant.integer_form)
            "integer_form_vs_float_max_abs": max(form),
            # the trained QAT graph (fake-quant modules, frozen) against the integer graph on the reference model
            **({"qat_forward_vs_reference_max_abs": max(qf)} if qf else {})}


@register_runtime
class EthosURuntime(Runtime):
    name = "ethos-u"
    sdk = "executorch"
    install_hint = 'pip install "npuport[ethos-u]"  (executorch Arm backend + ethos-u-vela + tosa-tools)'
    description = "Arm Ethos-U55/U65/U85 via ExecuTorch + Vela; runs here in the TOSA reference model"
    compiles_from = ("export",)
    max_buckets = 3  # one quantise + Vela compile per shape
    devices = TARGETS
    executes = "reference"
    runs_graphs = False
    trains = False
    partitions = True
    distributions = ("executorch", "ethos-u-vela", "tosa-tools")
    session_class = EthosUSession

    def available(self):
        # torchao (imported by executorch) warns about CUDA kernels it cannot load on a CPU machine: not actionable
        for name in ("torchao", "torch.utils._pytree"):
            logging.getLogger(name).setLevel(logging.ERROR)
        for module, what in (("executorch.backends.arm.ethosu", "executorch"), ("ethosu.vela", "ethos-u-vela"),
                             ("tosa_reference_model", "tosa-tools")):
            try:
                __import__(module)
            except ImportError as e:
                return False, f"{what} is not installed ({e.__class__.__name__}); install with: {self.install_hint}"
        return True, "ok"

    def default_device(self):
        return "ethos-u55-128"  # the most deployed one (Corstone-300); U85 keeps the embedding lookup on the NPU

    def versions(self):
        from importlib.metadata import version

        return {p: version(p) for p in ("executorch", "ethos-u-vela", "tosa-tools", "torch")}

    def precisions(self, device):
        return ("int8", "int16")  # Ethos-U computes in integers only; int16 = 16-bit activations, 8-bit weights

    def default_precision(self, device):
        # int16 (a16w8, LayerNorm in its scaled form) is the recipe that keeps the demo detector's decisions on the
        # U55's reference model; no int8 recipe does yet (benchmarks/npu_mixed.py). A QAT model ports at the
        # precision it was trained for (porting._with_qat).
        return "int16"

    mixes_int16 = True  # per-module a16w8 configs in ExecuTorch's quantizer
    qat = True  # prepare_qat_pt2e with the same quantizer (detector train --qat ethos-u)

    def prepare_qat(self, module, example, device, precision, calibration=None, int16=()):
        self.require()
        if device not in TARGETS:
            raise ConfigError(f"--qat-device {device!r}: choose one of {', '.join(TARGETS)}")
        groups = module_groups(module)
        unknown = [g for g in int16 if g not in groups]
        if unknown:
            raise ConfigError(f"--qat-int16 {','.join(unknown)}: this model has no such group; it has "
                              f"{', '.join(groups)}")
        if int16 and precision != "int8":
            raise ConfigError(f"--qat-int16 raises groups of an int8 graph; at --qat-precision {precision} every "
                              "activation is 16-bit already: drop --qat-int16")
        from .ethosu_qat import qat_prepared

        return qat_prepared(module, example, compile_spec(device), precision, calibration, raised=tuple(int16))
    measures_sensitivity = True  # per group on the fake-quantised graph (_sensitivity); auto's rounds on the reference

    def preflight(self, captured, spec, work: Path):
        """ExecuTorch's Arm partitioner on the quantised edge graph (no TOSA lowering, no Vela: seconds, not
        minutes): which ops it tags for the NPU, which it leaves to the host, and its reason for each rejection."""
        import torch
        from executorch.exir import to_edge_transform_and_lower


        b, t = spec.shapes.largest
        eu_spec = compile_spec(spec.device)
        example = captured.example((b, t))
        rejected: list[str] = []
        handler = _Collect(rejected)
        part_log = logging.getLogger("executorch.backends.arm.tosa.partitioner")
        level = part_log.level
        part_log.addHandler(handler)
        part_log.setLevel(logging.INFO)
        try:
            with warnings.catch_warnings(), quiet(), shared_provenance(), rope_in_token_layout(), \
                    separate_qkv_projections():
                warnings.simplefilter("ignore")
                qm = quantize(captured.export, captured.static, example, captured.probes((b, t)), eu_spec, spec.precision)
                ep = torch.export.export(qm, tuple(example), strict=True)
                dry = _DryPartitioner(eu_spec)
                to_edge_transform_and_lower(ep, partitioner=[dry])
        finally:
            part_log.removeHandler(handler)
            part_log.setLevel(level)
        npu, host, tags = dry.npu, dry.host, dry.tags
        compute = sorted(set(host) - IO_OPS)
        verdict = ("whole graph on the NPU" if len(tags) == 1 and not compute else
                   f"{len(tags)} NPU partition(s); on the host: {', '.join(compute) or 'quantise / dequantise only'}")
        return {"verdict": verdict, "partitions": len(tags), "npu_ops": dict(sorted(npu.items())),
                "host_ops": dict(sorted(host.items())), "rejected": _rejections(rejected), "shape": f"{b}x{t}"}

    def compile(self, captured, spec, out: Path):
        self.require()
        out.mkdir(parents=True, exist_ok=True)
        work = captured.workdir / "vela"
        per_shape = {}
        groups = module_groups(captured.static)
        raised, by_default = raised_groups(spec, groups)  # an unknown group: refused before any work
        host = list(spec.options.get("keep_fp32") or ())  # named only: spec.DEFAULT_KEEP is for CPU runtimes
        unknown = [g for g in host if g not in groups]
        if unknown:
            raise ConfigError(f"--keep-fp32 {','.join(unknown)}: this model has no such group; it has {', '.join(groups)}")
        with (warnings.catch_warnings(), quiet(), shared_provenance(),
              _graph_layout(bool(spec.options.get("qat"))) as (rope_moved, qkv_split)):
            warnings.simplefilter("ignore")
            for b, t in spec.shapes.shapes():
                per_shape[f"{b}x{t}"] = _compile_shape(captured, spec, (b, t), out, work)
        mixed = f" (a16w8 in {', '.join(raised)})" if raised and spec.precision == "int8" else ""
        cost = {"cycles": sum(v["cycles"] for v in per_shape.values()),
                "sram_kib": max(x["sram_kib"] for v in per_shape.values() for x in v["vela"]),
                "host_ops": sorted({op for v in per_shape.values() for op in v["host_ops"]} - IO_OPS)}
        qat = spec.options.get("qat")
        return {"format": "executorch-pte", "target": spec.device, "quantization": f"PT2E static {spec.precision}"
                f"{mixed}, symmetric, per-channel weights" + (", ranges from quantization-aware training" if qat else ""),
                "calibration": qat["describe"] if qat else spec.calibration_source,
                "layernorm_form": "scaled: deviations divided by their mean |d| before the variance (exact in float; "
                                  "keeps rsqrt's table input in [1, C])" if scales_layernorm(spec.precision) else
                                  "as the model has it",
                "masked_score": f"{MASKED_SCORE:g} for -inf (masked attention keys) before quantisation, not "
                                "ExecuTorch's -256: the softmax input's range, and so its step, stays near the scores'",
                # ExecuTorch's Arm quantizer configs fix the observers; --calibration-method is refused for ethos-u
                "calibration_method": "QAT (activations: HistogramObserver ranges calibrated before training and "
                                      "held; weights: per-channel min-max of the trained weights)" if qat else
                                      "histogram (activations: HistogramObserver; weights: per-channel min-max)",
                **({"qat": {k: v for k, v in qat.items() if k != "ranges"}} if qat else {}),
                **({"rope_layout": "applied in (B, T, H, D), before the head transpose: the same values, and no "
                                   "permutes through the rotation for the Arm backend to move"} if rope_moved else {}),
                **({"qkv_projections": "separate (the three row blocks of Wqkv): each of q, k, v has its own head "
                                       "transpose, not one of the whole q|k|v tensor"} if qkv_split else {}),
                "int16": raised if spec.precision == "int8" else ["all"], "int16_by_default": by_default,
                "kept_fp32": host,
                **({"sensitivity": _sensitivity(captured, spec)} if spec.options.get("sensitivity")
                   and spec.precision == "int8" else {}),
                # what a recipe costs on this target (per --keep-fp32 auto round): Vela's cycles over every shape,
                # the most SRAM one partition takes, and the compute ops left to the host
                "cost": cost,
                "executes_on": "TOSA reference model (the .tosa handed to Vela) + host ops in PyTorch",
                "whole_graph_on_npu": all(v["partitions"] == 1 and set(v["host_ops"]) <= IO_OPS
                                          for v in per_shape.values()),
                "shapes": per_shape}


class _DryPartitioner:
    """The Ethos-U partitioner with the same decomposition policy as a real compile, whose partition step records
    which nodes it would delegate and then delegates none, so no TOSA lowering or Vela run follows."""

    def __new__(cls, eu_spec):
        from executorch.backends.arm.ethosu import EthosUPartitioner
        from executorch.exir.backend.partitioner import PartitionResult

        class Dry(EthosUPartitioner):
            def partition(self, exported_program):
                res = super().partition(exported_program)
                self.npu, self.host, self.tags = Counter(), Counter(), set()
                for n in exported_program.graph.nodes:
                    if n.op != "call_function" or "getitem" in str(n.target):
                        continue
                    tag = n.meta.pop("delegation_tag", None)
                    (self.npu if tag else self.host)[_op_label(n.target)] += 1
                    if tag:
                        self.tags.add(tag)
                return PartitionResult(tagged_exported_program=res.tagged_exported_program, partition_tags={})

        return Dry(eu_spec)


def _op_label(target) -> str:
    import torch

    op = getattr(target, "_op", None)
    return str(op) if isinstance(op, torch._ops.OpOverload) else getattr(target, "__name__", str(target))


class _Collect(logging.Handler):
    def __init__(self, sink: list[str]):
        super().__init__(logging.INFO)
        self.sink = sink

    def emit(self, record):
        self.sink.append(record.getMessage())


def _rejections(messages: list[str]) -> list[dict]:
    """The partitioner's rejection table (node | target | reason) as rows, one per distinct (op, reason)."""
    rows, seen = [], set()
    for msg in messages:
        for line in msg.splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) >= 3 and cells[0] and not set(cells[0]) <= set("-=+ ") and cells[0].lower() != "node name":
                key = (cells[1], cells[2])
                if key not in seen:
                    seen.add(key)
                    rows.append({"op": cells[1], "reason": cells[2]})
    return rows
