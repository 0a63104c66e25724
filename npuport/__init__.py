"""npuport: take PyTorch transformer models to static-graph runtimes and prove nothing changed."""

__version__ = "0.1.0"
