"""eager: the reference. The HF model exactly as a user runs it in PyTorch; the artifact is a detector directory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from .base import Backend, CompileSpec, Session
from .registry import register_backend


class EagerSession(Session):
    def __init__(self, directory: Path, manifest: dict):
        from ..models.detector import load_detector
        from ..static.capture import DTYPES

        self.model = load_detector(directory / "model").to(DTYPES[manifest["precision"]]).eval()
        self.shapes = [tuple(s) for s in manifest["shapes"]]

    def run(self, feeds):
        self.check_shape(feeds)
        with torch.no_grad():
            out = self.model(torch.from_numpy(feeds["input_ids"]), torch.from_numpy(feeds["attention_mask"]))
        return out.float().numpy()


@register_backend
class EagerBackend(Backend):
    name = "eager"
    capture_method = "torch"
    description = "PyTorch eager (reference)"

    def versions(self):
        return {"torch": torch.__version__}

    def precisions(self, device):
        return ("fp32", "bf16", "fp16")

    def compile(self, captured, spec: CompileSpec, out: Path):
        captured.detector.save_pretrained(out / "model")
        return {"format": "hf-directory"}

    def load(self, directory: Path, manifest: dict) -> Session:
        return EagerSession(directory, manifest)
