"""The one backend registry. Built-ins register on import; third parties through the `npuport.backends`
entry-point group (value `package.module:BackendClass`)."""

from __future__ import annotations

import logging
from importlib import metadata

from ..registry import Registry
from .base import Backend

log = logging.getLogger(__name__)

BACKENDS: Registry[Backend] = Registry("backend")
_loaded_entry_points = False


def register_backend(cls: type[Backend]) -> type[Backend]:
    BACKENDS.register(cls.name, cls())
    return cls


def _load_builtins() -> None:
    from . import eager, inductor, onnxruntime, openvino, rbln  # noqa: F401  (they register themselves)


def _load_entry_points() -> None:
    global _loaded_entry_points
    if _loaded_entry_points:
        return
    _loaded_entry_points = True
    for ep in metadata.entry_points(group="npuport.backends"):
        if ep.name in BACKENDS:
            continue
        try:
            cls = ep.load()
        except ImportError as e:  # a broken plugin must not take the built-in backends down with it
            log.warning("backend plugin %s could not be imported: %s", ep.value, e)
            continue
        register_backend(cls)


def get_backend(name: str) -> Backend:
    _load_builtins()
    _load_entry_points()
    return BACKENDS.get(name)


def backend_names() -> list[str]:
    _load_builtins()
    _load_entry_points()
    return BACKENDS.names()
