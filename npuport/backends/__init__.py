from .base import Backend, CompileSpec, Session, ShapeSpec  # noqa: F401
from .registry import backend_names, get_backend, register_backend  # noqa: F401
