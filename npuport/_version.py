"""The version, in a leaf of its own: modules read it from here, so the package's __init__ (which exposes the Python
API lazily) is imported by nobody inside npuport."""

__version__ = "0.1.0"
