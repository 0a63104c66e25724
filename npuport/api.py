"""The library surface the CLI calls: doctor(), port(), verify(). Each takes one frozen config dataclass."""

from __future__ import annotations

import gc
import shutil
import time
from pathlib import Path

import torch

from . import porting
from ._version import __version__
from .artifact import check_files, find_artifacts, load_session, read_manifest
from .config import DEFAULT_PORT_RUNTIMES, BenchConfig, ModelSource, PortConfig, VerifyConfig  # noqa: F401 - the API
from .errors import BackendUnavailable, ConfigError
from .fsio import staged_output, write_json_atomic
from .machine import machine, versions
from .manifest import Manifest
from .models.detector import load_tokenizer, state_fingerprint
from .porting import PROOF_FILE, compile_specs, load_proof_inputs, parity_summary  # noqa: F401 - compile_specs: API
from .router import BucketRouter
from .runtimes import REFERENCE, get_runtime, runtime_names
from .spec import QuantOptions, ShapeSpec
from .ui import ProgressFn as Progress
from .ui import silent
from .verifying import EagerReference, data_parity, eager_logits, judge_by, probe_parity

# -- doctor ----------------------------------------------------------------------------------------------------


def doctor() -> dict:
    """Every registered runtime: usable here or why not, versions, devices and precisions, what it can do."""
    import transformers

    out = {"npuport": __version__, "torch": torch.__version__, "transformers": transformers.__version__,
           "machine": machine(), "versions": versions(), "runtimes": {}}
    for name in runtime_names():
        r = get_runtime(name)
        ok, reason = r.available()
        info = {"available": ok, "reason": reason, "description": r.description, **r.capabilities()}
        if ok:
            try:
                info["versions"] = r.versions()
                info["devices"] = {d: list(r.precisions(d)) for d in r.list_devices()}
            except (ImportError, RuntimeError, OSError) as e:
                info.update(available=False, reason=f"{type(e).__name__}: {e}")
        out["runtimes"][name] = info
    return out


# -- port ------------------------------------------------------------------------------------------------------


def port(cfg: PortConfig, progress: Progress = silent, *, eval_reference: EagerReference | None = None) -> dict:
    """load -> adapt -> capture + prove -> (compile one -> check one) per runtime -> report.

    eval_reference: eager logits on the --eval-data rows the caller computed already (`EagerReference.of`); port
    uses them only when its model's weights and its rows hash the same, else it computes its own."""
    t_start = time.perf_counter()
    inputs = porting.load_inputs(cfg, progress)
    cfg = inputs.cfg  # --buckets auto: the planned shapes from here on
    # Every input is valid: only now is the output touched, and only through a staging sibling that replaces it
    # at the end (an error or Ctrl-C leaves -o as it was and removes the half-built staging directory).
    with staged_output(cfg.out, overwrite=cfg.overwrite, what="port") as stage:
        captured, proof = porting.capture_and_prove(inputs, cfg, stage / ".capture", progress)
        ref = porting.reference(inputs, cfg, eval_reference)
        report = {"npuport_version": __version__, "source": inputs.source, "adapter": captured.adapter.__dict__,
                  "head": inputs.model.spec.to_json(), "shapes": cfg.shapes.to_json(),
                  "precision": cfg.precision or "each runtime's default", "capture": proof, "backends": {},
                  "machine": machine()}
        if ref.eval_ref_from:
            report["eval_reference"] = ref.eval_ref_from
        if inputs.bucket_plan:
            report["bucket_plan"] = inputs.bucket_plan
        for name in cfg.runtimes:
            report["backends"][name] = porting.port_one(name, captured, inputs, proof, ref, stage, cfg, progress)
        captured.release()
        shutil.rmtree(stage / ".capture", ignore_errors=True)
        return porting.write_report(report, stage, proof, cfg, t_start)


# -- verify ----------------------------------------------------------------------------------------------------


