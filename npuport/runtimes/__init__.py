"""Runtimes: one file each, one registry (`registry.py`). Every session npuport builds is built in this folder."""

from ..spec import CompileSpec, ShapeSpec
from .base import CompileInput, Executor, Graph, Runtime, Session, feeds_of
from .eager import EagerRuntime
from .registry import (
                       default_train_runtime,
                       get_runtime,
                       onnx_reference,
                       reference_runtime,
                       register_runtime,
                       runtime_names,
                       train_precision,
)

# The PyTorch eager reference's name, for comparison tables and defaults (the runtime itself says it is the reference)
REFERENCE = EagerRuntime.name

__all__ = ["REFERENCE", "CompileInput", "CompileSpec", "ShapeSpec", "Executor", "Graph", "Runtime", "Session",
           "default_train_runtime", "feeds_of", "get_runtime", "onnx_reference", "reference_runtime",
           "register_runtime", "runtime_names", "train_precision"]
