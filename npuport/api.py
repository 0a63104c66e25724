"""The library surface the CLI calls: doctor(), port(), verify(). Each takes one frozen config dataclass."""

from __future__ import annotations

import dataclasses
import gc
import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from . import __version__, gate
from .artifact import check_files, find_artifacts, load_session, read_manifest, write_manifest
from .bench import summarize, time_calls
from .errors import ArtifactError, BackendUnavailable, ConfigError
from .fsio import atomic_write, staged_output, write_json_atomic
from .machine import machine, peak_rss_mb, versions
from .manifest import Manifest, RuntimeInfo
from .runtimes import feeds_of, get_runtime, runtime_names
from .spec import INTEGER_PRECISIONS, CompileSpec, QuantOptions, ShapeSpec
from .task import Task
from .models.detector import PRESETS, Detector, build_preset, load_detector, load_tokenizer, max_positions, state_fingerprint
from .router import BucketRouter
from .static.capture import CAPTURE_METHODS, capture, make_probes, prove, reference_logits
from .ui import silent
from .verify import data_parity, eager_logits, judge, probe_parity

Progress = Callable[[str], None]
PROOF_FILE = "proof_inputs.safetensors"
DEFAULT_PORT_RUNTIMES = tuple(runtime_names(default_port=True))  # from the registry's flags, not a second list


# -- model sources ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ModelSource:
    model_dir: str | None = None
    preset: str | None = None
    random_init: bool = False
    seed: int = 0
    new_head: bool = False  # a plain backbone directory: start a random detector head (never silently)

    def __post_init__(self):
        if (self.model_dir is None) == (self.preset is None):
            raise ConfigError("give exactly one of MODEL_DIR or --preset NAME")
        if self.preset is not None:
            PRESETS.get(self.preset)  # raises, listing the known presets
            if not self.random_init:
                raise ConfigError(
                    f"preset {self.preset!r} has no weights here (nothing is downloaded); add --random-init to build "
                    "it from its published config, or give a local model directory"
                )

    def load(self) -> Detector:
        if self.preset is not None:
            return build_preset(self.preset, seed=self.seed)
        return load_detector(self.model_dir, new_head=self.new_head)

    def describe(self, model: Detector, fingerprint: str) -> dict:
        base = {"model_type": model.model_type, "sha256": fingerprint,
                "parameters": sum(p.numel() for p in model.parameters())}
        if self.preset is not None:
            return {"kind": "preset", "preset": self.preset, "random_init": True, "seed": self.seed, **base}
        head = {"new_head": True} if self.new_head else {}
        return {"kind": "dir", "path": str(Path(self.model_dir).resolve()), **head, **base}

    @classmethod
    def from_manifest(cls, source: dict) -> "ModelSource":
        if source.get("kind") == "preset":
            return cls(preset=source["preset"], random_init=True, seed=source.get("seed", 0))
        return cls(model_dir=source["path"], new_head=bool(source.get("new_head")))


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


@dataclass(frozen=True, kw_only=True)
class PortConfig:
    source: ModelSource
    out: str
    backends: tuple[str, ...] = DEFAULT_PORT_RUNTIMES
    shapes: ShapeSpec = field(default_factory=ShapeSpec)
    precision: str | None = None  # None: each runtime's default (fp32 where it has it; qnn: fp16)
    device: str | None = None  # None: each runtime's default (cpu where it has it; qnn: htp)
    eval_data: str | None = None
    calibration_data: str | None = None  # rows that calibrate static int8 / int16 (default: the eval data)
    quant: QuantOptions = field(default_factory=QuantOptions)  # integer precisions: how, and the bar they must clear
    capture_methods: tuple[str, ...] = ("trace", "export", "onnx")
    bench_runs: int = 5
    overwrite: bool = False

    def __post_init__(self):
        if not self.backends:
            raise ConfigError("--backend needs at least one backend name")
        known = runtime_names(ports=True)
        for b in self.backends:
            if b not in known:
                raise ConfigError(f"unknown runtime {b!r} for port; known: {', '.join(known)}")
        for m in self.capture_methods:
            CAPTURE_METHODS.get(m)
        if self.bench_runs < 1:
            raise ConfigError(f"bench runs {self.bench_runs} must be >= 1")


