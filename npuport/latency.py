"""Side-by-side latency of artifacts and eager PyTorch: every path timed interleaved (round robin) in one process,
so machine drift hits all paths alike; plus bucketed vs pad-to-max throughput on a real length mix."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from .artifact import find_artifacts, load_session
from .bench import summarize
from .parity import softmax_dev
from .router import BucketRouter
from .runtimes import REFERENCE, feeds_of

Runner = Callable[[dict], np.ndarray]


def eager_runner(model) -> Runner:
    def run(feeds):
        with torch.no_grad():
            return model(torch.from_numpy(feeds["input_ids"]), torch.from_numpy(feeds["attention_mask"])).float().numpy()

    return run


def interleaved(runners: dict[str, Runner], feeds: dict, runs: int, warmup: int = 2, samples_out: dict | None = None) -> dict[str, dict]:
    """Round robin: run 1 of every path, then run 2 of every path, ... so drift and noise hit all paths alike."""
    samples = {n: [] for n in runners}
    for _ in range(warmup):
        for r in runners.values():
            r(feeds)
    for _ in range(runs):
        for n, r in runners.items():
            t0 = time.perf_counter()
            r(feeds)
            samples[n].append((time.perf_counter() - t0) * 1e3)
    if samples_out is not None:
        samples_out.update(samples)
    return {n: summarize(s) for n, s in samples.items()}


def compiled_runner(model) -> Runner:
    """torch.compile (default mode): what a PyTorch user would try before exporting anything."""
    compiled = torch.compile(model)

    def run(feeds):
        with torch.no_grad():
            return compiled(torch.from_numpy(feeds["input_ids"]), torch.from_numpy(feeds["attention_mask"])).float().numpy()

    return run


COMPARISONS = {REFERENCE: eager_runner, "torch.compile": compiled_runner}


def random_feeds(model, batch: int, seq: int, seed: int = 0) -> dict:
    """Full-length inputs (no padding): the field report's fixed [1, 512] case."""
    g = np.random.default_rng(seed)
    ids = g.integers(10, model.config.vocab_size, size=(batch, seq), dtype=np.int64)
    return feeds_of(ids, np.ones_like(ids))


def sample_feeds(rows: list[np.ndarray], batch: int, seq: int, pad_id: int) -> dict:
    """A realistic input of shape (batch, seq): real token rows (cut to seq), padded."""
    router = BucketRouter([(batch, seq)], pad_id)
    return router.pack([rows[i % len(rows)] for i in range(batch)], seq, batch)


def bench_artifacts(artifacts_root: Path, model_dir: Path, data: Path, runs: int = 30, progress=lambda m: None,
                    mix_rows: int = 120) -> dict:
    """Per bucket, each artifact timed interleaved with eager PyTorch (round robin, one artifact open at a time: a
    118M-parameter model's four sessions and eager side by side held 2.8 GB, measured on the me5-small demo); eager's
    samples pooled over the pairs. Then bucketed vs pad-to-max throughput on the test length mix."""
    from .detector.data import encode, load_examples
    from .machine import release_memory
    from .models.detector import load_detector, load_tokenizer

    model = load_detector(model_dir)
    tok = load_tokenizer(model_dir)
    rows = encode(tok, load_examples(data), 10_000)
    pad = tok.pad_token_id
    del tok  # a 250k-piece tokenizer holds about 0.35 GB; only its ids are needed from here
    release_memory()
    eager = eager_runner(model)
    samples: dict[int, dict[str, list]] = {}
    mix_res, shapes = {}, None
    for art in find_artifacts(artifacts_root):
        manifest, sess = load_session(art)
        name, shapes = manifest.runtime.name, sess.shapes
        try:
            for b, t in sorted(shapes):
                if b != 1:
                    continue
                progress(f"latency at 1x{t}: {name} interleaved with {REFERENCE}, {runs} runs each")
                long_rows = [r for r in rows if len(r) >= t] or rows
                got: dict[str, list] = {}
                interleaved({REFERENCE: eager, name: sess.run}, sample_feeds(long_rows, 1, t, pad), runs, samples_out=got)
                for n, ss in got.items():
                    samples.setdefault(t, {}).setdefault(n, []).extend(ss)
            mix_res[name] = _length_mix(sess, rows[:mix_rows], shapes, pad)
        finally:
            sess.close()
            del sess
            release_memory()
    if shapes is None:
        return {"per_bucket": {}, "length_mix": {}, "length_mix_rows": 0, "length_mix_mean_tokens": 0.0, "runs": runs}
    mix = rows[:mix_rows]
    lengths = [int(min(len(r), max(t for _, t in shapes))) for r in mix]
    per_bucket = {str(t): {n: summarize(ss) for n, ss in by.items()} for t, by in sorted(samples.items())}
    return {"per_bucket": per_bucket, "length_mix": mix_res, "length_mix_rows": len(mix),
            "length_mix_mean_tokens": float(np.mean(lengths)), "runs": runs, "pairing": f"each artifact with {REFERENCE}"}


def _length_mix(sess, mix: list, shapes, pad: int) -> dict:
    """The test split's real lengths, every row padded to the largest bucket vs routed to its bucket."""
    routers = {"buckets": BucketRouter(shapes, pad),
               "pad_to_max": BucketRouter([s for s in shapes if s[1] == max(t for _, t in shapes)], pad)}
    res, logits = {}, {}
    for mode, router in routers.items():
        t0 = time.perf_counter()
        routed = router.run(sess, mix)
        dt = time.perf_counter() - t0
        logits[mode] = routed.logits
        res[mode] = {"rows_per_s": len(mix) / dt, "mean_ms": dt * 1e3 / len(mix)}
    pa, pb = softmax_dev(logits["buckets"]), softmax_dev(logits["pad_to_max"])
    res["speedup"] = res["buckets"]["rows_per_s"] / res["pad_to_max"]["rows_per_s"]
    res["decision_agreement"] = float(np.mean((pa >= 0.5) == (pb >= 0.5)))
    res["max_abs_prob_diff"] = float(np.abs(pa - pb).max())
    return res
