"""npuport: take PyTorch transformer models to static-graph runtimes and prove nothing changed."""

import logging as _logging

__version__ = "0.1.0"

# With the ethos-u extra installed, transformers imports torchao (an ExecuTorch dependency) on every model load, and
# torchao warns about CUDA kernels a CPU machine cannot load and enums torch now registers itself: nothing a user of
# npuport can act on, printed on every command. Those two loggers only, and only their warnings.
for _name in ("torchao", "torch.utils._pytree"):
    _logging.getLogger(_name).setLevel(_logging.ERROR)
