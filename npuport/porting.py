"""The stages of `port` (npuport.api.port is their list): load and validate every input, adapt + capture + prove,
the eager reference, then per runtime compile -> check -> gate -> write, and the report.

    load_inputs -> capture_and_prove -> reference -> port_one (per runtime) -> write_report
"""

from __future__ import annotations

import dataclasses
import gc
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .artifact import write_manifest
from .bench import summarize, time_calls
from .config import PortConfig
from .errors import ConfigError
from .fsio import atomic_write, write_json_atomic
from .gate import next_group, quant_facts
from .gate import refusal as gate_refusal
from .machine import peak_rss_mb, release_memory
from .manifest import Manifest, RuntimeInfo
from .models.detector import Detector, max_positions, state_fingerprint
from .models.tokfiles import TokenizerFiles
from .proof import prove, reference_logits
from .router import BucketRouter
from .runtimes import _qat, feeds_of, get_runtime, runtime_names
from .spec import INTEGER_PRECISIONS, CompileSpec, ShapeSpec
from .static.adapters import check_attention
from .static.capture import capture, make_probes
from .task import Task
from .ui import ProgressFn as Progress
from .verifying import EagerReference, data_parity, eager_logits, judge_by, probe_parity

PROOF_FILE = "proof_inputs.safetensors"


def check_lengths(model: Detector, shapes: ShapeSpec) -> None:
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


def load_proof_inputs(path: Path) -> tuple[dict, dict]:
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
    cfg: PortConfig  # as given, or with the shapes --buckets auto planned
    bucket_plan: dict | None = None


@dataclass
class _Reference:
    """The eager fp32 side of every comparison: probe inputs per shape, their logits, logits on the eval data."""

    probes: dict
    refs: dict
    eval_ref: np.ndarray | None
    task: Task
    eval_ref_from: str | None = None  # "computed", or "given": an EagerReference of the same weights and rows


