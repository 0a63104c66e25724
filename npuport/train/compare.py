"""Compare two training runs step for step (the control-run check), evaluate a run, sample from it."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from ..errors import ConfigError
from ..fsio import save_with
from ..runtimes import REFERENCE
from .data import Batches, CharVocab, encode_documents, read_documents
from .loop import LMTrainConfig, evaluate, latest_checkpoint, load_run_model, read_metrics, read_run
from .options import sample_runtimes  # noqa: F401 - re-exported


def compare_runs(run_a: str | Path, run_b: str | Path) -> dict:
    """Run A is the reference (usually eager). Curves are aligned on the steps both runs logged."""
    a_info, b_info = read_run(run_a), read_run(run_b)
    ia = LMTrainConfig.from_json(a_info["config"]).identity()
    ib = LMTrainConfig.from_json(b_info["config"]).identity()
    differs = sorted(k for k in ia if k not in ("runtime", "backend") and ia[k] != ib[k])
    ma = {m["step"]: m for m in read_metrics(run_a)}
    mb = {m["step"]: m for m in read_metrics(run_b)}
    steps = sorted(set(ma) & set(mb))
    if len(steps) < 2:
        raise ConfigError(f"{run_a} and {run_b} share {len(steps)} logged steps; need at least 2 to compare")
    la = np.array([ma[s]["loss"] for s in steps])
    lb = np.array([mb[s]["loss"] for s in steps])
    d = np.abs(la - lb)
    pearson = float(np.corrcoef(la, lb)[0, 1]) if la.std() > 0 and lb.std() > 0 else float("nan")
    tps = lambda m: float(np.median([m[s]["tokens_per_s"] for s in steps[min(5, len(steps) // 10):]]))  # noqa: E731
    out = {
        "run_a": str(run_a), "run_b": str(run_b),
        "backend_a": _runtime_of(a_info), "backend_b": _runtime_of(b_info),
        "config_differs": differs, "steps_compared": len(steps),
        "pearson": pearson, "max_abs_loss_diff": float(d.max()), "mean_abs_loss_diff": float(d.mean()),
        "max_rel_loss_diff": float((d / np.maximum(np.abs(la), 1e-12)).max()),
        "final_loss_a": float(la[-1]), "final_loss_b": float(lb[-1]),
        "tokens_per_s_a": tps(ma), "tokens_per_s_b": tps(mb),
    }
    out["tokens_per_s_ratio"] = out["tokens_per_s_b"] / out["tokens_per_s_a"]
    va = [(s, ma[s]["val_loss"]) for s in steps if "val_loss" in ma[s] and "val_loss" in mb[s]]
    if va:
        out["val_loss_a"] = va[-1][1]
        out["val_loss_b"] = mb[va[-1][0]]["val_loss"]
    ca, cb = latest_checkpoint(Path(run_a)), latest_checkpoint(Path(run_b))
    if ca and cb and ca[0] == cb[0]:
        from safetensors import safe_open

        with safe_open(str(ca[1]), "pt") as fa, safe_open(str(cb[1]), "pt") as fb:
            keys = [k for k in fa.keys() if k.startswith("param.")]
            out["final_max_abs_param_diff"] = max(float((fa.get_tensor(k) - fb.get_tensor(k)).abs().max()) for k in keys)
        out["final_step"] = ca[0]
    out["_curves"] = {"steps": steps, "a": la.tolist(), "b": lb.tolist()}
    return out


def plot_compare(result: dict, path: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = result["_curves"]
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    ax.plot(c["steps"], c["a"], label=f"A: {result['backend_a']}", lw=1.5)
    ax.plot(c["steps"], c["b"], label=f"B: {result['backend_b']}", lw=1.0, ls="--")
    ax.set_ylabel("training loss (nats/char)")
    ax.set_title(f"Pearson {result['pearson']:.6f}   max|Δloss| {result['max_abs_loss_diff']:.2e}   "
                 f"tokens/s B/A {result['tokens_per_s_ratio']:.2f}×")
    ax.legend()
    ax2.semilogy(c["steps"], np.maximum(np.abs(np.array(c["a"]) - np.array(c["b"])), 1e-9), lw=0.8)
    ax2.set_ylabel("|Δloss|")
    ax2.set_xlabel("step")
    fig.tight_layout()
    tmp = Path(path).with_name(f".{Path(path).name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)


def eval_run(run: str | Path, corpus: str | Path, corpus_format: str = "auto", batches: int = 32) -> dict:
    model, vocab, cfg = load_run_model(Path(run))
    docs = read_documents(corpus, corpus_format)
    tokens = encode_documents(docs, CharVocab(vocab.chars, "replace"))
    unknown = int((tokens == 1).sum())
    b = Batches(tokens, cfg.batch, cfg.seq_len, cfg.seed, name="evaluation").fixed(batches)
    loss = evaluate(model, b)
    step = latest_checkpoint(Path(run))[0]
    return {"run": str(run), "step": step, "corpus": str(corpus), "tokens_evaluated": int(sum(x.size for x, _ in b)),
            "unknown_characters": unknown, "val_loss": loss, "bpc": loss / math.log(2)}


@torch.no_grad()
def sample(run: str | Path, prompt: str, *, tokens: int = 300, temperature: float = 0.8, seed: int = 0,
           runtime: str = REFERENCE, top_k: int | None = None) -> str:
    """Autoregressive sampling with a fixed window of the run's seq_len.

    A static-graph runtime runs one [1, seq_len] forward graph: the prompt is right-padded and the next
    character is read at the last real position (causal attention makes the padding invisible to it)."""
    if runtime not in sample_runtimes():
        raise ConfigError(f"--runtime {runtime!r} cannot sample: choose one of {', '.join(sample_runtimes())}")
    if temperature < 0:
        raise ConfigError(f"--temperature {temperature}: must be >= 0 (0 = greedy)")
    if tokens < 1:
        raise ConfigError(f"--tokens {tokens}: must be >= 1")
    model, vocab, cfg = load_run_model(Path(run))
    if not prompt:
        raise ConfigError("--prompt is empty; give at least one character")
    ids = list(vocab.encode(prompt, policy="error"))  # characters outside the vocabulary: clear DataError
    T = cfg.seq_len
    forward = _forward_fn(model, runtime, T, Path(run))
    gen = torch.Generator().manual_seed(seed)
    for _ in range(tokens):
        window = ids[-T:]
        logits = forward(window)  # (V,)
        if temperature == 0:
            nxt = int(logits.argmax())
        else:
            z = logits / temperature
            if top_k:
                kth = torch.topk(z, min(top_k, z.numel())).values[-1]
                z = torch.where(z < kth, torch.full_like(z, -math.inf), z)
            nxt = int(torch.multinomial(torch.softmax(z, -1), 1, generator=gen))
        ids.append(nxt)
    return vocab.decode(ids)


def _forward_fn(model, name: str, T: int, run: Path):
    if name == REFERENCE:
        return lambda w: model(torch.tensor([w]))[0, -1].float()
    from ..runtimes import Graph, get_runtime

    runtime = get_runtime(name)
    runtime.require()
    # One [1, T] forward graph per checkpoint, cached in the run (keyed by the weights' step) and reused by later calls.
    step = latest_checkpoint(run)[0]
    graphs = run / "graphs" / "sample"
    path = graphs / f"forward_T{T}_step{step}.onnx"
    if not path.is_file():
        x = torch.zeros(1, T, dtype=torch.long)
        prog = torch.onnx.export(model, (x,), dynamo=True, input_names=["x"], output_names=["logits"], verbose=False)
        graphs.mkdir(parents=True, exist_ok=True)
        save_with(path, lambda tmp: prog.save(str(tmp)))
    example = (torch.zeros(1, T, dtype=torch.long),)
    ex = runtime.open_graph(Graph(onnx=path, workdir=graphs, name=path.stem, fx=lambda: (model, example)))

    def fwd(w):
        buf = np.zeros((1, T), np.int64)
        buf[0, : len(w)] = w
        return torch.from_numpy(np.asarray(ex.run({"x": buf})[0])[0, len(w) - 1])

    return fwd


def _runtime_of(info: dict) -> str:
    cfg = info["config"]
    return cfg.get("runtime") or cfg["backend"]  # runs written before the field was named runtime say backend