def _check_lengths(model: Detector, shapes: ShapeSpec) -> None:
    limit = max_positions(model)
    if shapes.buckets[-1] > limit:
        raise ConfigError(f"sequence length {shapes.buckets[-1]} exceeds the model's {limit} positions; use <= {limit}")


def _save_proof_inputs(path: Path, probes: dict, refs: dict) -> None:
    from safetensors.numpy import save_file

    tensors = {}
    for (b, t), plist in probes.items():
        for k, (ids, mask) in enumerate(plist):
            tensors[f"{b}x{t}.{k}.input_ids"] = ids.numpy()
            tensors[f"{b}x{t}.{k}.attention_mask"] = mask.numpy()
            tensors[f"{b}x{t}.{k}.reference_logits"] = refs[(b, t)][k]
    save_file(tensors, str(path))


def _load_proof_inputs(path: Path) -> tuple[dict, dict]:
    from safetensors.numpy import load_file

    raw = load_file(str(path))
    probes, refs = {}, {}
    keys = sorted({k.rsplit(".", 1)[0] for k in raw})
    for key in keys:
        shape_s, _k = key.split(".")
        b, t = (int(x) for x in shape_s.split("x"))
        probes.setdefault((b, t), []).append(
            (torch.from_numpy(raw[f"{key}.input_ids"]), torch.from_numpy(raw[f"{key}.attention_mask"]))
        )
        refs.setdefault((b, t), []).append(raw[f"{key}.reference_logits"])
    return probes, refs


