"""Shared by every benchmark script: machine description, versions, date, and atomic result files."""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
sys.path.insert(0, str(HERE.parent))


def versions() -> dict:
    """npuport's one version collector (npuport.machine.versions), plus Python and npuport itself."""
    import npuport
    from npuport.machine import versions as dist_versions

    return {"python": sys.version.split()[0], "npuport": npuport.__version__, **dist_versions()}


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


def save_plot(fig, ax, name: str, xlabel: str, ylabel: str, title: str) -> str:
    """Label, lay out and write results/<name>.png; returns the path recorded in the result JSON."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    RESULTS.mkdir(exist_ok=True)
    fig.savefig(RESULTS / f"{name}.png", dpi=100)
    return f"results/{name}.png"


def run_name(name: str) -> tuple[str, str | None, bool, bool]:
    """A benchmark's run name -> (runtime, training precision, gather-free graph, jittered init). Suffixes, in this
    order: NAME-npu (the gather-free graph), NAME-jitter (init perturbed by one ulp), NAME-bf16 (mixed precision);
    no -bf16 = the runtime's own precision (None)."""
    backend, precision = (name[:-5], "bf16") if name.endswith("-bf16") else (name, None)
    backend, jitter = (backend[:-7], True) if backend.endswith("-jitter") else (backend, False)
    backend, npu = (backend[:-4], True) if backend.endswith("-npu") else (backend, False)
    return backend, precision, npu, jitter
