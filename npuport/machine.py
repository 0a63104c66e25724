"""Facts about where a figure was measured: CPU flags, machine description, peak RSS, library versions.

One place for each, so every result JSON, manifest and report records them the same way."""

from __future__ import annotations

import os
import platform
import resource
from importlib import metadata
from pathlib import Path

from .runtimes import get_runtime, runtime_names

# Distributions whose versions are worth recording next to a figure (only those installed are reported): these, and
# each runtime's own (`Runtime.distributions`), so a new runtime reports its SDK without a second list here.
BASE = ("torch", "transformers", "numpy")


def tracked() -> tuple[str, ...]:
    names = [*BASE, *(d for n in runtime_names() for d in get_runtime(n).distributions)]
    return tuple(dict.fromkeys(names))


def cpu_flags() -> list[str]:
    """The vector ISA flags that decide what fp32/bf16/int8 can do here (from /proc/cpuinfo)."""
    wanted = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_bf16", "amx_int8")
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                have = set(line.split(":", 1)[1].split())
                return [f for f in wanted if f in have]
    except OSError:
        pass
    return []


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine() -> dict:
    import torch

    return {
        "cpu_flags": cpu_flags(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
    }


def peak_rss_mb() -> float:
    """This process's peak resident set size in MB (Linux reports KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)


def versions(names: tuple[str, ...] | None = None) -> dict[str, str]:
    out = {}
    for name in tracked() if names is None else names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out
