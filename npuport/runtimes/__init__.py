"""Runtimes: one file each, one registry (`registry.py`). Every session npuport builds is built in this folder."""

from ..spec import CompileSpec, ShapeSpec  # noqa: F401
from .base import Executor, Graph, Runtime, Session, feeds_of  # noqa: F401
from .registry import get_runtime, register_runtime, runtime_names  # noqa: F401
