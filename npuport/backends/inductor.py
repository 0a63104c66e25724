"""inductor: torch.export -> AOTInductor package (`model.pt2`). One package serves every compiled shape: static
when there is one shape, else symbolic batch/seq dims bounded by the shape spec (one copy of the weights)."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import numpy as np
import torch

from .base import Backend, CompileSpec, Session
from .registry import register_backend


class InductorSession(Session):
    def __init__(self, directory: Path, manifest: dict):
        import torch._inductor

        self.shapes = [tuple(s) for s in manifest["shapes"]]
        self.runner = torch._inductor.aoti_load_package(str(directory / "model.pt2"))

    def run(self, feeds):
        self.check_shape(feeds)
        with torch.no_grad():
            out = self.runner(torch.from_numpy(feeds["input_ids"]), torch.from_numpy(feeds["attention_mask"]))
        return out.float().numpy().astype(np.float32, copy=False)


@register_backend
class InductorBackend(Backend):
    name = "inductor"
    capture_method = "export"
    description = "torch.export + AOTInductor (C++ package, no Python graph at run time)"

    def available(self):
        import shutil

        if not (shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")):
            return False, "AOTInductor needs a C++ compiler; install with: apt-get install g++"
        return True, "ok"

    def versions(self):
        return {"torch": torch.__version__}

    def precisions(self, device):
        return ("fp32", "bf16", "fp16")

    def compile(self, captured, spec: CompileSpec, out: Path):
        import torch._inductor

        out.mkdir(parents=True, exist_ok=True)
        ep = captured.exported(spec.precision)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            logging.getLogger("torch._inductor").setLevel(logging.ERROR)
            torch._inductor.aoti_compile_and_package(ep, package_path=str(out / "model.pt2"))
        return {"format": "aoti-package", "dynamic": not captured.shapes.static}

    def load(self, directory: Path, manifest: dict) -> Session:
        self.require()
        return InductorSession(directory, manifest)
