"""Plots people would rather look at than read (matplotlib, Agg backend, PNG)."""

from __future__ import annotations

from pathlib import Path


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def latency_vs_length(per_bucket: dict, path: Path) -> str:
    """per_bucket: {seq: {path_name: stats}} -> p50 latency (with p99 whiskers) against sequence length."""
    plt = _plt()
    path.parent.mkdir(parents=True, exist_ok=True)
    seqs = sorted(int(s) for s in per_bucket)
    names = list(per_bucket[str(seqs[0])] if str(seqs[0]) in per_bucket else per_bucket[seqs[0]])
    fig, ax = plt.subplots(figsize=(6, 4))
    for n in names:
        p50 = [per_bucket[str(s)][n]["p50_ms"] for s in seqs]
        p99 = [per_bucket[str(s)][n]["p99_ms"] for s in seqs]
        ax.errorbar(seqs, p50, yerr=[[0] * len(seqs), [b - a for a, b in zip(p50, p99)]], marker="o", capsize=3, label=n)
    ax.set(xlabel="sequence length (tokens, batch 1)", ylabel="latency ms (p50, bar to p99)", title="Latency vs length")
    ax.set_xscale("log", base=2)
    ax.set_xticks(seqs, [str(s) for s in seqs])
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


def latency_distribution(samples: dict[str, list[float]], path: Path, title: str) -> str:
    plt = _plt()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 4))
    names = list(samples)
    ax.boxplot([samples[n] for n in names], showfliers=True)
    ax.set_xticks(range(1, len(names) + 1), names, rotation=20)
    ax.set(ylabel="latency ms", title=title)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)
