"""eager: the reference. The HF model exactly as a user runs it in PyTorch (the artifact is a detector directory),
and the training control run: `loss.backward()`, `clip_grad_norm_`, `torch.optim.AdamW`. `eager-cuda` is the same
control on a CUDA GPU (the field report's GPU run). torch is imported where it is used: the runtimes' registry
(which the CLI's parser reads) imports this module."""

from __future__ import annotations

from pathlib import Path

from ..spec import torch_dtype
from .base import Runtime, Session
from .registry import register_runtime


class EagerSession(Session):
    def __init__(self, directory: Path, manifest, threads: int | None = None):
        from ..models.detector import load_detector

        self.model = load_detector(directory / "model").to(torch_dtype(manifest.precision)).eval()
        self.shapes = manifest.shapes

    def run(self, feeds):
        import torch

        self.check_shape(feeds)
        with torch.no_grad():
            out = self.model(torch.from_numpy(feeds["input_ids"]), torch.from_numpy(feeds["attention_mask"]))
        return out.float().numpy()


@register_runtime
class EagerRuntime(Runtime):
    name = "eager"
    description = "PyTorch eager (reference)"
    compiles_from = ("torch",)
    runs_graphs = False  # it runs the module itself, not a captured graph
    saves_source = True
    reference = True
    # bf16: torch.autocast around forward and backward, fp32 master weights and AdamW (PyTorch's mixed precision)
    train_precisions = ("fp32", "bf16")
    step_runner = "torch"  # loss.backward() + torch.optim.AdamW on devices[0]: the control run
    distributions = ("torch", "transformers")
    session_class = EagerSession

    def versions(self):
        import torch

        return {"torch": torch.__version__}

    def precisions(self, device):
        return ("fp32", "bf16", "fp16")

    def compile(self, captured, spec, out: Path):
        captured.save_source(out / "model")
        return {"format": "hf-directory"}


@register_runtime
class EagerCudaRuntime(EagerRuntime):
    name = "eager-cuda"
    description = "PyTorch eager on a CUDA GPU (training control run, fp32 with TF32 off)"
    devices = ("cuda",)
    ports = False
    reference = False  # the CPU control is the reference; this is the same control on a GPU

    def available(self):
        import torch

        if not torch.cuda.is_available():
            return False, "no CUDA GPU is visible to torch (this torch build or machine has none)"
        return True, "ok"