def verify(cfg: VerifyConfig, progress: Progress = silent) -> dict:
    """Re-check every artifact under `path`: file hashes, then parity on its stored probes (and on data)."""
    arts = find_artifacts(cfg.path)
    results, reference_cache = {}, {}
    for art in arts:
        progress(f"{art.name}: checking file hashes")
        manifest = check_files(art)
        if cfg.public_key:
            from .signing import check_signature

            check_signature(art, cfg.public_key)
        name, precision = manifest.runtime.name, manifest.precision
        runtime = get_runtime(name)
        runtime.require()
        progress(f"{art.name}: loading and re-running proof inputs")
        session = runtime.open(art, manifest)
        probes, refs = load_proof_inputs(art / PROOF_FILE)
        task = manifest.task
        # as at port: a lossy artifact whose scores were judged on data keeps its probes to the logit tolerance
        on_data = precision != "fp32" and (bool(cfg.eval_data) or "data" in (manifest.parity or {}))
        # an integer artifact gated on data at port is judged by that bar again (verify.judge_decisions)
        bar = (manifest.parity or {}).get("data", {}).get("decision_bar") if on_data else None
        figs = {"probes": judge_by(probe_parity(session, probes, refs, task), name, precision, bar, not on_data)}
        if cfg.eval_data:
            key = manifest.source["sha256"]
            if key not in reference_cache:
                reference_cache[key] = _data_reference(manifest, art, cfg.eval_data, progress, cfg.module)
            rows, ref = reference_cache[key]
            router = BucketRouter(session.shapes, manifest.pad_token_id)
            figs["data"] = judge_by(data_parity(session, router, rows, ref, task), name, precision, bar)
        session.close()
        results[art.name] = {"backend": name, "precision": precision, **parity_summary(figs), "parity": figs}
        gc.collect()
    return {"artifacts": results, "pass": all(r["pass"] for r in results.values())}


def _data_reference(manifest: Manifest, art: Path, eval_data: str, progress: Progress, module=None):
    """Token rows of --eval-data (persona rows for a detector, text rows for a classifier) and eager logits."""
    from .artifact import check_source
    from .detector import data

    detector = manifest.task.is_detector
    examples = data.load_examples(eval_data) if detector else data.load_texts(eval_data)
    tok_dir = art / "tokenizer"
    tokenizer = load_tokenizer(tok_dir) if tok_dir.is_dir() else None
    if tokenizer is None:
        raise ConfigError(f"--eval-data needs a tokenizer, and {art} has none (it was ported from a model without one)")
    progress("loading the source model for the eager reference")
    if manifest.source.get("kind") == "module" and module is not None:  # npuport.verify(out, model=your_module)
        from .models.custom import UserModel

        task = manifest.task
        model = UserModel(module, labels=task.labels, problem_type=task.problem_type, threshold=task.threshold)
        was = module.training
        module.eval()
        try:
            check_source(manifest, state_fingerprint(model))
            limit = manifest.shape_spec.buckets[-1]
            rows = data.encode(tokenizer, examples, limit) if detector else data.encode_texts(tokenizer, examples, limit)
            return rows, eager_logits(model, rows)
        finally:
            module.train(was)
    source = ModelSource.from_manifest(manifest.source)
    model = source.load()
    check_source(manifest, state_fingerprint(model))
    limit = manifest.shape_spec.buckets[-1]
    rows = data.encode(tokenizer, examples, limit) if detector else data.encode_texts(tokenizer, examples, limit)
    return rows, eager_logits(model, rows)


__all__ = ["DEFAULT_PORT_RUNTIMES", "BenchConfig", "ModelSource", "PortConfig", "VerifyConfig", "BackendUnavailable", "bench",
           "doctor", "load", "plan_buckets_for", "port", "port_model", "read_manifest", "verify", "verify_path"]


# -- bench -----------------------------------------------------------------------------------------------------


def _bench_label(manifest, art: Path, taken) -> str:
    """An artifact's path name in the results: runtime, -banded, -precision, -keep-GROUPS (the groups an integer
    artifact left in float: another graph, so another row), -per-token-GROUPS (those it quantises per token); by
    directory when two share one."""
    meta = manifest.runtime.meta
    kept, per_token = meta.get("kept_fp32") or [], meta.get("per_token") or []
    label = manifest.runtime.name + ("-banded" if manifest.adapter.get("attention") == "banded" else "") + (
        "" if manifest.precision == "fp32" else f"-{manifest.precision}") + (f"-keep-{'+'.join(kept)}" if kept else "") + (
        f"-per-token-{'+'.join(per_token)}" if per_token else "")
    return f"{label} ({art.name})" if label in taken else label  # two of one kind copied side by side: keep both


