"""Shared by every benchmark script: machine description, versions, date, and atomic result files."""

from __future__ import annotations

import datetime as dt
import importlib
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
sys.path.insert(0, str(HERE.parent))


def versions() -> dict:
    out = {"python": sys.version.split()[0]}
    for mod in ("npuport", "torch", "transformers", "onnx", "onnxruntime", "openvino", "numpy"):
        try:
            m = importlib.import_module(mod)
            out[mod] = getattr(m, "__version__", None) or getattr(m, "get_version", lambda: "?")()
        except ImportError:
            out[mod] = None
    from npuport.machine import versions as dist_versions

    out.update({k: v for k, v in dist_versions().items() if k.startswith("iree")})
    return out


def meta(script: str) -> dict:
    from npuport.machine import machine

    return {"script": f"benchmarks/{script}", "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "machine": machine(), "versions": versions(), "env": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS",) if os.environ.get(k)}}


def write_result(name: str, data: dict) -> Path:
    from npuport.fsio import atomic_write

    path = RESULTS / f"{name}.json"
    atomic_write(path, json.dumps(data, indent=2, default=str) + "\n")
    print(f"wrote {path.relative_to(HERE.parent)}")
    return path
