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


def demo_build(root) -> dict:
    """Which demo detector a benchmark measured (its build record, build.json): a new demo version means new figures."""
    b = json.loads((Path(root) / "build.json").read_text())
    return {k: b.get(k) for k in ("demo_version", "init", "seed", "npuport_version")}


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


CPUID_AVX2 = {"CPUID": "AVX-512, VNNI, BF16, FP16 and AMX bits cleared (benchmarks/cpuid_avx2.c, LD_PRELOAD)"}


def cpuid_avx2_env(workdir: str) -> dict:
    """The environment that makes a child process see an AVX2 machine's CPUID (benchmarks/cpuid_avx2.c, compiled
    here into workdir). Every library then picks its AVX2 kernels itself, ONNX Runtime's MLAS included, which has no
    switch of its own. Needs gcc and the kernel's CPUID faulting (flag cpuid_fault in /proc/cpuinfo)."""
    import shutil
    import subprocess

    if "cpuid_fault" not in Path("/proc/cpuinfo").read_text().split():
        raise SystemExit("this machine has no CPUID faulting (no cpuid_fault flag in /proc/cpuinfo): the AVX2 CPUID "
                         "cannot be shown to the libraries here; run this part on an AVX2 machine instead")
    if not shutil.which("gcc"):
        raise SystemExit("gcc is needed to build benchmarks/cpuid_avx2.c: install it (apt-get install gcc)")
    so = f"{workdir}/cpuid_avx2.so"
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", so, str(HERE / "cpuid_avx2.c"), "-ldl"], check=True)
    env = {"LD_PRELOAD": " ".join(filter(None, (so, os.environ.get("LD_PRELOAD"))))}
    rc = subprocess.run(["true"], env={**os.environ, **env}).returncode
    if rc != 0:  # 97: the library could not turn CPUID faulting on (a container that forbids arch_prctl)
        raise SystemExit(f"benchmarks/cpuid_avx2.c could not take over CPUID here (a process with it exited {rc}): "
                         "run this part on an AVX2 machine instead")
    return env


def cpuid_seen() -> dict:
    """What the libraries in this process detected (evidence the AVX2 CPUID took), and the CPUIDs served so far."""
    import ctypes

    import numpy as np
    import openvino as ov
    import torch

    so = next((p for p in os.environ.get("LD_PRELOAD", "").split() if p.endswith("cpuid_avx2.so")), None)
    traps = None
    if so:
        fn = ctypes.CDLL(so).cpuid_avx2_traps
        fn.restype = ctypes.c_ulong
        traps = fn()
    feats = np._core._multiarray_umath.__cpu_features__
    return {"torch": torch.backends.cpu.get_cpu_capability(),
            "numpy": sorted(k for k in ("AVX2", "AVX512F", "AVX512_SKX", "AVX512_CNL", "AVX512VNNI") if feats.get(k)),
            "openvino": ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"), "cpuid_traps": traps}
