"""Buckets planned from data (`--buckets auto`, `npuport plan-buckets`): the sequence-length buckets that minimise
padded tokens on the user's own rows.

A static-shape runtime computes every row at its bucket's length, so the cost of a bucket set is the sum, over rows, of
the smallest bucket that holds each row. Candidate lengths are the rows' lengths rounded up to `align` (8: vector
width and the tile sizes compilers like), capped at the model's positions; an exact dynamic programme over those
candidates finds the best set of at most K, whose largest bucket always holds the longest row (nothing truncated that
fits the model). K is the smaller of what the user asks and what each chosen runtime can compile in its budget (a
runtime states `max_buckets`: Ethos-U and QNN compile each shape on its own).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from .errors import ConfigError


@dataclass(frozen=True)
class BucketPlan:
    buckets: tuple[int, ...]
    rows: int
    real_tokens: int  # the rows' own tokens (truncated at the model's positions)
    padded_tokens: int  # what the planned buckets compute
    pad_to_max_tokens: int  # every row at the largest bucket (one compiled length)
    rows_per_bucket: dict
    max_buckets: int  # K after the runtimes' budgets
    truncated_rows: int  # rows longer than the model's positions
    source: str = ""

    @property
    def saving(self) -> float:
        """Share of pad-to-max's tokens the plan does not compute."""
        return 1.0 - self.padded_tokens / self.pad_to_max_tokens if self.pad_to_max_tokens else 0.0

    def to_json(self) -> dict:
        d = asdict(self)
        d["buckets"] = list(self.buckets)
        d["saving_vs_pad_to_max"] = round(self.saving, 4)
        d["efficiency"] = round(self.real_tokens / self.padded_tokens, 4) if self.padded_tokens else 1.0
        return d

    def summary(self) -> str:
        return (f"buckets {','.join(map(str, self.buckets))} for {self.rows} rows: {self.padded_tokens:,} padded tokens "
                f"vs {self.pad_to_max_tokens:,} padded to {self.buckets[-1]} ({self.saving:.1%} fewer); "
                f"{self.real_tokens / max(self.padded_tokens, 1):.1%} of computed tokens are real")


def plan_buckets(lengths, max_buckets: int, *, limit: int, align: int = 8, source: str = "") -> BucketPlan:
    """The at most `max_buckets` lengths (multiples of `align`, <= `limit`) minimising padded tokens over `lengths`."""
    lengths = [int(n) for n in lengths]
    if not lengths:
        raise ConfigError(f"no rows to plan buckets from{' in ' + source if source else ''}: give labelled rows")
    if max_buckets < 1:
        raise ConfigError(f"--max-buckets {max_buckets}: plan at least 1 bucket")
    if align < 1 or limit < 1:
        raise ConfigError(f"align {align} and limit {limit} must be positive")
    if any(n < 1 for n in lengths):
        raise ConfigError("a row of 0 tokens: every row has at least its special tokens")
    clipped = [min(n, limit) for n in lengths]
    cand = sorted({min(limit, math.ceil(n / align) * align) for n in clipped})
    count = [0] * len(cand)
    for n in clipped:
        count[_first_at_least(cand, n)] += 1
    cum = [0]
    for c in count:
        cum.append(cum[-1] + c)
    m, k_max = len(cand), min(max_buckets, len(cand))
    inf = float("inf")
    # f[k][j]: fewest padded tokens for the rows up to candidate j, with k buckets, the largest being cand[j]
    f = [[inf] * m for _ in range(k_max + 1)]
    back = [[-1] * m for _ in range(k_max + 1)]
    for j in range(m):
        f[1][j] = cand[j] * cum[j + 1]
    for k in range(2, k_max + 1):
        for j in range(m):
            for i in range(j):
                v = f[k - 1][i] + cand[j] * (cum[j + 1] - cum[i + 1])
                if v < f[k][j]:
                    f[k][j], back[k][j] = v, i
    best_k = min(range(1, k_max + 1), key=lambda k: (f[k][m - 1], k))  # ties: fewer buckets (fewer compiles)
    chosen, j = [], m - 1
    for k in range(best_k, 0, -1):
        chosen.append(cand[j])
        j = back[k][j]
    chosen.reverse()
    per = {str(b): 0 for b in chosen}
    for n in clipped:
        per[str(chosen[_first_at_least(chosen, n)])] += 1
    return BucketPlan(buckets=tuple(chosen), rows=len(lengths), real_tokens=sum(clipped),
                      padded_tokens=int(f[best_k][m - 1]), pad_to_max_tokens=len(clipped) * cand[-1],
                      rows_per_bucket=per, max_buckets=max_buckets, truncated_rows=sum(n > limit for n in lengths),
                      source=source)


def _first_at_least(sorted_vals: list[int], n: int) -> int:
    for i, v in enumerate(sorted_vals):
        if v >= n:
            return i
    return len(sorted_vals) - 1
