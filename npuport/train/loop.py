"""The training loop: one step runner, a run directory, metrics, evaluation, checkpoints and exact resume.

Run directory:
    run.json          config, model config, corpus and vocabulary fingerprints (what a resume must match)
    vocab.json        the character vocabulary
    metrics.jsonl     one line per step {"step","loss","lr","tokens_per_s",…}; eval lines carry "val_loss"
    checkpoints/      step_XXXXXXXX.safetensors: params, Adam moments; metadata: step
    graphs/           the step graph(s) the runtime ran (ONNX, or AOTInductor packages)
    manifest.json     written at the end: graph op types and hashes, runtime, tokens/s, final losses, machine
"""

from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ..errors import ConfigError, DataError
from ..fsio import save_with, write_json_atomic
from ..machine import machine, peak_rss_mb, versions
from ..models.lm import LMConfig, build_lm, count_parameters, cross_entropy, preset_config
from ..runtimes import REFERENCE, train_precision
from ..ui import StepBar
from .core import CKPT_DIR, CheckpointStore, MetricsLog, load_params, run_loop
from .data import (
    DEMO_CORPUS,
    FORMATS,
    Batches,
    CharVocab,
    corpus_fingerprint,
    encode_documents,
    read_documents,
    split_stream,
)
from .select import open_step_runner, training_runtimes
from .step import FORMS, OptimConfig

RUN_FORMAT = 1


@dataclass(frozen=True, kw_only=True)
class LMTrainConfig:
    corpus: str = "demo"  # a path, or "demo" for the embedded stories
    corpus_format: str = "auto"
    preset: str = "small"
    runtime: str = REFERENCE
    steps: int = 500
    batch: int = 16
    seq_len: int = 128
    lr: float = 1e-3  # at 3e-3 the small preset's fp32 trajectory is chaotic: 1 ulp of init noise -> |Δloss| 0.04
    min_lr_ratio: float = 0.1
    warmup: int = 50
    seed: int = 0
    eval_every: int = 50
    eval_batches: int = 8
    ckpt_every: int = 100
    npu_friendly: bool = False  # gather-free graph: one-hot embedding and loss, RoPE rotation as a matmul
    form: str = "fused"
    # None: the runtime's own (fp32; qnn: fp16). bf16: mixed precision (bf16 gradient graph; fp32 master weights, AdamW)
    precision: str | None = None
    val_fraction: float = 0.1
    optim: OptimConfig = field(default_factory=OptimConfig)
    threads: int | None = None  # runtime threads; not part of a run's identity
    keep_checkpoints: int = 3  # the last K checkpoints stay on disk; nor is this
    init_jitter: float = 0.0  # relative noise on the initial weights: measures the fp32 noise floor of a control run
    # a finished run's directory (RUN, or RUN@STEP for one checkpoint): its parameters start this run; the optimizer
    # state, the schedule and the data order start fresh (DiLoCo's warm start)
    init_from: str | None = None

    def __post_init__(self):
        for f in ("steps", "batch", "seq_len", "eval_every", "ckpt_every", "eval_batches"):
            if getattr(self, f) < 1:
                raise ConfigError(f"--{f.replace('_', '-')}={getattr(self, f)}: must be >= 1")
        if self.warmup < 0 or self.lr <= 0 or not 0 <= self.min_lr_ratio <= 1:
            raise ConfigError(f"lr={self.lr} must be > 0, warmup={self.warmup} >= 0, min_lr_ratio in [0, 1]")
        if self.form not in FORMS:
            raise ConfigError(f"--form {self.form!r}: choose one of {', '.join(FORMS)}")
        if self.corpus_format not in FORMATS:
            raise ConfigError(f"--corpus-format {self.corpus_format!r}: choose one of {', '.join(FORMATS)}")
        known = training_runtimes()
        if self.runtime not in known:
            raise ConfigError(f"--runtime {self.runtime!r} cannot train; runtimes that can: {', '.join(known)}")
        object.__setattr__(self, "precision", train_precision(self.runtime, self.precision))

    def identity(self) -> dict:
        """What must match to resume or to compare runs step for step (threads may differ)."""
        d = asdict(self)
        d.pop("threads")
        d.pop("keep_checkpoints")
        return d

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "LMTrainConfig":
        d = dict(d)
        if "backend" in d:  # runs written before the field was named runtime
            d["runtime"] = d.pop("backend")
        d["optim"] = OptimConfig(**d.get("optim", {}))
        d.setdefault("keep_checkpoints", 3)
        return cls(**d)