def _open_artifacts(root: Path, cfg: BenchConfig, sessions: dict, progress: Progress):
    """Open every selected artifact into `sessions` (the caller closes them, also on error); returns the source model
    (comparison paths and input vocabulary) and the shapes every artifact was compiled for."""
    model, shapes = None, None
    for art in find_artifacts(root):
        manifest = read_manifest(art)
        if cfg.runtimes and manifest.runtime.name not in cfg.runtimes:
            continue
        label = _bench_label(manifest, art, sessions)
        progress(f"loading {art.name} (hash check)")
        _, sessions[label] = load_session(art)
        # interleaved timing needs one input for every path: the shapes all artifacts were compiled for
        shapes = set(sessions[label].shapes) if shapes is None else shapes & set(sessions[label].shapes)
        if model is None:
            progress("loading the source model")
            model = ModelSource.from_manifest(manifest.source).load()
    if not sessions:
        raise ConfigError(f"no artifacts to benchmark under {root}" + (f" for runtimes {cfg.runtimes}" if cfg.runtimes else ""))
    if not shapes:
        each = "; ".join(f"{n}: {', '.join(f'{b}x{t}' for b, t in sorted(s.shapes))}" for n, s in sessions.items())
        raise ConfigError(f"the artifacts under {root} share no compiled shape ({each}); bench them apart, or "
                          "select some with --runtime")
    return model, shapes


def _time_shapes(runners: dict, model, shapes, cfg: BenchConfig, progress: Progress) -> tuple[dict, dict]:
    """(stats per shape, raw samples per shape): every runner interleaved at each shape."""
    from .latency import interleaved, random_feeds

    per_shape, raw = {}, {}
    for b, t in sorted(shapes):
        progress(f"{b}x{t}: {', '.join(runners)} interleaved, {cfg.runs} runs each")
        samples: dict = {}
        stats = interleaved(runners, random_feeds(model, b, t), cfg.runs, cfg.warmup, samples)
        for st in stats.values():
            st["sequences_per_s"] = b * 1000.0 / st["p50_ms"]
            st["tokens_per_s"] = b * t * 1000.0 / st["p50_ms"]
        per_shape[f"{b}x{t}"], raw[f"{b}x{t}"] = stats, samples
    return per_shape, raw


def _bench_plots(plot: str, head: str, shapes, per_shape: dict, raw: dict, runs: int) -> list[str]:
    """The latency distribution at the headline shape, and latency against length when there are several."""
    from .plots import latency_distribution, latency_vs_length

    p = Path(plot)
    plots = [latency_distribution(raw[head], p, f"latency at {head} ({runs} interleaved runs)")]
    seqs = {t for _, t in shapes}
    if len(seqs) > 1:
        b0 = min(b for b, _ in shapes)
        per_len = {str(t): per_shape[f"{b0}x{t}"] for t in sorted(seqs)}
        plots.append(latency_vs_length(per_len, p.with_name(p.stem + "_vs_length" + p.suffix)))
    return plots


