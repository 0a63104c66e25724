"""npuport's HistogramObserver range search (runtimes/_histogram.py) returns torchao's own answer, bit for bit, on
the activations of a real (tiny) ModernBERT and on synthetic shapes of distribution, at 8 and 16 bits."""

import time

import pytest
import torch

from npuport.runtimes._histogram import _observer_class, fast_histogram_search

pytestmark = pytest.mark.skipif(_observer_class() is None, reason="another torchao: the search is left as it is")


def _activations():
    """Every leaf module's output of the tiny ModernBERT preset over four random rows: what PT2E observes."""
    from npuport.models.detector import build_preset

    model, acts = build_preset("tiny-modernbert", seed=1).eval(), {}

    def keep(name):
        def hook(mod, inp, out):
            t = out[0] if isinstance(out, tuple) else out
            if torch.is_tensor(t) and t.is_floating_point():
                acts.setdefault(name, []).append(t.detach().flatten())
        return hook

    for name, mod in model.named_modules():
        if name and not list(mod.children()):
            mod.register_forward_hook(keep(name))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for _ in range(4):
            ids = torch.randint(3, 300, (1, 16), generator=g)
            model(input_ids=ids, attention_mask=torch.ones_like(ids))
    g = torch.Generator().manual_seed(1)
    acts["outliers"] = [torch.cat([torch.randn(1000, generator=g), torch.tensor([300.0])]) for _ in range(4)]
    acts["constant"] = [torch.zeros(64)]  # the search's degenerate case (one bin)
    acts["student-t"] = [torch.distributions.StudentT(2.0).sample((2048,)) for _ in range(4)]
    return acts


def _observer(chunks, dtype):
    from torchao.quantization.pt2e.observer import HistogramObserver

    obs = HistogramObserver(dtype=dtype, qscheme=torch.per_tensor_symmetric)
    for chunk in chunks:
        obs(chunk)
    return obs


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16])
def test_same_ranges_and_qparams_as_torchao(dtype):
    cls, acts = _observer_class(), _activations()
    original, slow, fast = cls._non_linear_param_search, 0.0, 0.0
    assert len(acts) > 20
    for name, chunks in acts.items():
        obs = _observer(chunks, dtype)
        t0 = time.perf_counter()
        want, want_q = obs._non_linear_param_search(), obs.calculate_qparams()
        t1 = time.perf_counter()
        with fast_histogram_search():
            assert cls._non_linear_param_search is not original
            got, got_q = obs._non_linear_param_search(), obs.calculate_qparams()
        fast += time.perf_counter() - t1
        slow += t1 - t0
        assert cls._non_linear_param_search is original  # restored when the block ends
        for a, b in zip(want + want_q, got + got_q, strict=True):
            assert torch.equal(a, b), (name, want, got)
    print(f"{len(acts)} observers: torchao {slow * 1e3:.0f} ms, npuport {fast * 1e3:.0f} ms")
