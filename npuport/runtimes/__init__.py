"""Runtimes: one file each, one registry (`registry.py`). Every session npuport builds is built in this folder."""

from ..spec import CompileSpec, ShapeSpec
from .base import Executor, Graph, Runtime, Session, feeds_of
from .registry import get_runtime, register_runtime, runtime_names

__all__ = ["CompileSpec", "ShapeSpec", "Executor", "Graph", "Runtime", "Session", "feeds_of", "get_runtime",
           "register_runtime", "runtime_names"]
