"""The one runtime registry. Built-ins register on import; third parties through the `npuport.runtimes`
entry-point group (value `package.module:RuntimeClass`). CLI choices and `doctor` read this registry only."""

from __future__ import annotations

import logging
from importlib import metadata
from pathlib import Path

from ..errors import ConfigError
from ..registry import Registry
from .base import Runtime

log = logging.getLogger(__name__)

RUNTIMES: Registry[Runtime] = Registry("runtime")
ENTRY_POINT_GROUP = "npuport.runtimes"
NOT_RUNTIMES = {"base", "registry"}
_loaded_entry_points = False


def register_runtime(cls: type[Runtime]) -> type[Runtime]:
    RUNTIMES.register(cls.name, cls())
    return cls


def _load_builtins() -> None:
    """Every module in this folder is a runtime: a new one is one file, found here without a second list."""
    import importlib
    import pkgutil

    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if info.name not in NOT_RUNTIMES and not info.name.startswith("_"):
            importlib.import_module(f"{__package__}.{info.name}")  # registers itself; imports no SDK


def _load_entry_points() -> None:
    global _loaded_entry_points
    if _loaded_entry_points:
        return
    _loaded_entry_points = True
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in RUNTIMES:
            continue
        try:
            cls = ep.load()
        except ImportError as e:  # a broken plugin must not take the built-in runtimes down with it
            log.warning("runtime plugin %s could not be imported: %s", ep.value, e)
            continue
        register_runtime(cls)


def _all() -> None:
    _load_builtins()
    _load_entry_points()


def get_runtime(name: str) -> Runtime:
    _all()
    return RUNTIMES.get(name)


def runtime_names(**flags) -> list[str]:
    """Registered runtime names whose capability flags equal the values given (e.g. ports=True, trains=True)."""
    _all()
    return [n for n in RUNTIMES.names() if all(getattr(RUNTIMES.get(n), f) == want for f, want in flags.items())]


def _the(flag: str) -> str:
    names = runtime_names(**{flag: True})
    if not names:
        raise ConfigError(f"no registered runtime declares {flag}; known: {', '.join(runtime_names())}")
    return names[0]


def reference_runtime() -> str:
    """PyTorch eager: what every parity and speed figure is measured against."""
    return _the("reference")


def onnx_reference() -> str:
    """The reference ONNX executor, which proves a captured ONNX file equals eager."""
    return _the("onnx_reference")


def default_train_runtime() -> str:
    return _the("default_train")


def train_precision(name: str, precision: str | None) -> str:
    """The precision a training run on `name` uses: the one asked for if that runtime trains in it, else an error
    naming the runtimes that do; None = the runtime's own (the first of its train_precisions)."""
    rt = get_runtime(name)
    if precision is None:
        return rt.train_precisions[0]
    if precision not in rt.train_precisions:
        can = [n for n in runtime_names(trains=True) if precision in get_runtime(n).train_precisions]
        raise ConfigError(f"runtime {name!r} trains in {', '.join(rt.train_precisions)}, not {precision}; "
                          f"runtimes that train in {precision}: {', '.join(can) or '(none)'}")
    return precision
