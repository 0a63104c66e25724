"""Facts about where a figure was measured: CPU flags, machine description, peak RSS, library versions.

One place for each, so every result JSON, manifest and report records them the same way."""

from __future__ import annotations

import os
import platform
import resource
from importlib import metadata
from pathlib import Path

# Distributions whose versions are worth recording next to a figure (only those installed are reported): these, and
# each runtime's own (`Runtime.distributions`), so a new runtime reports its SDK without a second list here.
BASE = ("torch", "transformers", "numpy")


def tracked() -> tuple[str, ...]:
    # imported here: the runtimes' registry imports torch (about 0.2 GB), which a process that only reports its own
    # memory - the demo's parent while its build runs in a child - should not hold for it
    from .runtimes import get_runtime, runtime_names

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


def peak_rss_mb(children: bool = False) -> float:
    """This process's peak resident set size in MB (Linux reports KiB); children=True: the largest of its finished
    child processes' instead."""
    who = resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF
    return round(resource.getrusage(who).ru_maxrss / 1024.0, 1)


def rss_mb() -> float:
    """This process's resident set size now, in MB."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024.0, 1)
    except OSError:
        pass
    return peak_rss_mb()


def release_memory() -> None:
    """Between the stages of a long job: collect garbage and hand the allocator's free pages back to the system.

    glibc keeps freed heap memory in its arenas; after a stage that allocated and freed hundreds of MB (a model
    load, an export, a session) the process held it until exit (measured on the me5-small demo: about 0.4 GB after
    ten training steps alone), and each stage's peak then stacked on the last's."""
    import gc

    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass


def versions(names: tuple[str, ...] | None = None) -> dict[str, str]:
    out = {}
    for name in tracked() if names is None else names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


HEAP_MMAP_THRESHOLD = 4 << 20  # bytes; see bound_heap


def bound_heap() -> None:
    """For a long job in this process (a CLI command, the demo's build process): blocks of 4 MB and up come from
    mmap and go back to the system when freed.

    glibc raises its mmap threshold to the largest block freed so far (up to 32 MB), after which a training loop's
    temporaries - of a different size at every batch width - are carved from its arenas, and the gaps between live
    blocks stay resident: one epoch of the me5-small demo grew from 1.8 to 2.3 GB while its live memory stayed flat.
    A fixed threshold stops that (measured: peak 2.47 -> 2.33 GB, same step time); at 1 MB the peak fell further,
    to 1.9 GB, but each step paid for mapping its temporaries afresh (training 35 % slower). Not called on import:
    a library should not change its host process's allocator."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").mallopt(-3, HEAP_MMAP_THRESHOLD)  # M_MMAP_THRESHOLD; also stops its adjustment
    except (OSError, AttributeError):  # not glibc
        pass