@dataclass(frozen=True)
class InitSource:
    """The checkpoint a warm-started run begins from (what run.json and the manifest record)."""

    run: Path
    step: int
    path: Path
    vocab: CharVocab
    model: LMConfig

    def record(self) -> dict:
        from ..fsio import sha256_file

        return {"run": str(self.run), "step": self.step, "checkpoint": self.path.name, "sha256": sha256_file(self.path)}


def init_source(cfg: LMTrainConfig) -> InitSource | None:
    """--init-from RUN[@STEP], checked before any output is written: a run directory with that checkpoint."""
    if not cfg.init_from:
        return None
    ref, _, at = cfg.init_from.rpartition("@") if "@" in cfg.init_from else (cfg.init_from, "", "")
    run = Path(ref)
    if not (run / "run.json").is_file():
        raise ConfigError(f"--init-from {cfg.init_from}: {run} is not an npuport LM run (no run.json); give the -o "
                          "directory of a finished `npuport lm train`")
    found = checkpoints(run).entries()
    if at:
        if not at.isdigit():
            raise ConfigError(f"--init-from {cfg.init_from}: the step after @ must be a number, e.g. {run}@200")
        found = [e for e in found if e[0] == int(at)]
    if not found:
        have = ", ".join(str(n) for n, _ in checkpoints(run).entries()) or "none"
        raise ConfigError(f"--init-from {cfg.init_from}: no checkpoint{f' for step {at}' if at else ''} in {run} "
                          f"(checkpoints: {have})")
    step, path = found[-1]
    info = read_run(run)
    return InitSource(run, step, path, CharVocab.from_json(json.loads((run / "vocab.json").read_text())),
                      LMConfig.from_json(info["model"]))


def model_config(cfg: LMTrainConfig, vocab_size: int) -> LMConfig:
    """The run's model: the preset at the corpus's vocabulary, positions sized to the training sequence."""
    return preset_config(cfg.preset, vocab_size, max_seq_len=max(cfg.seq_len, 8))