def bench(cfg: BenchConfig, progress: Progress = silent) -> dict:
    """Latency of every artifact and every --vs path, interleaved in one process; stats, ratios, plots."""
    import tempfile

    from .latency import COMPARISONS

    tmp = tempfile.mkdtemp(prefix="npuport-bench-") if cfg.source is not None else None
    sessions: dict = {}
    try:  # from here on, the temporary directory and every opened session are released whatever happens
        if tmp is not None:
            runtimes = cfg.runtimes or DEFAULT_PORT_RUNTIMES
            progress(f"porting to {', '.join(runtimes)} first")
            port(PortConfig(source=cfg.source, out=tmp + "/out", runtimes=runtimes, shapes=cfg.shapes,
                            precision=cfg.precision, capture_methods=("trace",), bench_runs=1, eval_data=cfg.eval_data,
                            calibration_data=cfg.calibration_data, quant=cfg.quant), progress)
            root = Path(tmp) / "out"
        else:
            root = Path(cfg.artifact_dir)
        model, shapes = _open_artifacts(root, cfg, sessions, progress)
        runners = {v: COMPARISONS[v](model) for v in cfg.vs}
        runners.update({n: s.run for n, s in sessions.items()})
        per_shape, raw = _time_shapes(runners, model, shapes, cfg, progress)
        head = f"{max(shapes)[0]}x{max(t for _, t in shapes)}"
        head = head if head in per_shape else list(per_shape)[-1]
        results = per_shape[head]
        ref = REFERENCE if REFERENCE in results else None
        ratios = {n: results[ref]["p50_ms"] / r["p50_ms"] for n, r in results.items()} if ref else {}
        out = {"headline_shape": head, "results": results, "per_shape": per_shape, "ratios_vs_eager_p50": ratios,
               "best": min(sessions, key=lambda n: results[n]["p50_ms"]), "runs": cfg.runs, "warmup": cfg.warmup,
               "machine": machine(), "npuport_version": __version__}
        if cfg.plot:
            out["plots"] = _bench_plots(cfg.plot, head, shapes, per_shape, raw, cfg.runs)
        if cfg.json_out:
            write_json_atomic(Path(cfg.json_out), out)
        return out
    finally:
        for s in sessions.values():
            s.close()
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------- LM training on static-graph runtimes

def lm_train(cfg, run: str | Path, *, resume: bool = False, progress: bool = True):
    """Train a char-level decoder LM with the step on `cfg.runtime`; returns train.loop.TrainResult."""
    from .train.loop import train

    return train(cfg, run, resume=resume, progress=progress)


def lm_compare(run_a: str | Path, run_b: str | Path, *, json_out: str | None = None, plot: str | None = None) -> dict:
    """Control-run check: Pearson of the loss curves, max/mean |Δloss|, final |Δparam|, tokens/s ratio (B/A)."""
    from .fsio import write_json_atomic
    from .train.compare import compare_runs, plot_compare

    r = compare_runs(run_a, run_b)
    if plot:
        plot_compare(r, plot)
    public = {k: v for k, v in r.items() if not k.startswith("_")}
    if json_out:
        write_json_atomic(Path(json_out), public)
    return public


def lm_eval(run: str | Path, corpus: str | Path, *, corpus_format: str = "auto", json_out: str | None = None) -> dict:
    from .fsio import write_json_atomic
    from .train.compare import eval_run

    r = eval_run(run, corpus, corpus_format)
    if json_out:
        write_json_atomic(Path(json_out), r)
    return r


def lm_sample(run: str | Path, prompt: str, **kw) -> str:
    from .train.compare import sample

    return sample(run, prompt, **kw)


# -- the Python surface (npuport.port / verify / load / plan_buckets) -----------------------------------------


def plan_buckets_for(data: str, model_dir: str, *, max_buckets: int = 4, runtimes=(), align: int = 8) -> dict:
    """`npuport plan-buckets`: the buckets (at most max_buckets, and every named runtime's budget) that minimise padded
    tokens on DATA's token lengths under MODEL_DIR's tokenizer; persona rows for a detector directory, text rows
    otherwise (as `port --eval-data` reads them)."""
    import json

    from .buckets import plan_buckets
    from .detector import data as rows_io
    from .models.base import max_positions_of
    from .models.detector import CONFIG_NAME, DETECTOR_KEY, _parse_config, _read_config

    d = Path(model_dir)
    raw = _read_config(d)  # validates the directory and its model type
    detector = DETECTOR_KEY in raw
    config, _ = _parse_config({k: v for k, v in raw.items() if k != DETECTOR_KEY}, None, d)
    tokenizer = load_tokenizer(d)
    if tokenizer is None:
        raise ConfigError(f"{d} has no tokenizer files (tokenizer.json, vocab.txt, ...): token lengths need the "
                          f"model's own tokenizer ({d / CONFIG_NAME} alone is not enough)")
    limit = max_positions_of(config)
    if detector:
        encoded = rows_io.encode(tokenizer, rows_io.load_examples(data), limit)
    else:
        encoded = rows_io.encode_texts(tokenizer, rows_io.load_texts(data), limit)
    budget = min([get_runtime(n).max_buckets for n in runtimes] or [max_buckets])
    plan = plan_buckets([len(r) for r in encoded], min(max_buckets, budget), limit=limit, align=align,
                        source=Path(data).name)
    out = plan.to_json()
    out.update(asked=max_buckets, runtime_budget=budget, model_positions=limit)
    json.dumps(out)  # plain JSON all the way down
    return out


