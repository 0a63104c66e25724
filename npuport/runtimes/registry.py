"""The one runtime registry. Built-ins register on import; third parties through the `npuport.runtimes`
entry-point group (value `package.module:RuntimeClass`). CLI choices and `doctor` read this registry only."""

from __future__ import annotations

import logging
from importlib import metadata
from pathlib import Path

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


def runtime_names(*, ports: bool | None = None, trains: bool | None = None, runs_graphs: bool | None = None,
                  default_port: bool | None = None) -> list[str]:
    """Registered runtime names, filtered by capability flags (None = any)."""
    _all()
    wanted = {"ports": ports, "trains": trains, "runs_graphs": runs_graphs, "default_port": default_port}
    return [n for n in RUNTIMES.names()
            if all(want is None or getattr(RUNTIMES.get(n), flag) == want for flag, want in wanted.items())]