def _dir_size(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


def _latency(session, shape, runs: int) -> dict:
    b, t = shape
    ids = np.full((b, t), 5, dtype=np.int64)
    feeds = feeds_of(ids, np.ones_like(ids))
    return summarize(time_calls(lambda: session.run(feeds), runs=runs, warmup=1))


@dataclass
class _Inputs:
    """Everything `port` reads, validated before anything is written."""

    specs: dict  # runtime name -> CompileSpec
    model: Detector
    tokenizer: object | None
    eval_rows: list | None
    source: dict


@dataclass
class _Reference:
    """The eager fp32 side of every comparison: probe inputs per shape, their logits, logits on the eval data."""

    probes: dict
    refs: dict
    eval_ref: np.ndarray | None
    task: Task


def port(cfg: PortConfig, progress: Progress = silent) -> dict:
    """load -> adapt -> capture + prove -> (compile one -> check one) per runtime -> report."""
    t_start = time.perf_counter()
    inputs = _load_inputs(cfg, progress)
    # Every input is valid: only now is the output touched, and only through a staging sibling that replaces it
    # at the end (an error or Ctrl-C leaves -o as it was and removes the half-built staging directory).
    with staged_output(cfg.out, overwrite=cfg.overwrite, what="port") as stage:
        captured, proof = _capture_and_prove(inputs, cfg, stage / ".capture", progress)
        ref = _reference(inputs, cfg)
        report = {"npuport_version": __version__, "source": inputs.source, "adapter": captured.adapter.__dict__,
                  "head": inputs.model.spec.to_json(), "shapes": cfg.shapes.to_json(),
                  "precision": cfg.precision or "each runtime's default", "capture": proof, "backends": {},
                  "machine": machine()}
        for name in cfg.backends:
            report["backends"][name] = _port_one(name, captured, inputs, proof, ref, stage, cfg, progress)
        captured.release()
        shutil.rmtree(stage / ".capture", ignore_errors=True)
        return _write_report(report, stage, proof, cfg, t_start)


def _port_one(name: str, captured, inputs: _Inputs, proof: dict, ref: _Reference, stage: Path, cfg: PortConfig,
              progress: Progress) -> dict:
    """Compile, check and (if it clears the bar) write one runtime's artifact; its entry in the report.

    An integer artifact below --min-agreement is refused (npuport/gate.py). With --keep-fp32 auto it is quantised
    again with the costliest group kept in float, one group at a time, before it is refused."""
    spec = inputs.specs[name]
    prec, art, tried = spec.precision, stage / f"{name}-{spec.precision}", []
    while True:
        manifest, compile_s = _compile_one(name, spec, captured, inputs, proof, ref, art, progress)
        figs, lat, exec_prec = _check_one(name, art, manifest, ref, inputs.eval_rows, cfg, progress)
        meta = manifest.runtime.meta
        if tried:  # measured once, on the first round; later rounds rank by it
            meta["sensitivity"] = tried[0]["sensitivity"]
        refusal = gate.refusal(name, prec, figs, cfg.quant, meta)
        if refusal is None:
            break
        shutil.rmtree(art)  # decisions lost: the artifact is not written (it only ever lived in the staging dir)
        kept = tuple(spec.options.get("keep_fp32", ()))
        tried.append({"kept_fp32": list(kept), "decision_agreement": refusal["decision_agreement"],
                      "max_abs_logit_diff": refusal["max_abs_logit_diff"], "sensitivity": meta.get("sensitivity", {})})
        nxt = gate.next_group(meta.get("sensitivity") or {}, kept) if cfg.quant.auto_keep else None
        if nxt is None:
            if cfg.quant.auto_keep:
                refusal["reason"] += f" (--keep-fp32 auto tried {len(tried)} round(s): every measured group in float)"
                refusal["auto_keep"] = _rounds(tried)
            progress(f"{name}: refused: {refusal['reason']}")
            return {prec: refusal}
        progress(f"{name}: decisions {refusal['decision_agreement']:.2%} < {cfg.quant.min_agreement:.2%}; keeping {nxt} "
                 f"in fp32 too (--keep-fp32 auto)")
        spec = dataclasses.replace(spec, options={**spec.options, "keep_fp32": [*kept, nxt], "sensitivity": False})
    if tried:
        meta["auto_keep"] = _rounds(tried)
    manifest.parity, manifest.latency = figs, {"shape": list(cfg.shapes.largest), **lat}
    manifest.runtime.execution_precision = exec_prec
    write_manifest(art, manifest)  # the one write: file hashes, proof, parity and latency together
    summary = _parity_summary(figs)
    entry = {**summary, "p50_ms": lat["p50_ms"], "p99_ms": lat["p99_ms"], "compile_seconds": round(compile_s, 1),
             "disk_mb": round(_dir_size(art) / 2**20, 1), "artifact": art.name, "executes": manifest.runtime.executes,
             **({"execution_precision": exec_prec} if exec_prec else {}), "parity": figs,
             **_npu_facts(meta), **gate.quant_facts(meta)}
    if prec in INTEGER_PRECISIONS and "data" not in figs:
        entry["decisions_unchecked"] = "no --eval-data: decisions on real rows were not checked against --min-agreement"
        progress(f"{name}: {prec} decisions not checked on data (pass --eval-data)")
    progress(f"{name}: max|Δlogit| {summary['max_abs_logit_diff']:.2e}, agreement "
             f"{summary['decision_agreement']:.2%}, p50 {lat['p50_ms']:.1f} ms -> {'PASS' if summary['pass'] else 'FAIL'}")
    return {prec: entry}


def _rounds(tried: list[dict]) -> list[dict]:
    """The refused rounds of --keep-fp32 auto, for the manifest and report (sensitivity is recorded once)."""
    return [{k: v for k, v in t.items() if k != "sensitivity"} for t in tried]


def compile_specs(names, shapes: ShapeSpec, precision: str | None, device: str | None) -> dict[str, CompileSpec]:
    """One CompileSpec per runtime, each runtime's own device and precision where none is given; fails before any
    heavy work on a missing SDK, an unknown device or a precision the runtime lacks."""
    specs: dict[str, CompileSpec] = {}
    for name in names:
        runtime = get_runtime(name)
        runtime.require()
        dev = device or runtime.default_device()
        spec = CompileSpec(shapes=shapes, precision=precision or runtime.default_precision(dev), device=dev)
        runtime.check(spec)
        specs[name] = spec
    return specs


def _load_inputs(cfg: PortConfig, progress: Progress) -> _Inputs:
    """Stage 1, load: runtimes, devices and precisions, eval data, the model and its tokenizer."""
    specs = compile_specs(cfg.backends, cfg.shapes, cfg.precision, cfg.device)
    # Asked for by name, an integer precision must show on data that it keeps decisions. A runtime whose own default
    # is integer (ethos-u) still ports without data; its report says the decisions were not checked.
    if cfg.precision in INTEGER_PRECISIONS and cfg.quant.min_agreement > 0 and not cfg.eval_data:
        raise ConfigError(f"--precision {cfg.precision} is checked on data before an artifact is written: pass "
                          f"--eval-data FILE (labelled rows like the ones you will serve), or --min-agreement 0 to skip "
                          f"the check")
    lacking = [n for n, s in specs.items() if s.precision in INTEGER_PRECISIONS and not get_runtime(n).measures_sensitivity]
    if (cfg.quant.auto_keep or cfg.quant.sensitivity) and lacking:
        able = [n for n in runtime_names() if get_runtime(n).measures_sensitivity]
        raise ConfigError(f"{'--keep-fp32 auto' if cfg.quant.auto_keep else '--sensitivity'} measures each "
                          f"quantisation group's cost, which {', '.join(lacking)} cannot do; runtimes that can: "
                          f"{', '.join(able)} (or name the groups: --keep-fp32 GROUP,...)")
    if cfg.quant.mode == "dynamic" and any(n != "onnxruntime" for n, s in specs.items() if s.precision == "int8"):
        raise ConfigError("--quantization dynamic is ONNX Runtime's; the other runtimes quantise statically")
    specs = {n: dataclasses.replace(s, options={**s.options, **cfg.quant.options()}) if s.precision in INTEGER_PRECISIONS
             else s for n, s in specs.items()}
    progress("loading model")
    model = cfg.source.load()
    _check_lengths(model, cfg.shapes)
    tokenizer = load_tokenizer(cfg.source.model_dir) if cfg.source.model_dir else None
    eval_rows = _eval_rows(cfg, model, tokenizer, cfg.eval_data) if cfg.eval_data else None
    calib_file = cfg.calibration_data or cfg.eval_data
    if calib_file:  # static quantisation calibrates on these rows (validated here, before anything is written)
        rows = eval_rows if calib_file == cfg.eval_data else _eval_rows(cfg, model, tokenizer, calib_file)
        what = "--calibration-data" if cfg.calibration_data else "--eval-data"
        specs = {n: dataclasses.replace(s, calibration=tuple(rows), calibration_source=f"{what} {Path(calib_file).name}"
                                        f" ({len(rows)} rows)") for n, s in specs.items()}
    source = cfg.source.describe(model, state_fingerprint(model))
    return _Inputs(specs=specs, model=model, tokenizer=tokenizer, eval_rows=eval_rows, source=source)


def _eval_rows(cfg: PortConfig, model, tokenizer, path: str) -> list[np.ndarray]:
    """--eval-data / --calibration-data as token rows: persona rows for a detector, {text, text_pair?} rows for a
    stock classifier."""
    from .detector import data

    detector = Task.from_spec(model.spec.to_json()).is_detector
    rows = data.load_examples(path) if detector else data.load_texts(path)
    if tokenizer is None:
        flag = "--eval-data" if path == cfg.eval_data else "--calibration-data"
        raise ConfigError(f"{flag} needs a tokenizer: the model directory has no tokenizer files")
    if detector:
        return data.encode(tokenizer, rows, cfg.shapes.buckets[-1])
    return data.encode_texts(tokenizer, rows, cfg.shapes.buckets[-1])


def _capture_and_prove(inputs: _Inputs, cfg: PortConfig, work: Path, progress: Progress):
    """Stages 2 and 3, adapt + capture + prove: the adapted module, its graphs, and eager-vs-graph figures."""
    src = inputs.source
    progress(f"adapting and capturing ({src['model_type']}, {src['parameters'] / 1e6:.1f}M parameters)")
    captured = capture(inputs.model, cfg.shapes, work)
    return captured, prove(captured, list(cfg.capture_methods), progress)


def _reference(inputs: _Inputs, cfg: PortConfig) -> _Reference:
    model = inputs.model
    probes = {s: make_probes(model, *s) for s in cfg.shapes.shapes()}
    refs = {s: [reference_logits(model, *p) for p in probes[s]] for s in cfg.shapes.shapes()}
    eval_ref = eager_logits(model, inputs.eval_rows) if inputs.eval_rows is not None else None
    return _Reference(probes=probes, refs=refs, eval_ref=eval_ref, task=Task.from_spec(model.spec.to_json()))


def _compile_one(name: str, spec: CompileSpec, captured, inputs: _Inputs, proof: dict, ref: _Reference, art: Path,
                 progress: Progress):
    """Stage 4, compile one runtime: its files, the proof inputs, the tokenizer, and the manifest (not yet written)."""
    runtime, model = get_runtime(name), inputs.model
    progress(f"{name}: compiling {len(spec.shapes.shapes())} shape(s) at {spec.precision}")
    t0 = time.perf_counter()
    meta = runtime.compile(captured, spec, art)
    compile_s = time.perf_counter() - t0
    _save_proof_inputs(art / PROOF_FILE, ref.probes, ref.refs)  # so `verify` needs no model
    if inputs.tokenizer is not None:
        inputs.tokenizer.save_pretrained(str(art / "tokenizer"))
    manifest = Manifest(
        source=inputs.source, detector=model.spec.to_json(), pad_token_id=int(model.config.pad_token_id or 0),
        runtime=RuntimeInfo(name=name, executes=runtime.executes, versions=runtime.versions(), meta=meta),
        device=spec.device, precision=spec.precision, shape_spec=spec.shapes,
        outputs=[{"name": "logits", "dtype": "float32", "labels": list(model.spec.labels)}],
        capture={"method": runtime.capture_method, "proof": proof}, adapter=captured.adapter.__dict__,
        compile_seconds=round(compile_s, 1),
    )
    return manifest, compile_s


def _check_one(name: str, art: Path, manifest: Manifest, ref: _Reference, eval_rows, cfg: PortConfig, progress: Progress):
    """Stage 5, check one runtime: open what was just compiled, parity on probes (and data), latency."""
    progress(f"{name}: loading and checking parity")
    session = get_runtime(name).open(art, manifest)
    prec = manifest.precision
    try:
        on_data = eval_rows is not None and prec != "fp32"
        figs = {"probes": judge(probe_parity(session, ref.probes, ref.refs, ref.task), name, prec, not on_data)}
        if eval_rows is not None:
            router = BucketRouter(session.shapes, manifest.pad_token_id)
            figs["data"] = judge(data_parity(session, router, eval_rows, ref.eval_ref, ref.task), name, prec)
        progress(f"{name}: timing {cfg.bench_runs} runs at {cfg.shapes.largest}")
        lat = _latency(session, cfg.shapes.largest, cfg.bench_runs)
        return figs, lat, session.execution_precision
    finally:
        session.close()
        del session
        gc.collect()


def _write_report(report: dict, out: Path, proof: dict, cfg: PortConfig, t_start: float) -> dict:
    """Stage 6, report: report.json and report.md beside the artifacts."""
    from .report import port_markdown

    report["wall_seconds"] = round(time.perf_counter() - t_start, 1)
    report["peak_rss_mb"] = peak_rss_mb()
    report["disk_mb"] = round(_dir_size(out) / 2**20, 1)
    report["pass"] = all(r["pass"] for v in report["backends"].values() for r in v.values()) and all(
        p.get("exact") or (p.get("max_abs_diff") is not None and p["max_abs_diff"] <= 1e-4) for p in proof.values()
    )
    write_json_atomic(out / "report.json", report)
    atomic_write(out / "report.md", port_markdown(report))
    return report


def _npu_facts(meta: dict) -> dict:
    """What an NPU runtime's manifest says about placement (and, for Ethos-U, Vela's estimates), for report.md."""
    if "whole_graph_on_npu" not in meta:
        return {}
    keys = ("whole_graph_on_npu", "host_ops", "executes_on", "calibration", "quantization", "target")
    facts = {k: meta[k] for k in keys if k in meta}
    if "shapes" in meta:
        facts["per_shape"] = {s: {k: v[k] for k in ("partitions", "cycles", "estimated_ms", "host_ops", "proof", "vela")}
                              for s, v in meta["shapes"].items()}
    return {"npu": facts} if facts else {}


def _parity_summary(figs: dict) -> dict:
    parts = list(figs.values())
    # probabilities and decisions from the parts that were judged on them (see verify.judge); all, when none was
    judged = [p for p in parts if "scores_judged_on" not in p] or parts
    return {
        "max_abs_logit_diff": max(p["max_abs_logit_diff"] for p in parts),
        "max_abs_prob_diff": max(p["max_abs_prob_diff"] for p in judged),
        "decision_agreement": min(p["decision_agreement"] for p in judged),
        "pass": all(p["pass"] for p in parts),
    }


# -- verify ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class VerifyConfig:
    path: str
    eval_data: str | None = None
    public_key: str | None = None  # also require a valid signature (npuport sign) under this key


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
        probes, refs = _load_proof_inputs(art / PROOF_FILE)
        task = manifest.task
        # as at port: a lossy artifact whose scores were judged on data keeps its probes to the logit tolerance
        on_data = precision != "fp32" and (bool(cfg.eval_data) or "data" in (manifest.parity or {}))
        figs = {"probes": judge(probe_parity(session, probes, refs, task), name, precision, not on_data)}
        if cfg.eval_data:
            key = manifest.source["sha256"]
            if key not in reference_cache:
                reference_cache[key] = _data_reference(manifest, art, cfg.eval_data, progress)
            rows, ref = reference_cache[key]
            router = BucketRouter(session.shapes, manifest.pad_token_id)
            figs["data"] = judge(data_parity(session, router, rows, ref, task), name, precision)
        session.close()
        results[art.name] = {"backend": name, "precision": precision, **_parity_summary(figs), "parity": figs}
        gc.collect()
    return {"artifacts": results, "pass": all(r["pass"] for r in results.values())}


def _data_reference(manifest: Manifest, art: Path, eval_data: str, progress: Progress):
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
    source = ModelSource.from_manifest(manifest.source)
    model = source.load()
    check_source(manifest, state_fingerprint(model))
    limit = manifest.shape_spec.buckets[-1]
    rows = data.encode(tokenizer, examples, limit) if detector else data.encode_texts(tokenizer, examples, limit)
    return rows, eager_logits(model, rows)


def load_report(path: str) -> dict:
    p = Path(path) / "report.json"
    if not p.is_file():
        raise ArtifactError(f"{p} is missing")
    return json.loads(p.read_text())


__all__ = ["ModelSource", "PortConfig", "VerifyConfig", "doctor", "port", "verify", "read_manifest", "BackendUnavailable"]


# -- bench -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class BenchConfig:
    artifact_dir: str | None = None  # a `port` output or artifact directory ...
    source: ModelSource | None = None  # ... or a model to port first
    backends: tuple[str, ...] | None = None
    vs: tuple[str, ...] = ("eager",)
    shapes: ShapeSpec = field(default_factory=ShapeSpec)
    precision: str = "fp32"
    runs: int = 20
    warmup: int = 2
    json_out: str | None = None
    plot: str | None = None

    def __post_init__(self):
        from .latency import COMPARISONS

        if (self.artifact_dir is None) == (self.source is None):
            raise ConfigError("give exactly one of ARTIFACT_DIR, MODEL_DIR or --preset NAME --random-init")
        for v in self.vs:
            if v not in COMPARISONS:
                raise ConfigError(f"unknown --vs path {v!r}; known: {', '.join(COMPARISONS)}")
        if self.runs < 1 or self.warmup < 0:
            raise ConfigError(f"--runs must be >= 1 and --warmup >= 0 (got {self.runs}, {self.warmup})")


def bench(cfg: BenchConfig, progress: Progress = silent) -> dict:
    """Latency of every artifact and every --vs path, interleaved in one process; stats, ratios, plots."""
    import tempfile

    from .latency import COMPARISONS, interleaved, random_feeds

    tmp = tempfile.mkdtemp(prefix="npuport-bench-") if cfg.source is not None else None
    sessions: dict = {}
    try:  # from here on, the temporary directory and every opened session are released whatever happens
        if tmp is not None:
            backends = cfg.backends or DEFAULT_PORT_RUNTIMES
            progress(f"porting to {', '.join(backends)} first")
            port(PortConfig(source=cfg.source, out=tmp + "/out", backends=backends, shapes=cfg.shapes,
                            precision=cfg.precision, capture_methods=("trace",), bench_runs=1), progress)
            root = Path(tmp) / "out"
        else:
            root = Path(cfg.artifact_dir)
        model, shapes = None, None
        for art in find_artifacts(root):
            manifest = read_manifest(art)
            name = manifest.runtime.name
            if cfg.backends and name not in cfg.backends:
                continue
            label = name if manifest.precision == "fp32" else f"{name}-{manifest.precision}"
            progress(f"loading {art.name} (hash check)")
            _, sessions[label] = load_session(art)
            shapes = sessions[label].shapes
            if model is None:  # the comparison paths, and the vocabulary for the inputs
                progress("loading the source model")
                model = ModelSource.from_manifest(manifest.source).load()
        if not sessions:
            raise ConfigError(f"no artifacts to benchmark under {root}" + (f" for backends {cfg.backends}" if cfg.backends else ""))
        runners = {v: COMPARISONS[v](model) for v in cfg.vs}
        runners.update({n: s.run for n, s in sessions.items()})
        per_shape, raw = {}, {}
        for b, t in sorted(shapes):
            progress(f"{b}x{t}: {', '.join(runners)} interleaved, {cfg.runs} runs each")
            samples: dict = {}
            stats = interleaved(runners, random_feeds(model, b, t), cfg.runs, cfg.warmup, samples)
            for st in stats.values():
                st["sequences_per_s"] = b * 1000.0 / st["p50_ms"]
                st["tokens_per_s"] = b * t * 1000.0 / st["p50_ms"]
            per_shape[f"{b}x{t}"] = stats
            raw[f"{b}x{t}"] = samples
        head = f"{max(shapes)[0]}x{max(t for _, t in shapes)}"
        head = head if head in per_shape else list(per_shape)[-1]
        results = per_shape[head]
        ref = "eager" if "eager" in results else None
        ratios = {n: results[ref]["p50_ms"] / r["p50_ms"] for n, r in results.items()} if ref else {}
        out = {"headline_shape": head, "results": results, "per_shape": per_shape, "ratios_vs_eager_p50": ratios,
               "best": min(sessions, key=lambda n: results[n]["p50_ms"]), "runs": cfg.runs, "warmup": cfg.warmup,
               "machine": machine(), "npuport_version": __version__}
        if cfg.plot:
            from .plots import latency_distribution, latency_vs_length

            p = Path(cfg.plot)
            out["plots"] = [latency_distribution(raw[head], p, f"latency at {head} ({cfg.runs} interleaved runs)")]
            seqs = {t for _, t in shapes}
            if len(seqs) > 1:
                b0 = min(b for b, _ in shapes)
                per_len = {str(t): per_shape[f"{b0}x{t}"] for t in sorted(seqs)}
                out["plots"].append(latency_vs_length(per_len, p.with_name(p.stem + "_vs_length" + p.suffix)))
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
    """Train a char-level decoder LM with the step on `cfg.backend`; returns train.loop.TrainResult."""
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