def port_model(model, tokenizer=None, out: str | Path | None = None, *, runtimes=None, buckets=(128,),
               batch_sizes=(1,), eval_data: str | None = None, precision: str | None = None,
               calibration_data: str | None = None, labels=None, problem_type: str = "single_label_classification",
               threshold: float = 0.5, max_buckets: int = 4, overwrite: bool = False,
               capture_methods=("trace", "export", "onnx"), quant: QuantOptions | None = None,
               progress: Progress = silent) -> dict:
    """npuport.port: a model directory, or your own torch.nn.Module whose forward(input_ids, attention_mask) returns
    logits (B, C) around a supported Hugging Face backbone, ported as it is; the report dict, and the same artifacts
    as `npuport port` under `out`. buckets="auto" plans them from eval_data's token lengths. runtimes: default, the
    CLI's default set (a module: those of them that compile a graph; eager saves a model directory a module lacks).
    quant: integer precisions' options as the CLI's flags give them (npuport.spec.QuantOptions, e.g.
    QuantOptions(int16=("layernorm",), keep_fp32=("auto",)))."""
    from .models.custom import UserModel

    module = not isinstance(model, (str, Path))
    if runtimes is None:
        runtimes = [n for n in DEFAULT_PORT_RUNTIMES if not (module and get_runtime(n).saves_source)]
    if out is None:
        raise ConfigError("npuport.port needs out=DIR: the directory the artifacts and report are written to")
    if isinstance(runtimes, str):
        runtimes = (runtimes,)
    auto = isinstance(buckets, str) and buckets == "auto"
    if isinstance(buckets, str) and not auto:
        raise ConfigError(f"buckets={buckets!r}: give lengths such as (64, 128) or 'auto'")
    if auto and not (eval_data or calibration_data):
        raise ConfigError("buckets='auto' plans the buckets from your rows' token lengths: pass eval_data=FILE (or "
                          "calibration_data=FILE)")
    shapes = ShapeSpec(batch_sizes=tuple(batch_sizes), buckets=(512,) if auto else tuple(buckets))
    common = dict(out=str(out), runtimes=tuple(runtimes), shapes=shapes, precision=precision, eval_data=eval_data,
                  calibration_data=calibration_data, overwrite=overwrite, capture_methods=tuple(capture_methods),
                  auto_buckets=max_buckets if auto else None, quant=quant or QuantOptions())
    if not module:
        if tokenizer is not None:
            raise ConfigError("a model directory brings its own tokenizer files: pass tokenizer=None")
        return port(PortConfig(source=ModelSource(model_dir=str(model)), **common), progress)
    wrapped = UserModel(model, labels=labels, problem_type=problem_type, threshold=threshold)
    was = model.training
    model.eval()  # the reference is the module in eval mode (no dropout); its own mode comes back afterwards
    try:
        return port(PortConfig(source=ModelSource(module=wrapped, tokenizer=tokenizer), **common), progress)
    finally:
        model.train(was)


def verify_path(out: str | Path, *, eval_data: str | None = None, model=None, public_key: str | None = None,
                progress: Progress = silent) -> dict:
    """npuport.verify: re-check every artifact under `out` (hashes, parity on its probes, and on eval_data). An artifact
    ported from a module object needs that module again (model=) for parity on data."""
    return verify(VerifyConfig(path=str(out), eval_data=eval_data, public_key=public_key, module=model), progress)


def load(out: str | Path, *, runtime: str | None = None, threads: int | None = None):
    """npuport.load: a hash-checked, parity-checked artifact as a callable (texts or token batches -> logits)."""
    from .loaded import Loaded

    return Loaded(str(out), runtime=runtime, threads=threads)