def lr_at(cfg: LMTrainConfig, step: int) -> float:
    """Linear warmup to `lr` over `warmup` steps, then cosine to `lr * min_lr_ratio` at `steps` (step is 1-based)."""
    if cfg.warmup and step <= cfg.warmup:
        return cfg.lr * step / cfg.warmup
    span = max(1, cfg.steps - cfg.warmup)
    progress = min(1.0, (step - cfg.warmup) / span)
    floor = cfg.lr * cfg.min_lr_ratio
    return floor + (cfg.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


@dataclass
class Corpus:
    docs: list[str]
    vocab: CharVocab
    train: np.ndarray
    val: np.ndarray
    fingerprint: str
    path: str


def load_corpus(cfg: LMTrainConfig, vocab: CharVocab | None = None) -> Corpus:
    path = DEMO_CORPUS if cfg.corpus == "demo" else Path(cfg.corpus)
    docs = read_documents(path, cfg.corpus_format)
    vocab = vocab or CharVocab.build(docs)
    tokens = encode_documents(docs, vocab)
    train, val = split_stream(tokens, cfg.val_fraction)
    need = cfg.seq_len + 1
    if len(train) < need or len(val) < need:
        raise DataError(
            f"{path}: {len(tokens)} characters give train {len(train)} / validation {len(val)} tokens, but one "
            f"sequence needs {need}; use a longer corpus or a smaller --seq-len (now {cfg.seq_len})"
        )
    return Corpus(docs, vocab, train, val, corpus_fingerprint(docs), str(path))


# ---------------------------------------------------------------- run directory

def checkpoints(run: Path, keep: int | None = None) -> CheckpointStore:
    """The run's model checkpoints: checkpoints/step_XXXXXXXX.safetensors (params and both Adam moments)."""
    return CheckpointStore(Path(run) / CKPT_DIR, "step", ".safetensors", keep=keep)


def _ckpt_path(run: Path, step: int) -> Path:
    return checkpoints(run).path(step)


def latest_checkpoint(run: Path) -> tuple[int, Path] | None:
    found = checkpoints(run).entries()
    return found[-1] if found else None


def save_checkpoint(run: Path, step: int, names: list[str], state) -> Path:
    from safetensors.torch import save_file

    params, m, v = state
    tensors = {}
    for prefix, group in (("param", params), ("m", m), ("v", v)):
        for n, t in zip(names, group):
            tensors[f"{prefix}.{n}"] = t.detach().contiguous()
    path = _ckpt_path(run, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    # atomic and durable: a crash leaves the previous checkpoint intact
    return save_with(path, lambda tmp: save_file(tensors, str(tmp), metadata={"step": str(step), "format": f"npuport-lm-{RUN_FORMAT}"}))


def load_checkpoint(path: Path, names: list[str]):
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
        try:
            state = tuple([f.get_tensor(f"{p}.{n}") for n in names] for p in ("param", "m", "v"))
        except Exception as e:  # noqa: BLE001
            raise ConfigError(f"{path}: checkpoint does not match this model ({e})") from e
    return int(meta.get("step", 0)), state


def read_run(run: Path) -> dict:
    p = Path(run) / "run.json"
    if not p.is_file():
        raise ConfigError(f"{run}: not an npuport LM run (no run.json); train one with `npuport lm train -o {run}`")
    return json.loads(p.read_text())


def read_metrics(run: Path) -> list[dict]:
    return MetricsLog(Path(run) / "metrics.jsonl").read()


def load_run_model(run: Path, step: int | None = None):
    """(model with the run's latest (or given) checkpoint, vocab, LMTrainConfig)."""
    info = read_run(run)
    cfg = LMTrainConfig.from_json(info["config"])
    mcfg = LMConfig.from_json(info["model"])
    vocab = CharVocab.from_json(json.loads((Path(run) / "vocab.json").read_text()))
    model = build_lm(mcfg, seed=cfg.seed)
    found = latest_checkpoint(Path(run)) if step is None else (step, _ckpt_path(Path(run), step))
    if found is None or not found[1].is_file():
        raise ConfigError(f"{run}: no checkpoint{'' if step is None else f' for step {step}'}; was the run started?")
    names = [n for n, _ in model.named_parameters()]
    _, (params, _, _) = load_checkpoint(found[1], names)
    with torch.no_grad():
        for p, src in zip(model.parameters(), params):
            p.copy_(src)
    return model.eval(), vocab, cfg


# ---------------------------------------------------------------- evaluation

@torch.no_grad()
def evaluate(model, batches: list[tuple[np.ndarray, np.ndarray]]) -> float:
    """Mean token cross-entropy (nats) over fixed batches, eager fp32: the same yardstick for every backend."""
    total, count = 0.0, 0
    for x, y in batches:
        n = x.size
        total += float(cross_entropy(model(torch.as_tensor(x)), torch.as_tensor(y))) * n
        count += n
    return total / count


# ---------------------------------------------------------------- training

@dataclass
class TrainResult:
    run: Path
    steps: int
    final_loss: float
    val_loss: float | None
    tokens_per_s: float
    manifest: dict


def prepare_run(run: Path, cfg: LMTrainConfig, resume: bool, corpus: Corpus, mcfg: LMConfig) -> dict:
    """A new run directory (refusing a non-empty one), or the checks a resume must pass (config, corpus)."""
    info = {
        "npuport_run": RUN_FORMAT, "config": cfg.to_json(), "model": mcfg.to_json(),
        "corpus": {"path": corpus.path, "fingerprint": corpus.fingerprint, "documents": len(corpus.docs),
                   "train_tokens": int(len(corpus.train)), "val_tokens": int(len(corpus.val))},
        "vocab": {"size": corpus.vocab.size, "fingerprint": corpus.vocab.fingerprint()},
    }
    src = init_source(cfg)
    if src is not None:
        info["init_from"] = src.record()
    existing = run / "run.json"
    if resume:
        old = read_run(run)
        old_cfg = LMTrainConfig.from_json(old["config"]).identity()
        diff = sorted(k for k in old_cfg if old_cfg[k] != cfg.identity()[k])
        if diff:
            pairs = ", ".join(f"{k}: run has {old_cfg[k]!r}, asked {cfg.identity()[k]!r}" for k in diff)
            raise ConfigError(f"cannot resume {run} with a different config ({pairs}); start a new run with -o NEWDIR")
        if old["corpus"]["fingerprint"] != corpus.fingerprint:
            raise ConfigError(f"cannot resume {run}: the corpus changed since the run started (fingerprint differs)")
        return old
    if run.exists() and not run.is_dir():
        raise ConfigError(f"-o {run} is a file, not a directory; give a new or empty -o directory")
    if existing.is_file():
        raise ConfigError(f"{run} already holds a run; continue it with --resume, or pass another -o directory")
    if run.exists() and any(run.iterdir()):
        raise ConfigError(f"{run} exists and is not empty; give a new or empty -o directory")
    run.mkdir(parents=True, exist_ok=True)
    write_json_atomic(run / "vocab.json", corpus.vocab.to_json())
    write_json_atomic(existing, info)
    return info


def train(cfg: LMTrainConfig, run: str | Path, *, resume: bool = False, progress: bool = True,
          on_step: Callable[[dict], None] | None = None) -> TrainResult:
    run = Path(run)
    corpus, mcfg = corpus_and_model_config(cfg, run, resume)
    info = prepare_run(run, cfg, resume, corpus, mcfg)
    threads = cfg.threads or torch.get_num_threads()
    model = initial_model(cfg, mcfg)
    names = [n for n, _ in model.named_parameters()]
    train_b = Batches(corpus.train, cfg.batch, cfg.seq_len, cfg.seed)
    val_b = Batches(corpus.val, cfg.batch, cfg.seq_len, cfg.seed, name="validation").fixed(cfg.eval_batches)
    eval_model = build_lm(mcfg, seed=cfg.seed).eval()

    t0 = time.perf_counter()
    runner = open_step_runner(
        cfg.runtime, model, cfg.optim, batch=cfg.batch, seq_len=cfg.seq_len, form=cfg.form, gather_free=cfg.npu_friendly,
        workdir=run / "graphs", threads=threads, precision=cfg.precision,
    )
    setup_s = time.perf_counter() - t0

    store = checkpoints(run, keep=cfg.keep_checkpoints)
    metrics = MetricsLog(run / "metrics.jsonl")
    if resume:
        start = _restore(store, runner, names, metrics)
    else:
        start = 0
        metrics.reset()

    tokens = cfg.batch * cfg.seq_len
    step_times: list[float] = []

    def one_step(step: int) -> dict:
        x, y = train_b.get(step)
        lr = lr_at(cfg, step)
        ts = time.perf_counter()
        loss = runner.step(step, lr, x, y)
        dt = time.perf_counter() - ts
        if not math.isfinite(loss):
            raise ConfigError(f"loss became {loss} at step {step}; lower --lr (now {cfg.lr}) or check the data")
        step_times.append(dt)
        return {"step": step, "loss": loss, "lr": lr, "step_s": round(dt, 6), "tokens_per_s": round(tokens / dt, 1)}

    def validate(step: int) -> dict:
        load_params(eval_model, runner.get_state()[0])
        val = evaluate(eval_model, val_b)
        return {"val_loss": val, "val_bpc": val / math.log(2)}

    def checkpoint(step: int) -> None:
        save_checkpoint(run, step, names, runner.get_state())
        store.prune()

    bar = StepBar("train", cfg.steps, start, enabled=progress)
    try:
        run_loop(start=start, stop=cfg.steps, step=one_step, evaluate=validate, eval_every=cfg.eval_every,
                 checkpoint=checkpoint, ckpt_every=cfg.ckpt_every, metrics=metrics, bar=bar, on_record=on_step,
                 describe=lambda r: f"loss {r['loss']:.4f}  {r['tokens_per_s']:,.0f} tok/s"
                 + (f"  val {r['val_loss']:.4f}" if "val_loss" in r else ""))
    finally:
        metrics.close()
        bar.close()
    steady = step_times[min(len(step_times) // 10, 5):] or step_times  # skip warm-up steps
    tps = tokens / statistics.median(steady) if steady else float("nan")
    return _finish(run, cfg, runner, metrics.read(), tps, setup_s=setup_s, start=start, threads=threads,
                   n_params=count_parameters(model), corpus=info["corpus"])


def _finish(run: Path, cfg: LMTrainConfig, runner, history: list[dict], tps: float, **facts) -> TrainResult:
    """The run's manifest (what ran, on what, how fast, to what loss), written atomically, and the result."""
    loss = history[-1]["loss"] if history else float("nan")
    val_loss = next((r["val_loss"] for r in reversed(history) if "val_loss" in r), None)
    manifest = {
        "npuport_run": RUN_FORMAT, "backend": {**runner.info, **({"mixed_precision": runner.summary()}
                                                                  if hasattr(runner, "summary") else {})},
        "setup_s": round(facts["setup_s"], 2),
        "steps": cfg.steps, "resumed_from": facts["start"] or None, "final_loss": loss, "val_loss": val_loss,
        "val_bpc": None if val_loss is None else val_loss / math.log(2),
        "tokens_per_s_median": round(tps, 1), "threads": facts["threads"], "n_params": facts["n_params"],
        "peak_rss_mb": peak_rss_mb(), "machine": machine(), "versions": versions(),
        "corpus": facts["corpus"], "init_from": read_run(run).get("init_from"),
    }
    write_json_atomic(run / "manifest.json", manifest)
    return TrainResult(run, cfg.steps, loss, val_loss, tps, manifest)


def _restore(store, runner, names, metrics: MetricsLog) -> int:
    """The step to start from: the newest readable checkpoint's (its state into the runner), else 0. The steps after
    it are replayed and logged again, identically: their old records are dropped."""
    start = 0
    found = store.load_latest(lambda p: load_checkpoint(p, names))
    if found:
        start, state = found[1]
        runner.set_state(*state, t=start)
    metrics.truncate(start)
    return start


def corpus_and_model_config(cfg: LMTrainConfig, run: Path, resume: bool):
    """On --resume the run's own vocabulary and model config (the corpus is checked against them); with --init-from
    the source run's (the characters must map to the same ids); else new ones."""
    vocab = None
    if resume and (run / "vocab.json").is_file():
        vocab = CharVocab.from_json(json.loads((run / "vocab.json").read_text()))
    src = init_source(cfg)
    if src is not None and vocab is None:
        vocab = src.vocab
    try:
        corpus = load_corpus(cfg, vocab)
    except DataError as e:
        if src is None or vocab is not src.vocab:
            raise
        raise DataError(f"--init-from {cfg.init_from}: the corpus does not fit that run's vocabulary: {e}") from e
    if resume and (run / "run.json").is_file():
        return corpus, LMConfig.from_json(read_run(run)["model"])
    mcfg = model_config(cfg, corpus.vocab.size)
    if src is not None and src.model != mcfg:
        diff = sorted(k for k, v in mcfg.to_json().items() if src.model.to_json().get(k) != v)
        raise ConfigError(f"--init-from {cfg.init_from}: that run's model differs from this one in {', '.join(diff)}; "
                          "use the same --preset and --seq-len as the source run")
    return corpus, mcfg


def initial_model(cfg: LMTrainConfig, mcfg: LMConfig):
    """The seeded init, or --init-from's parameters; --init-jitter scales every weight by (1 + jitter * N(0, 1))
    (the fp32 noise-floor run)."""
    model = build_lm(mcfg, seed=cfg.seed)
    src = init_source(cfg)
    if src is not None:
        _, (params, _, _) = load_checkpoint(src.path, [n for n, _ in model.named_parameters()])
        with torch.no_grad():
            for p, v in zip(model.parameters(), params):
                p.copy_(v)
    if cfg.init_jitter:
        with torch.no_grad():
            g = torch.Generator().manual_seed(cfg.seed + 1)
            for p in model.parameters():
                p.mul_(1.0 + cfg.init_jitter * torch.randn(p.shape, generator=g))
    return model




__all__ = ["LMTrainConfig", "train", "lr_at", "load_corpus", "load_run_model", "read_metrics", "read_run",
           "evaluate", "model_config"]