def port_one(name: str, captured, inputs: _Inputs, proof: dict, ref: _Reference, stage: Path, cfg: PortConfig,
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
        refusal = gate_refusal(name, prec, figs, cfg.quant, meta)
        if refusal is None:
            break
        shutil.rmtree(art)  # decisions lost: the artifact is not written (it only ever lived in the staging dir)
        kept = tuple(spec.options.get("keep_fp32", ()))
        raises = get_runtime(name).mixes_int16  # an integer NPU raises groups to 16-bit rather than leave the chip
        raised = tuple(meta.get("int16") or ())
        tried.append({"kept_fp32": list(kept), **({"int16": list(raised)} if raises else {}),
                      "decision_agreement": refusal["decision_agreement"],
                      "max_abs_logit_diff": refusal["max_abs_logit_diff"], **({"cost": meta["cost"]} if "cost" in meta
                                                                                else {}),
                      "sensitivity": meta.get("sensitivity", {})})
        nxt = next_group(meta.get("sensitivity") or {}, raised if raises else kept) if cfg.quant.auto_keep else None
        if nxt is None:
            if cfg.quant.auto_keep:
                refusal["reason"] += (f" (--keep-fp32 auto tried {len(tried)} round(s): every measured group "
                                      f"{'at 16-bit activations' if raises else 'in float'})")
                refusal["auto_keep"] = _rounds(tried)
            progress(f"{name}: refused: {refusal['reason']}")
            return {prec: refusal}
        change = {"int16": [*raised, nxt]} if raises else {"keep_fp32": [*kept, nxt]}
        progress(f"{name}: decisions {refusal['decision_agreement']:.2%} < {cfg.quant.min_agreement:.2%}; "
                 f"{f'raising {nxt} to 16-bit activations' if raises else f'keeping {nxt} in fp32 too'} "
                 "(--keep-fp32 auto)")
        spec = dataclasses.replace(spec, options={**spec.options, **change, "sensitivity": False})
    if tried:
        meta["auto_keep"] = _rounds(tried)
    manifest.parity, manifest.latency = figs, {"shape": list(cfg.shapes.largest), **lat}
    manifest.runtime.execution_precision = exec_prec
    write_manifest(art, manifest)  # the one write: file hashes, proof, parity and latency together
    release_memory()  # this runtime's compile and session are gone: the next one starts from the same floor
    summary = parity_summary(figs)
    entry = {**summary, "p50_ms": lat["p50_ms"], "p99_ms": lat["p99_ms"], "compile_seconds": round(compile_s, 1),
             "load_seconds": lat["load_s"],
             "disk_mb": round(_dir_size(art) / 2**20, 1), "artifact": art.name, "executes": manifest.runtime.executes,
             **({"execution_precision": exec_prec} if exec_prec else {}), "parity": figs,
             **_npu_facts(meta), **quant_facts(meta)}
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


def _check_quant_flags(cfg: PortConfig, specs: dict[str, CompileSpec]) -> None:
    """Every integer-precision flag must mean something to every runtime it reaches: refuse before anything loads."""
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
    if cfg.quant.fixed_keep and lacking:  # a runtime without groups would quantise them anyway: say so, don't ignore
        able = [n for n in runtime_names() if get_runtime(n).measures_sensitivity]
        raise ConfigError(f"--keep-fp32 {','.join(cfg.quant.fixed_keep)}: {', '.join(lacking)} cannot leave "
                          f"quantisation groups in float; runtimes that can: {', '.join(able)}")
    unmixed = [n for n, s in specs.items() if s.precision in INTEGER_PRECISIONS and not get_runtime(n).mixes_int16]
    if cfg.quant.int16 and unmixed:
        raise ConfigError(f"--int16 {','.join(cfg.quant.int16)}: {', '.join(unmixed)} cannot mix 8- and 16-bit "
                          f"activations in one graph; runtimes that can: {', '.join(runtime_names(mixes_int16=True))} "
                          "(elsewhere: --keep-fp32 GROUPS leaves groups in float)")
    flat = [n for n, s in specs.items() if s.precision in INTEGER_PRECISIONS and not get_runtime(n).quantizes_per_token]
    if cfg.quant.per_token and flat:  # a group the runtime would quantise per tensor instead: say so, don't ignore
        able = runtime_names(quantizes_per_token=True)
        raise ConfigError(f"--per-token {','.join(cfg.quant.per_token)}: {', '.join(flat)} cannot quantise a group "
                          f"per token; runtimes that can: {', '.join(able)} (elsewhere: --keep-fp32 "
                          f"{','.join(cfg.quant.per_token)} leaves them in float)")
    deaf = [n for n, s in specs.items() if s.precision in INTEGER_PRECISIONS
            and cfg.quant.method not in get_runtime(n).calibration_methods]
    if cfg.quant.method != "minmax" and deaf:  # a method a runtime would silently ignore: say so
        able = [n for n in runtime_names() if cfg.quant.method in get_runtime(n).calibration_methods]
        raise ConfigError(f"--calibration-method {cfg.quant.method}: {', '.join(deaf)} "
                          f"{'set their' if len(deaf) > 1 else 'sets its'} activation ranges its own way (the "
                          f"manifest's quantization entry says how); runtimes that honour it: "
                          f"{', '.join(able) or 'none'}. Drop the flag, or port those runtimes separately")
    rigid = [n for n, s in specs.items() if s.precision in INTEGER_PRECISIONS and get_runtime(n).smooth_quant is None]
    if cfg.quant.smooth_quant is not None and cfg.quant.smooth_quant >= 0 and rigid:
        able = [n for n in runtime_names() if get_runtime(n).smooth_quant is not None]
        raise ConfigError(f"--smooth-quant: {', '.join(rigid)} cannot apply SmoothQuant; runtimes that can: "
                          f"{', '.join(able)}. Drop the flag, or port those runtimes separately")
    static_only = [n for n, s in specs.items() if s.precision == "int8" and not get_runtime(n).quantizes_dynamic]
    if cfg.quant.mode == "dynamic" and static_only:
        able = runtime_names(quantizes_dynamic=True)
        whose = " / ".join(get_runtime(n).description.split(" (")[0] for n in able) or "no runtime"
        raise ConfigError(f"--quantization dynamic is {whose}'s (--runtime {','.join(able)}); "
                          f"{', '.join(static_only)} quantise statically")


def load_inputs(cfg: PortConfig, progress: Progress) -> _Inputs:
    """Stage 1, load: runtimes, devices and precisions, eval data, the model and its tokenizer."""
    specs = compile_specs(cfg.runtimes, cfg.shapes, cfg.precision, cfg.device)
    if cfg.source.module is not None:  # a module object has no directory form: runtimes that run the source refuse
        eager = [n for n in specs if get_runtime(n).saves_source]
        if eager:
            able = runtime_names(ports=True, saves_source=False)
            raise ConfigError(f"{', '.join(eager)} saves and runs the source model itself, and a module object has no "
                              f"saved form; port it to graph runtimes: {', '.join(able)}")
    _check_quant_flags(cfg, specs)
    specs = {n: dataclasses.replace(s, options={**s.options, **cfg.quant.options()}) if s.precision in INTEGER_PRECISIONS
             else s for n, s in specs.items()}
    progress("loading model")
    model = cfg.source.load()
    tokenizer = cfg.source.load_tokenizer()
    plan = None
    if cfg.auto_buckets:  # the shapes come from the rows: plan them first, then everything below uses them
        cfg, plan = _plan(cfg, model, tokenizer, progress)
        specs = {n: dataclasses.replace(s, shapes=cfg.shapes) for n, s in specs.items()}
    check_lengths(model, cfg.shapes)
    check_attention(model, cfg.attention, cfg.shapes.buckets)
    eval_rows = _eval_rows(cfg, model, tokenizer, cfg.eval_data) if cfg.eval_data else None
    calib_file = cfg.calibration_data or cfg.eval_data
    if calib_file:  # static quantisation calibrates on these rows (validated here, before anything is written)
        rows = eval_rows if calib_file == cfg.eval_data else _eval_rows(cfg, model, tokenizer, calib_file)
        what = "--calibration-data" if cfg.calibration_data else "--eval-data"
        specs = {n: dataclasses.replace(s, calibration=tuple(rows), calibration_source=f"{what} {Path(calib_file).name}"
                                        f" ({len(rows)} rows)") for n, s in specs.items()}
    specs = _with_qat(cfg, specs)
    source = cfg.source.describe(model, state_fingerprint(model))
    files = TokenizerFiles.of(tokenizer) if tokenizer is not None else None
    del tokenizer  # its rows are encoded; a 250k-piece tokenizer object holds ~0.35 GB through every compile
    return _Inputs(specs=specs, model=model, tokenizer=files, eval_rows=eval_rows, source=source, cfg=cfg,
                   bucket_plan=plan)



def _with_qat(cfg: PortConfig, specs: dict[str, CompileSpec]) -> dict[str, CompileSpec]:
    """A detector fine-tuned with `detector train --qat TARGET`: TARGET's spec takes the trained ranges (no
    calibration) when the port matches what was trained; anything that would quantise other edges is refused."""
    info = _qat.read_info(cfg.source.model_dir) if cfg.source.model_dir else None
    if info is None or info["target"] not in specs:
        return specs  # other runtimes take the trained float weights as any detector's
    name, spec = info["target"], specs[info["target"]]
    # what was not asked for follows the training (a runtime's default precision is not what QAT trained for)
    spec = dataclasses.replace(spec, precision=cfg.precision or info["precision"], device=cfg.device or info["device"])
    trained = f"--device {info['device']} --precision {info['precision']}"
    if (spec.device, spec.precision) != (info["device"], info["precision"]):
        raise ConfigError(f"{cfg.source.model_dir} was trained quantization-aware for {name} on {info['device']} at "
                          f"{info['precision']}; port {name} with {trained}, or train it again for {spec.device} at "
                          f"{spec.precision} (`npuport detector train --help`: its QAT options)")
    q = cfg.quant
    if q.int16 or q.fixed_keep or q.auto_keep or q.sensitivity or q.method != "minmax":
        raise ConfigError(f"{cfg.source.model_dir} holds ranges trained for the whole graph at {info['precision']} "
                          f"(qat.json): --int16, --keep-fp32, --sensitivity and --calibration-method would quantise "
                          f"other edges than the ones trained; drop them, or port a detector trained without QAT")
    missing = [b for b in cfg.shapes.batch_sizes if b not in info["batch_sizes"]]
    if missing:
        have = ",".join(map(str, info["batch_sizes"]))
        raise ConfigError(f"the QAT ranges in {cfg.source.model_dir} cover batch sizes {have}, not "
                          f"{','.join(map(str, missing))}: port with --batch-sizes {have}, or train it again with batch sizes "
                          f"{','.join(map(str, sorted({*info['batch_sizes'], *missing})))} (`npuport detector train "
                          "--help`: its QAT options)")
    ranges = Path(cfg.source.model_dir) / _qat.RANGES_FILE
    _qat.check(ranges, info["ranges_sha256"])  # before any heavy work
    b, t = info["shape"]
    int16 = list(info.get("int16") or [])  # the groups trained at 16-bit activations are ported at 16 bits
    qat = {"ranges": str(ranges), "ranges_sha256": info["ranges_sha256"], "steps": info["steps"], "shape": [b, t],
           "int16": int16,
           "ranges_origin": info["ranges_origin"], "eval_on": info["eval_on"],
           **{k: info[k] for k in ("float", "fake_quant_before", "fake_quant_after") if k in info},
           "describe": f"quantization-aware training ({info['steps']} steps at {b}x{t}; {_qat.RANGES_FILE} "
                       f"sha256 {info['ranges_sha256'][:12]})"}
    options = {**spec.options, "qat": qat, **({"int16": int16} if spec.precision == "int8" else {})}
    return {**specs, name: dataclasses.replace(spec, options=options)}


def _plan(cfg: PortConfig, model, tokenizer, progress: Progress) -> tuple[PortConfig, dict]:
    """--buckets auto: at most K buckets (K: --max-buckets and every runtime's max_buckets) that minimise padded
    tokens on the token lengths of --eval-data (else --calibration-data)."""
    from .buckets import plan_buckets

    path = cfg.eval_data or cfg.calibration_data
    limit = max_positions(model)
    whole = dataclasses.replace(cfg, shapes=ShapeSpec(batch_sizes=cfg.shapes.batch_sizes, buckets=(limit,)))
    lengths = [len(r) for r in _eval_rows(whole, model, tokenizer, path)]
    budget = min(get_runtime(n).max_buckets for n in cfg.runtimes)
    plan = plan_buckets(lengths, min(cfg.auto_buckets, budget), limit=limit,
                        source=f"{'--eval-data' if cfg.eval_data else '--calibration-data'} {Path(path).name}")
    progress(f"--buckets auto: {plan.summary()}")
    out = plan.to_json()
    out.update(asked=cfg.auto_buckets, runtime_budget=budget)
    shapes = ShapeSpec(batch_sizes=cfg.shapes.batch_sizes, buckets=plan.buckets)
    return dataclasses.replace(cfg, shapes=shapes, auto_buckets=None), out


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


def capture_and_prove(inputs: _Inputs, cfg: PortConfig, work: Path, progress: Progress):
    """Stages 2 and 3, adapt + capture + prove: the adapted module, its graphs, and eager-vs-graph figures."""
    src = inputs.source
    progress(f"adapting and capturing ({src['model_type']}, {src['parameters'] / 1e6:.1f}M parameters)")
    # The compact table goes into every graph of this capture: only when every runtime compiling one takes it.
    graphs = {n: s for n, s in inputs.specs.items() if not get_runtime(n).saves_source}
    compact = bool(graphs) and all(get_runtime(n).compact_tables and s.precision == "fp32" for n, s in graphs.items())
    captured = capture(inputs.model, cfg.shapes, work, cfg.attention, compact=compact)
    proof = prove(captured, list(cfg.capture_methods), progress)
    release_memory()
    return captured, proof


def reference(inputs: _Inputs, cfg: PortConfig, known: EagerReference | None = None) -> _Reference:
    """known: the eval rows' eager logits a caller computed already (api.port); used only when they are of this
    model's exact weights and these exact rows."""
    model = inputs.model
    probes = {s: make_probes(model, *s) for s in cfg.shapes.shapes()}
    refs = {s: [reference_logits(model, *p) for p in probes[s]] for s in cfg.shapes.shapes()}
    eval_ref, made = None, None
    if inputs.eval_rows is not None:
        if known is not None and known.matches(inputs.source["sha256"], inputs.eval_rows):
            eval_ref, made = known.logits, "given"
        else:
            eval_ref, made = eager_logits(model, inputs.eval_rows), "computed"
    return _Reference(probes=probes, refs=refs, eval_ref=eval_ref, task=Task.from_spec(model.spec.to_json()),
                      eval_ref_from=made)


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
        compile_seconds=round(compile_s, 1), bucket_plan=inputs.bucket_plan or {},
    )
    return manifest, compile_s


