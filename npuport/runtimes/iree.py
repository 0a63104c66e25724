"""iree: the MLIR ahead-of-time compiler that several NPU toolchains build on, targeting `llvm-cpu` here.

Encoder artifacts: the captured ONNX graph is imported once per compiled shape (`iree-import-onnx`, dims fixed), its
weights externalised into one parameter archive (`weights.irpa`) shared by every shape, and each shape compiled
to its own VM flatbuffer (`model_BxT.vmfb`) for the host CPU. Graphs (training steps, sampling) compile the same
way, with their weights as inputs. Runs in IREE's `local-task` driver (a thread pool; `local-sync` when one
thread is asked for).

Install: pip install "npuport[iree]"  (iree-base-compiler + iree-base-runtime).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

import numpy as np

from ..errors import ExportError
from ..fsio import atomic_path
from .base import Executor, Graph, Runtime, ShapeSession
from .registry import register_runtime

TARGET = ["--iree-hal-target-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host"]
# Data tiling packs matmul operands into the target's native tile layout: faster LM steps here
# (benchmarks/iree_flags.py). When a graph does not compile with it, it is compiled without (and the manifest says so).
FAST = ["--iree-opt-data-tiling"]
ENTRY = "main_graph"  # iree-import-onnx names the entry function after the ONNX graph
PARAMS_SCOPE = "model"


# iree-import-onnx in a child process (its memory goes back when it ends). `--large-model` keeps the weights out of
# memory (shape inference on the file, each externalised weight read once as it is saved): 0.4 GB instead of 0.95 GB
# for the demo detector. That path hands onnx a pathlib `data_dir`, which onnx's external-data loader rejects (a
# TypeError in iree-base-compiler 3.x), so this launcher passes it on as a string.
_IMPORTER = ("import sys; from iree.compiler.tools.import_onnx.__main__ import main, parse_arguments; "
             "a = parse_arguments(sys.argv[1:]); a.data_dir = a.data_dir and str(a.data_dir); main(a)")


def _import_onnx(onnx_path: Path, mlir: Path, *, data_dir: Path, params: Path | None, save_params: bool) -> None:
    """ONNX -> MLIR (torch dialect). With `params`, weights are externalised into that archive (written once)."""
    cmd = [sys.executable, "-c", _IMPORTER, str(onnx_path), "-o", str(mlir), "--data-dir", str(data_dir)]
    if params is not None:
        cmd += ["--large-model", "--externalize-params", "--params-scope", PARAMS_SCOPE]
        cmd += ["--save-params-to", str(params)] if save_params else ["--no-save-params"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise ExportError(f"iree-import-onnx failed on {onnx_path.name}: {res.stderr.strip()[-500:]}")


def _compile(mlir: Path, vmfb: Path) -> list[str]:
    """Compile to a VM flatbuffer; returns the flags used (TARGET + FAST, or TARGET alone when FAST fails)."""
    import iree.compiler as ic

    first = None
    for flags in (TARGET + FAST, TARGET):
        try:
            ic.compile_file(str(mlir), output_file=str(vmfb), extra_args=flags)
            return flags
        except ic.CompilerToolError as e:
            first = first or e
    lines = [ln.strip() for ln in str(first).splitlines() if ": error: " in ln] or [str(first).splitlines()[0]]
    raise ExportError(f"iree-compile failed on {mlir.name}: {lines[0][:500]}")


def _fixed_dims_copy(onnx_path: Path, dims: dict[str, int], out: Path) -> None:
    """The graph with its named symbolic input dims pinned (IREE compiles one static shape per module); the weights
    stay in the original external-data file."""
    import onnx

    model = onnx.load(str(onnx_path), load_external_data=False)
    for inp in model.graph.input:
        for d in inp.type.tensor_type.shape.dim:
            if d.dim_param in dims:
                value = dims[d.dim_param]
                d.ClearField("dim_param")
                d.dim_value = value
    onnx.save(model, str(out))


class _Device:
    """One IREE device and VM instance per process: every session and graph of this runtime shares them."""

    _cache: dict = {}

    @classmethod
    def get(cls, threads: int | None):
        import iree.runtime as rt

        key = threads or 0
        if key not in cls._cache:
            if threads == 1:
                cfg = rt.Config("local-sync")
            else:
                if threads:  # the task driver's worker count; read when its first device is created
                    rt.flags.parse_flags(f"--task_topology_max_group_count={int(threads)}")
                cfg = rt.Config("local-task")
            cls._cache[key] = cfg
        return cls._cache[key]


def _load_module(cfg, vmfb: Path, params: Path | None):
    import iree.runtime as rt

    modules = []
    if params is not None:
        index = rt.ParameterIndex()
        index.load(str(params))
        modules.append(rt.create_io_parameters_module(cfg.vm_instance, index.create_provider(scope=PARAMS_SCOPE)))
    main = rt.VmModule.mmap(cfg.vm_instance, str(vmfb))
    ctx = rt.SystemContext(vm_modules=[*modules, main], config=cfg)
    return ctx, ctx.modules[main.name][ENTRY]


def _host(out) -> list[np.ndarray]:
    outs = out if isinstance(out, (list, tuple)) else [out]
    return [np.asarray(o.to_host() if hasattr(o, "to_host") else o) for o in outs]


class IreeSession(ShapeSession):
    def prepare(self):
        self.device = _Device.get(self.threads)

    def open_shape(self, b, t):  # (context, function): the function needs its context alive
        return _load_module(self.device, self.directory / f"model_{b}x{t}.vmfb", self.directory / "weights.irpa")

    def run_shape(self, program, feeds):
        return _host(program[1](feeds["input_ids"], feeds["attention_mask"]))[0]


class IreeExecutor(Executor):
    def __init__(self, graph: Graph, threads: int | None, device: str = "cpu"):
        import onnx

        model = onnx.load(str(graph.onnx), load_external_data=False)
        self.input_names = [i.name for i in model.graph.input]
        self.output_names = [o.name for o in model.graph.output]
        digest = hashlib.sha256(Path(graph.onnx).read_bytes()).hexdigest()[:16]
        graph.workdir.mkdir(parents=True, exist_ok=True)
        vmfb = graph.workdir / f"{graph.name}.{digest}.vmfb"  # compiled once per graph content
        self.flags = None  # the flags used, when this executor compiled the graph (None: reused a compiled file)
        if not vmfb.is_file():
            with tempfile.TemporaryDirectory(prefix="npuport-iree-") as tmp:
                src = Path(graph.onnx)
                if graph.dims:
                    src = Path(tmp) / "pinned.onnx"
                    _fixed_dims_copy(graph.onnx, graph.dims, src)
                mlir = Path(tmp) / "graph.mlir"
                _import_onnx(src, mlir, data_dir=Path(graph.onnx).parent, params=None, save_params=False)
                with atomic_path(vmfb) as dst:  # appears whole or not at all: a later run may reuse it
                    self.flags = _compile(mlir, dst)
        self._ctx, self.fn = _load_module(_Device.get(threads), vmfb, None)

    def run(self, feeds):
        return _host(self.fn(*[np.asarray(feeds[n], order="C") for n in self.input_names]))  # keeps 0-d inputs 0-d

    def run_into(self, inputs, outputs):
        # IREE allocates its results in its own (host-visible) buffers: one copy into the caller's state buffers.
        for dst, src in zip(outputs, _host(self.fn(*inputs))):
            np.copyto(dst, src.reshape(dst.shape))


@register_runtime
class IreeRuntime(Runtime):
    name = "iree"
    compact_tables = True
    sdk = "iree.runtime"
    install_hint = 'pip install "npuport[iree]"  (iree-base-compiler and iree-base-runtime)'
    description = "IREE (MLIR AOT compiler) -> llvm-cpu VM flatbuffers, local-task driver"
    compiles_from = ("onnx",)
    max_buckets = 4  # one module compiled per shape
    distributions = ("iree-base-compiler", "iree-base-runtime")
    session_class = IreeSession
    executor_class = IreeExecutor

    def available(self):
        for mod in ("iree.runtime", "iree.compiler"):
            try:
                __import__(mod)
            except ImportError as e:
                return False, f"{mod} is not installed ({type(e).__name__}); install with: {self.install_hint}"
        return True, "ok"

    def versions(self):
        out = {}
        for dist in ("iree-base-compiler", "iree-base-runtime"):
            try:
                out[dist] = metadata.version(dist)
            except metadata.PackageNotFoundError:
                pass
        return out

    def compile(self, captured, spec, out: Path):
        self.require()
        src = captured.onnx()
        out.mkdir(parents=True, exist_ok=True)
        params = out / "weights.irpa"
        flags = {}
        with tempfile.TemporaryDirectory(prefix="npuport-iree-") as tmp:
            for k, (b, t) in enumerate(captured.shapes.shapes()):
                pinned, mlir = Path(tmp) / f"model_{b}x{t}.onnx", Path(tmp) / f"model_{b}x{t}.mlir"
                _fixed_dims_copy(src, {"batch": b, "seq": t}, pinned)
                # every shape references the same named parameters: the archive is written by the first import only
                _import_onnx(pinned, mlir, data_dir=src.parent, params=params, save_params=(k == 0))
                flags[f"{b}x{t}"] = " ".join(_compile(mlir, out / f"model_{b}x{t}.vmfb"))
                mlir.unlink()
        return {"format": "iree-vmfb", "target": "llvm-cpu (host)", "weights": "weights.irpa (shared by every shape)",
                "entry": ENTRY, "compile_flags": flags}

