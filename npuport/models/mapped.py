"""Weights mapped from their safetensors file instead of read into memory.

A model loaded this way holds in memory only the pages it touches: its weights are views of a private (copy-on-
write) mapping of the file, so a frozen 250k-row word-embedding table costs the rows a run looks up, not 384 MB,
and a trained parameter's update copies only its own pages. Measured on the me5-small demo, where every stage that
loads the detector (evaluation, port, the latency benchmark beside each artifact) held the whole table before.

The file's header is validated by safetensors itself (offsets inside the file, sizes that match dtype x shape)
before any view is made; a tensor whose bytes are not aligned for its dtype, or of a dtype numpy cannot view, is
read the ordinary way. npuport replaces files by rename, never in place, so a mapped file's bytes do not change
under a loaded model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

_NUMPY = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32, "I16": np.int16,
          "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_, "BF16": np.uint16}  # bf16: viewed as its bits, see below


def map_safetensors(path: str | Path) -> dict[str, torch.Tensor]:
    from safetensors import safe_open

    path = Path(path)
    with safe_open(str(path), framework="pt") as f:  # validates the header; raises SafetensorError otherwise
        names = list(f.keys())
        with open(path, "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            header = json.loads(fh.read(n))
        base = 8 + n
        buf = np.memmap(path, dtype=np.uint8, mode="c") if path.stat().st_size > base else None
        out = {}
        for name in names:
            info = header[name]
            lo, hi = info["data_offsets"]
            npdt = _NUMPY.get(info["dtype"])
            if npdt is None or buf is None or hi == lo or (base + lo) % np.dtype(npdt).itemsize:
                out[name] = f.get_tensor(name)  # read (a copy): rare dtypes, unaligned or empty tensors
                continue
            t = torch.from_numpy(buf[base + lo : base + hi].view(npdt).reshape(info["shape"]))
            out[name] = t.view(torch.bfloat16) if info["dtype"] == "BF16" else t
    return out


def assign_state(module: torch.nn.Module, state: dict[str, torch.Tensor]):
    """load_state_dict(strict=False) that keeps the given tensors (mapped ones stay mapped) instead of copying them
    into the module's own: each is first cast to the module's dtype where it differs. A module whose parameters are
    shared between names (tied weights) is loaded by copy, which keeps the tie."""
    own = module.state_dict(keep_vars=True)
    if len({id(v) for v in own.values()}) < len(own):
        return module.load_state_dict(state, strict=False)
    state = {k: (v.to(own[k].dtype) if k in own and v.dtype != own[k].dtype else v) for k, v in state.items()}
    return module.load_state_dict(state, strict=False, assign=True)
