"""The runtime interface. One file per runtime in this folder; every session npuport builds is built there.

A runtime says what it can do through class attributes (its capability flags) and offers three verbs:

    available() -> (ok, reason)                 reason names the install command when ok is False
    compile(captured, spec, out) -> meta        an encoder artifact: compiled files under `out`, metadata for the manifest
                                                (`captured` is a CompileInput: the narrow view of a captured model)
    open(directory, manifest) -> Session        a loaded encoder artifact: run(feeds) -> logits
    open_graph(graph) -> Executor               any standard-ONNX graph (training steps, sampling, capture proof):
                                                run(feeds) -> outputs, run_into(inputs, outputs) without copies

A runtime module imports its SDK inside its functions only, so a missing SDK costs nothing until it is used, and
then raises BackendUnavailable naming the install command. This folder imports only the leaves below it (spec,
errors, fsio, parity, task, manifest): never capture, models or training. What differs between runtimes is a
capability flag or a method here, so nothing outside this folder branches on a runtime's name.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Protocol

import numpy as np

from ..errors import BackendUnavailable, ConfigError
from ..spec import DEFAULT_KEEP, CompileSpec, ShapeSpec

if TYPE_CHECKING:
    import torch

    from ..manifest import Manifest
    from ..task import Task

Batch = tuple["torch.Tensor", "torch.Tensor"]  # (input_ids, attention_mask), each (B, T) int64


class CompileInput(Protocol):
    """What a runtime compiles an encoder artifact from: the narrow view of a captured model
    (`static.capture.Captured` satisfies it). Runtimes see files, example inputs and the float reference, never the
    capture machinery behind them."""

    shapes: ShapeSpec
    workdir: Path  # where a runtime may write intermediate files
    static: "torch.nn.Module"  # the adapted, static-graph-safe module (runtimes that compile from torch)

    @property
    def task(self) -> "Task": ...  # how logits become scores and decisions (int8 gates compare decisions)

    def onnx(self) -> Path: ...  # one ONNX file for every shape (symbolic batch / seq where there are several)

    def moved_onnx(self, path: Path) -> None: ...  # a runtime moved the ONNX files into its artifact

    def exported(self, precision: str = "fp32", dynamic: bool | None = None) -> Any: ...  # torch.export program

    def export(self, module: "torch.nn.Module", example: Batch) -> Any: ...  # strict torch.export of any module

    def example(self, shape: tuple[int, int] | None = None) -> Batch: ...

    def probes(self, shape: tuple[int, int], n: int = 3, seed: int = 0) -> list[Batch]: ...  # distinct inputs

    def calibration_batches(self, shape: tuple[int, int], rows=()) -> list[Batch]: ...  # the user's rows cut to shape

    def reference(self, ids: "torch.Tensor", mask: "torch.Tensor") -> "torch.Tensor": ...  # eager fp32 logits

    def save_source(self, out: Path) -> None: ...  # the model as a Hugging Face directory


@dataclass(frozen=True, kw_only=True)
class Graph:
    """A static graph to run: the standard-ONNX file every ONNX-compiling runtime accepts, and the torch form for
    runtimes that compile from FX (AOTInductor; for those no ONNX file is written: `onnx` is None). `dims` pins
    symbolic dimensions by name."""

    onnx: Path | None
    workdir: Path  # where a runtime may write what it compiles from this graph
    name: str = "graph"
    dims: dict[str, int] = field(default_factory=dict)
    fx: Callable[[], tuple[Any, tuple]] | None = None  # () -> (GraphModule, example args)
    precision: str = "fp32"  # what the runtime computes in: bf16 only where the runtime lists it in train_precisions


class Executor:
    """An opened graph. Inputs and outputs are positional, in the graph's order."""

    input_names: list[str]
    output_names: list[str]

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        raise NotImplementedError

    def run_into(self, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
        """Write every output into the caller's contiguous buffers (training state is fed back as the next inputs).
        Runtimes that can bind output memory override this; the default copies once."""
        res = self.run(dict(zip(self.input_names, inputs)))
        for dst, src in zip(outputs, res):
            np.copyto(dst, src)

    def close(self) -> None:
        pass


class Session:
    """A loaded encoder artifact: run(feeds) on one of the compiled shapes -> logits (B, num_labels) float32."""

    shapes: list[tuple[int, int]]
    execution_precision: str | None = None

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


class ShapeSession(Session):
    """A loaded artifact with one compiled program per (batch, seq) shape. A runtime says how to open one shape
    (`open_shape`) and how to run it (`run_shape`); the loop over the shapes, the shape check and the float32 logits
    are here, once."""

    def __init__(self, directory: Path, manifest: "Manifest", threads: int | None = None):
        self.directory, self.manifest = directory, manifest
        self.shapes = manifest.shapes
        self.threads = threads or manifest.runtime.options.get("threads") or env_threads()
        self.prepare()
        self.programs = {(b, t): self.open_shape(b, t) for b, t in self.shapes}

    def prepare(self) -> None:
        """Work every shape shares (read the model once, load the weights once)."""

    def open_shape(self, batch: int, seq: int) -> Any:
        raise NotImplementedError

    def run_shape(self, program: Any, feeds: dict[str, np.ndarray]) -> np.ndarray:
        raise NotImplementedError

    def run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        shape = self.check_shape(feeds)
        return np.asarray(self.run_shape(self.programs[shape], feeds), dtype=np.float32)


class Runtime:
    name: ClassVar[str]
    sdk: ClassVar[str | None] = None  # python module whose presence makes the runtime available
    install_hint: ClassVar[str] = ""
    description: ClassVar[str] = ""
    # capability flags (doctor, the CLI's choices and the tests read these)
    compiles_from: ClassVar[tuple[str, ...]] = ("onnx",)  # onnx | export (torch.export) | torch (module / FX)
    devices: ClassVar[tuple[str, ...]] = ("cpu",)
    executes: ClassVar[str] = "executes"
    ports: ClassVar[bool] = True  # builds encoder artifacts (`npuport port`)
    default_port: ClassVar[bool] = False  # in the set `npuport port` compiles when no --runtime is given
    runs_graphs: ClassVar[bool] = True  # open_graph: runs standard-ONNX graphs (sampling, capture proof)
    saves_source: ClassVar[bool] = False  # its artifact is the source model directory (a module object has none)
    # The most sequence buckets `--buckets auto` plans for it: one graph with pinned dims costs little per bucket;
    # a runtime that compiles each shape on its own (a context binary, a Vela command stream) states fewer.
    max_buckets: ClassVar[int] = 8
    # compiles a block-coded word-embedding table (int8 codes x block scales, static/compact.py) as is: a Gather of
    # int8 rows, a Cast and a Mul. Off where an NPU compiler's support for that is unproven (qnn, ethos-u, rbln).
    compact_tables: ClassVar[bool] = False
    trains: ClassVar[bool] = True  # runs a captured training step (`npuport lm train`)
    # `lm train --precision`, the first is the default: fp32; bf16 = mixed precision (bf16 gradient graph, fp32 master
    # weights and AdamW); fp16 = the same with loss scaling (qnn's HTP)
    train_precisions: ClassVar[tuple[str, ...]] = ("fp32",)
    # int8: measures each quantisation group's cost alone (`port --sensitivity`, `--keep-fp32 auto`)
    measures_sensitivity: ClassVar[bool] = False
    # Integer NPUs that mix 8- and 16-bit activations in one graph (weights 8-bit): `--int16 GROUPS` raises groups,
    # and `--keep-fp32 auto` raises the costliest to 16-bit instead of moving them to float on the host.
    # default_int16: the int8 recipe used when --int16 is not given (measured on the demo detector; in the manifest).
    mixes_int16: ClassVar[bool] = False
    default_int16: ClassVar[tuple[str, ...]] = ()
    # how `train/` runs a step here: "graph" (the step graphs through open_graph), "torch" (PyTorch itself, on
    # devices[0]), "mixed" (a 16-bit gradient graph through open_step_graph, the AdamW update in fp32 on the host)
    step_runner: ClassVar[str] = "graph"
    default_train: ClassVar[bool] = False  # what `lm train` runs on without --runtime
    reference: ClassVar[bool] = False  # PyTorch eager: the reference every parity and speed figure is measured against
    onnx_reference: ClassVar[bool] = False  # the reference ONNX executor: it proves a captured ONNX file equals eager
    # NPU targets that partition a graph between the accelerator and the host: `npuport check` looks at them by default
    partitions: ClassVar[bool] = False
    quantizes_dynamic: ClassVar[bool] = False  # `--quantization dynamic` (int8 weights, activations ranged per call)
    calibration_methods: ClassVar[tuple[str, ...]] = ("minmax",)  # `--calibration-method` values it honours
    # SmoothQuant strength its static int8 uses unless `--smooth-quant` says otherwise; None: it cannot apply it
    smooth_quant: ClassVar[float | None] = None
    # static int8: the groups left in float when `--keep-fp32` is not given (spec.DEFAULT_KEEP says why those)
    default_keep: ClassVar[tuple[str, ...]] = DEFAULT_KEEP
    # static int8 with some groups quantised per token at run time (int8 weights; `--per-token GROUPS`), and the
    # groups it does that to when `--per-token` is not given
    quantizes_per_token: ClassVar[bool] = False
    default_per_token: ClassVar[tuple[str, ...]] = ()
    # quantization-aware training through this runtime's own quantizer (`detector train --qat NAME`: prepare_qat),
    # whose learned ranges `port` then uses instead of calibrating (runtimes/_qat.py)
    qat: ClassVar[bool] = False
    distributions: ClassVar[tuple[str, ...]] = ()  # PyPI distributions whose versions go beside every figure
    # parity tolerances that differ from the table's for a precision: {precision: {"logit", "prob", "agreement"}}
    tolerances: ClassVar[dict[str, dict[str, float]]] = {}
    # what `open` and `open_graph` build: Session(directory, manifest, threads), Executor(graph, threads, device)
    session_class: ClassVar[type | None] = None
    executor_class: ClassVar[type | None] = None

    def prepare_qat(self, module, example, device: str, precision: str, calibration=None, int16: tuple[str, ...] = ()):
        """The module as a PT2E graph with this target's fake-quant modules, trainable (`qat` runtimes only); with
        calibration batches, the activation ranges are calibrated as `port` would and held while the weights train;
        the groups in `int16` at 16-bit activations in an int8 graph (as `port --int16` quantises them)."""
        raise ConfigError(f"{self.name} has no quantization-aware training; runtimes that have: see `npuport doctor`")

    @property
    def capture_method(self) -> str:
        """What an encoder artifact of this runtime is compiled from."""
        return self.compiles_from[0]

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
            raise BackendUnavailable(f"runtime {self.name!r} unavailable: {reason}")

    def versions(self) -> dict[str, str]:
        return {}

    def list_devices(self) -> list[str]:
        return list(self.devices)

    def precisions(self, device: str) -> tuple[str, ...]:
        return ("fp32",)

    def default_device(self) -> str:
        """What `port` targets without --device: the CPU where the runtime has one, else its first device."""
        devices = self.list_devices() or list(self.devices)
        return "cpu" if "cpu" in devices else devices[0]

    def default_precision(self, device: str) -> str:
        """What `port` compiles without --precision: fp32 where the device offers it, else its first precision."""
        precisions = self.precisions(device)
        return "fp32" if "fp32" in precisions else precisions[0]

    def capabilities(self) -> dict:
        return {"compiles_from": list(self.compiles_from), "executes": self.executes, "ports": self.ports,
                "runs_graphs": self.runs_graphs, "trains": self.trains, "max_buckets": self.max_buckets,
                "compact_tables": self.compact_tables, "qat": self.qat,
                "train_precisions": list(self.train_precisions) if self.trains else []}

    def check(self, spec: CompileSpec) -> None:
        if not self.ports:
            raise ConfigError(f"runtime {self.name!r} does not build encoder artifacts (it is for training only)")
        self.check_device(spec.device)
        if spec.precision not in self.precisions(spec.device):
            raise ConfigError(f"runtime {self.name!r} on {spec.device} supports precision "
                              f"{', '.join(self.precisions(spec.device))}, not {spec.precision}")

    def check_device(self, device: str) -> None:
        if device not in self.list_devices():
            raise ConfigError(f"device {device!r} not available for runtime {self.name!r}; "
                              f"available: {', '.join(self.list_devices()) or '(none)'}")

    # -- pre-flight
    def preflight(self, captured: CompileInput, spec: CompileSpec, work: Path) -> dict[str, Any]:
        """Before a long compile: which ops of the captured graph the target places on its accelerator and which fall
        back to the host or fail. Runtimes that execute every op they accept (the CPU ones) say so."""
        return {"verdict": "runs every op of the captured graph (no accelerator partitioning)", "npu_ops": {},
                "host_ops": {}, "rejected": []}

    # -- encoder artifacts
    def compile(self, captured: CompileInput, spec: CompileSpec, out: Path) -> dict[str, Any]:
        """Write compiled files under `out`; return runtime metadata for the manifest."""
        raise ConfigError(f"runtime {self.name!r} does not build encoder artifacts")

    def open(self, directory: Path, manifest: "Manifest", threads: int | None = None) -> Session:
        if self.session_class is None:
            raise ConfigError(f"runtime {self.name!r} does not load encoder artifacts")
        self.require()
        return self.session_class(directory, manifest, threads)

    # -- any graph
    def open_graph(self, graph: Graph, threads: int | None = None, device: str = "cpu") -> Executor:
        if self.executor_class is None:
            raise ConfigError(f"runtime {self.name!r} does not run standard-ONNX graphs")
        self.require()
        self.check_device(device)
        if graph.precision != "fp32" and graph.precision not in self.train_precisions:
            raise ConfigError(f"runtime {self.name!r} runs graphs in fp32 only, not {graph.precision}")
        return self.executor_class(graph, threads, device)

    # -- training
    def open_step_graph(self, path: Path) -> tuple[Any, dict]:
        """`step_runner = "mixed"`: compile the gradient graph at `path` for the accelerator -> (a session with
        run(None, feeds), the op types left on the host)."""
        raise ConfigError(f"runtime {self.name!r} has no mixed-precision step graph")


def env_threads() -> int | None:
    """$NPUPORT_THREADS: the threads a loaded artifact's runtime takes when the caller asks for none (unset: the
    runtime's own default, every core). For processes that share the cores: several replicas or test workers, whose
    runtimes would otherwise each start a pool as wide as the machine and slow one another down."""
    import os

    raw = os.environ.get("NPUPORT_THREADS", "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(f"NPUPORT_THREADS={raw!r} is not a positive whole number of threads: set it to one (for "
                          "example NPUPORT_THREADS=1), or unset it to let each runtime use every core")
    return int(raw)


def feeds_of(input_ids: np.ndarray, attention_mask: np.ndarray) -> dict[str, np.ndarray]:
    return {
        "input_ids": np.ascontiguousarray(input_ids, dtype=np.int64),
        "attention_mask": np.ascontiguousarray(attention_mask, dtype=np.int64),
    }