def _check_one(name: str, art: Path, manifest: Manifest, ref: _Reference, eval_rows, cfg: PortConfig, progress: Progress):
    """Stage 5, check one runtime: open what was just compiled, parity on probes (and data), latency."""
    progress(f"{name}: loading and checking parity")
    t0 = time.perf_counter()
    session = get_runtime(name).open(art, manifest)  # the load time of the device profile: what a server pays at start
    load_s = float(f"{time.perf_counter() - t0:.3g}")  # significant digits: a fast load must not read 0.0
    prec = manifest.precision
    try:
        on_data = eval_rows is not None and prec != "fp32"
        bar = cfg.quant.min_agreement if on_data and prec in INTEGER_PRECISIONS and cfg.quant.min_agreement > 0 else None
        figs = {"probes": judge_by(probe_parity(session, ref.probes, ref.refs, ref.task), name, prec, bar, not on_data)}
        if eval_rows is not None:
            router = BucketRouter(session.shapes, manifest.pad_token_id)
            figs["data"] = judge_by(data_parity(session, router, eval_rows, ref.eval_ref, ref.task), name, prec, bar)
        progress(f"{name}: timing {cfg.bench_runs} runs at {cfg.shapes.largest}")
        lat = {**_latency(session, cfg.shapes.largest, cfg.bench_runs), "load_s": load_s}
        return figs, lat, session.execution_precision
    finally:
        session.close()
        del session
        gc.collect()


def write_report(report: dict, out: Path, proof: dict, cfg: PortConfig, t_start: float) -> dict:
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


def parity_summary(figs: dict) -> dict:
    parts = list(figs.values())
    # probabilities and decisions from the parts that were judged on them (see verify.judge); all, when none was
    judged = [p for p in parts if "scores_judged_on" not in p] or parts
    return {
        "max_abs_logit_diff": max(p["max_abs_logit_diff"] for p in parts),
        "max_abs_prob_diff": max(p["max_abs_prob_diff"] for p in judged),
        "decision_agreement": min(p["decision_agreement"] for p in judged),
        # the worst part's (probes or data); None where every part was identical (or an older manifest's figures)
        "psnr_db": min((p["psnr_db"] for p in parts if p.get("psnr_db") is not None), default=None),
        "top1_agreement": min((p["top1_agreement"] for p in judged if p.get("top1_agreement") is not None),
                              default=None),
        "pass": all(p["pass"] for p in parts),
    }
