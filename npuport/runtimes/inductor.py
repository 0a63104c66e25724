"""inductor: torch.export -> AOTInductor package (`model.pt2`). One package serves every compiled shape: static
when there is one shape, else symbolic batch/seq dims bounded by the shape spec (one copy of the weights).
Graphs (training steps) compile from their FX form, not from ONNX."""

from __future__ import annotations

import logging
import time
import warnings
from pathlib import Path

import numpy as np

from .base import Executor, Graph, Runtime, Session
from .registry import register_runtime


def _aoti_compile(ep, path: Path) -> str:
    from torch._inductor import aoti_compile_and_package

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.getLogger("torch._inductor").setLevel(logging.ERROR)
        return aoti_compile_and_package(ep, package_path=str(path))


class InductorSession(Session):
    def __init__(self, directory: Path, manifest, threads: int | None = None):
        import torch
        import torch._inductor

        self.shapes = manifest.shapes
        self.runner = torch._inductor.aoti_load_package(str(directory / "model.pt2"))

    def run(self, feeds):
        import torch

        self.check_shape(feeds)
        with torch.no_grad():
            out = self.runner(torch.from_numpy(feeds["input_ids"]), torch.from_numpy(feeds["attention_mask"]))
        return out.float().numpy().astype(np.float32, copy=False)


class InductorExecutor(Executor):
    def __init__(self, graph: Graph, threads: int | None, device: str = "cpu"):
        import torch
        from torch._inductor import aoti_load_package

        if graph.fx is None:
            from ..errors import ConfigError

            raise ConfigError(f"the inductor runtime compiles from FX; graph {graph.name!r} has no FX form")
        if threads:
            torch.set_num_threads(int(threads))
        graph.workdir.mkdir(parents=True, exist_ok=True)
        gm, args = graph.fx()
        t0 = time.perf_counter()
        ep = torch.export.export(gm, args, strict=False)
        self.fn = aoti_load_package(_aoti_compile(ep, graph.workdir / f"{graph.name}.pt2"))
        self.compile_s = round(time.perf_counter() - t0, 1)
        self.input_names = [f"in{i}" for i in range(len(args))]
        self.output_names = []

    def run(self, feeds):
        import torch

        return [t.numpy() for t in self.fn(*[torch.from_numpy(np.asarray(a)) for a in feeds.values()])]

    def run_into(self, inputs, outputs):
        import torch

        res = self.fn(*[torch.from_numpy(a) for a in inputs])
        for dst, src in zip(outputs, res):
            np.copyto(dst, src.numpy())  # AOTI allocates its own outputs; one copy per state tensor


@register_runtime
class InductorRuntime(Runtime):
    name = "inductor"
    compact_tables = True
    description = "torch.export + AOTInductor (C++ package, no Python graph at run time)"
    compiles_from = ("export",)
    default_port = True
    session_class = InductorSession
    executor_class = InductorExecutor

    def available(self):
        import shutil

        if not (shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")):
            return False, "AOTInductor needs a C++ compiler; install with: apt-get install g++"
        return True, "ok"

    def versions(self):
        import torch

        return {"torch": torch.__version__}

    def precisions(self, device):
        return ("fp32", "bf16", "fp16")

    def compile(self, captured, spec, out: Path):
        out.mkdir(parents=True, exist_ok=True)
        _aoti_compile(captured.exported(spec.precision), out / "model.pt2")
        return {"format": "aoti-package", "dynamic": not captured.shapes.static}

