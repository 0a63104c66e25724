"""HistogramObserver's range search, the same answer without a Python loop over tensor elements.

PT2E's HistogramObserver (torchao) picks each activation's range with a search that moves a lower and an upper
quantile bound by 1e-5 per iteration, and in every iteration rescans the cumulative histogram bin by bin with
0-dim tensor comparisons: up to 100,000 iterations of a few microseconds each per observer. py-spy on an Ethos-U port
of the tiny test model put half of the whole port there (`convert_pt2e`, every observer once per quantisation; a
sensitivity run quantises once per group). The scans are searches in a non-decreasing array (a cumulative sum of
non-negative counts), so `bisect` finds the same bins, provided the comparisons are made as torch makes them: a
Python float compared with a float32 tensor is first rounded to float32. Everything else (the error of each
candidate range, the stopping rule, the returned min and max) is torchao's own code, called as it is.

`tests/test_histogram_search.py` checks equality against torchao's method on random and real histograms.
Applied only inside `fast_histogram_search()`, and only where the method is still the one this was written from.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import hashlib
import inspect

# sha256 of the torchao _non_linear_param_search source this reproduces (torchao 0.18.0); another source is left alone
_KNOWN = {"9306a687ba73a3044c555e58d19ad69b11ee000779a3088e55da08b954b472eb"}


def _skip_unchanged(alpha: float, beta: float, stepsize: float, total: float, c_end: float, can_move: bool,
                    chunk: int = 8192) -> float:
    """The iterations after one that moved no bin, run at once: beta as torchao's loop leaves it before the next
    iteration that moves a bin (or ends the loop).

    An iteration that moves no bin can only be one that lowers beta (moving the start bin always moves it), so it
    left alpha, and with it the left bound, as they were: the following iterations move nothing while the upper
    bound keeps `csum[end]` at or below it. numpy's `subtract.accumulate` subtracts in order, one rounding per step,
    the same doubles as the loop's `beta - stepsize`; the products are rounded to float32 as torch does."""
    import numpy as np

    c32 = np.float32(c_end)
    while True:
        seq = np.subtract.accumulate(np.concatenate(([beta], np.full(chunk, stepsize))))
        runs = alpha < seq[:-1]  # the loop's test before each iteration
        if can_move:  # ... and the iteration leaves the end bin where it is
            runs &= ~((seq[1:] * total).astype(np.float32) < c32)
        stop = np.flatnonzero(~runs)
        if stop.size:
            return float(seq[stop[0]])
        beta = float(seq[-1])


def _fast_search(self):
    import numpy as np
    import torch

    assert self.histogram.size()[0] == self.bins, "bins mismatch"
    bin_width = (self.max_val - self.min_val) / self.bins
    total = torch.sum(self.histogram).item()
    # float32 values, held as Python floats (exact): compared with float32-rounded bounds, as torch compares
    csum = torch.cumsum(self.histogram, dim=0).tolist()

    stepsize = 1e-5
    alpha, beta = 0.0, 1.0
    start_bin, end_bin = 0, self.bins - 1
    norm_min = float("inf")
    while alpha < beta:
        next_alpha = alpha + stepsize
        next_beta = beta - stepsize
        lo = float(np.float32(next_alpha * total))
        hi = float(np.float32(next_beta * total))
        # first bin in [start, end) whose cumulative count reaches lo (else end)
        left = bisect.bisect_left(csum, lo, start_bin, end_bin)
        # last bin in (start, end] whose cumulative count is at most hi (else start)
        right = max(bisect.bisect_right(csum, hi, start_bin, end_bin + 1) - 1, start_bin)

        next_start_bin, next_end_bin = start_bin, end_bin
        if (left - start_bin) > (end_bin - right):
            next_start_bin = left
            alpha = next_alpha
        else:
            next_end_bin = right
            beta = next_beta
        if next_start_bin == start_bin and next_end_bin == end_bin:
            beta = _skip_unchanged(alpha, beta, stepsize, total, csum[end_bin], end_bin > start_bin)
            continue
        norm = self._compute_quantization_error(next_start_bin, next_end_bin)
        if norm > norm_min:
            break
        norm_min = norm
        start_bin, end_bin = next_start_bin, next_end_bin

    new_min = self.min_val + bin_width * start_bin
    new_max = self.min_val + bin_width * (end_bin + 1)
    return new_min, new_max


def _digest(fn) -> str | None:
    try:
        return hashlib.sha256(inspect.getsource(fn).encode()).hexdigest()
    except (OSError, TypeError):
        return None


@functools.cache
def _observer_class():
    """torchao's HistogramObserver when its search is the one `_fast_search` reproduces, else None."""
    try:
        from torchao.quantization.pt2e.observer import HistogramObserver
    except ImportError:
        return None
    return HistogramObserver if _digest(HistogramObserver._non_linear_param_search) in _KNOWN else None


@contextlib.contextmanager
def fast_histogram_search():
    cls = _observer_class()
    if cls is None or cls._non_linear_param_search is _fast_search:
        yield  # another torchao, or already inside: nothing to change
        return
    original = cls._non_linear_param_search
    cls._non_linear_param_search = _fast_search
    try:
        yield
    finally:
        cls._non_linear_param_search = original
