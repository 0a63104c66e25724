"""npuport: take PyTorch transformer models to static-graph runtimes and prove nothing changed.

The Python surface, for users who never open a shell (each is a function of `npuport.api`, imported on first use so
`import npuport` and the CLI stay fast):

    report = npuport.port(my_module, tokenizer, "out", runtimes=("onnxruntime", "openvino"), buckets=(64, 128))
    npuport.verify("out")                        # hashes + parity again; {"pass": bool, "artifacts": {...}}
    session = npuport.load("out/onnxruntime-fp32"); session(["a text", "another"])  # -> logits (N, C)
    npuport.plan_buckets("rows.jsonl", "model_dir", max_buckets=3)  # buckets from your rows' token lengths
"""

import logging as _logging

from ._version import __version__

# With the ethos-u extra installed, transformers imports torchao (an ExecuTorch dependency) on every model load, and
# torchao warns about CUDA kernels a CPU machine cannot load and enums torch now registers itself: nothing a user of
# npuport can act on, printed on every command. Those two loggers only, and only their warnings.
for _name in ("torchao", "torch.utils._pytree"):
    _logging.getLogger(_name).setLevel(_logging.ERROR)

_API = {"port": "port_model", "verify": "verify_path", "load": "load", "plan_buckets": "plan_buckets_for"}


def __getattr__(name: str):
    if name in _API:
        from . import api

        return getattr(api, _API[name])
    raise AttributeError(f"module 'npuport' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_API])


__all__ = ["__version__", *_API]
