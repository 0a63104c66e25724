"""P11: calibrated static int8 with decisions held, and the per-call overhead at short inputs.

Three parts, one JSON (benchmarks/results/p11_int8.json); each part is side by side within itself and records its
own machine and date, so a part can be re-run alone (--parts) on a quiet machine:
  decisions  the demo detector at buckets 32/64/128, int8 on ONNX Runtime (its default: NNCF with SmoothQuant 0.5;
             its own QDQ quantiser with MinMax and percentile, --smooth-quant off; dynamic for reference) and
             OpenVINO (NNCF), each static one with its default (the FFN down-projections in float) and the NNCF /
             MinMax ones also with every group quantised.
             Disjoint sets: calibrated on 256 rows of the train split, gated (min-agreement, auto's rounds) on the
             val split, and reported by `npuport verify` on the test split (unseen personas) and on test_family
             (unseen personas written in a template family no training row saw), so nothing chosen saw those rows.
  speed      mmBERT-small (random init; the seed's model family and the P13 done-when's model) 1 x 512: eager fp32,
             ORT / OpenVINO fp32 and int8 (also with ffn_out in float: the graph of those variants), and the same
             with --attention banded, interleaved in one process (npuport bench).
  speed_base the same for mmBERT-base.
             A random-init model has no tokenizer, so its int8 is calibrated on random-token probes:
             these parts measure speed only; decisions are the first part's.
  speed_avx2cap  the speed part on the kernels an AVX2 machine runs, run alone, in a child process that sees an
             AVX2 machine's CPUID (benchmarks/cpuid_avx2.c: the kernel's CPUID faulting, the AVX-512, VNNI, BF16 and
             AMX bits cleared), so PyTorch, MKL, oneDNN, OpenVINO and ONNX Runtime's MLAS (which has no switch of its
             own) each pick their AVX2 kernels themselves, and run them natively. The part records what each library
             detected and how many CPUIDs were served inside the timed runs.
  overhead   the demo detector at 64 tokens on ONNX Runtime: npuport's Session.run (and router + Session.run, the
             serving path) vs the raw onnxruntime call on the same session, interleaved, medians.

    python benchmarks/p11_int8.py [--runs 10] [--parts decisions,overhead,speed,speed_base]
    python benchmarks/p11_int8.py --parts speed_avx2cap      # the AVX2 machine's kernels on an AVX-512 one
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from common import CPUID_AVX2, RESULTS, cpuid_avx2_env, cpuid_seen, demo_build, meta, write_result

from npuport.api import BenchConfig, ModelSource, PortConfig, VerifyConfig, bench, port, verify
from npuport.detector.demo import DemoBuildConfig, build_demo
from npuport.runtimes import ShapeSpec
from npuport.spec import QuantOptions
from npuport.ui import Progress

GOAL_AGREEMENT = 0.995
RESULT = RESULTS / "p11_int8.json"
MEASURE = dict(min_agreement=0)  # measured here, not gated: the refusal is port's job and is tested
# every group calibrated int8 (the defaults keep groups in float, Runtime.default_keep, and OpenVINO's quantises
# ffn_out per token, Runtime.default_per_token)
NONE = dict(keep_fp32=(), per_token=(), **MEASURE)
FFN = ("ffn_out",)  # every layer's FFN down-projection in float (npuport/static/quantize.py FFN_OUT says why)
DEFAULT = ("ffn_out", "head")  # spec.DEFAULT_KEEP: the FFN down-projections and the head (OpenVINO's before P13)


def _calibration_rows(data, tmp, n: int = 256) -> str:
    """A fixed sample of the train split: calibration rows that are neither the gate's (val) nor the report's (test)."""
    import random

    rows = (data / "train.jsonl").read_text(encoding="utf-8").splitlines()
    path = f"{tmp}/calibration.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(random.Random(0).sample(rows, n)) + "\n")
    return path


def decisions(root, tmp, prog, only: str = "") -> dict:
    model, data = root / "model", root / "data"
    common = dict(source=ModelSource(model_dir=str(model)), shapes=ShapeSpec(buckets=(32, 64, 128)), precision="int8",
                  eval_data=str(data / "val.jsonl"), calibration_data=_calibration_rows(data, tmp), capture_methods=(),
                  bench_runs=10)
    off = dict(smooth_quant=-1, **MEASURE)  # ONNX Runtime's own QDQ quantiser, no SmoothQuant
    variants = {  # each runtime's default recipe (Runtime.default_keep, default_per_token); "every group" calibrates all
        "onnxruntime default (NNCF, SmoothQuant 0.5)": ("onnxruntime", QuantOptions(**MEASURE)),
        "onnxruntime NNCF, SmoothQuant 0.5, every group": ("onnxruntime", QuantOptions(**NONE)),
        "onnxruntime NNCF, SmoothQuant 0.95 (NNCF's own)": ("onnxruntime", QuantOptions(smooth_quant=0.95, **MEASURE)),
        "onnxruntime QDQ minmax (--smooth-quant off)": ("onnxruntime", QuantOptions(**off)),
        "onnxruntime QDQ minmax (--smooth-quant off), every group": ("onnxruntime",
                                                                      QuantOptions(keep_fp32=(), **off)),
        "onnxruntime QDQ percentile": ("onnxruntime", QuantOptions(method="percentile", **MEASURE)),
        "onnxruntime dynamic": ("onnxruntime", QuantOptions(mode="dynamic", **MEASURE)),
        "openvino default (NNCF, SmoothQuant 0.5)": ("openvino", QuantOptions(**MEASURE)),
        "openvino ffn_out and head in float (the default before)": ("openvino",
                                                                    QuantOptions(keep_fp32=DEFAULT, **MEASURE)),
        "openvino attention in float, ffn_out per token": ("openvino", QuantOptions(keep_fp32=("attention", "head"),
                                                                                     **MEASURE)),
        "openvino NNCF, SmoothQuant 0.5, head in int8": ("openvino", QuantOptions(keep_fp32=FFN, **MEASURE)),
        "openvino NNCF, SmoothQuant 0.5, every group": ("openvino", QuantOptions(**NONE)),
        "openvino NNCF, SmoothQuant 0.95 (NNCF's own)": ("openvino", QuantOptions(smooth_quant=0.95, **MEASURE)),
    }
    out = {}
    for i, (name, (backend, q)) in enumerate(variants.items()):
        if only and not any(t in name for t in only.split("|")):
            continue
        t0 = time.perf_counter()
        rep = port(PortConfig(out=f"{tmp}/dec{i}", runtimes=(backend,), quant=q, **common), prog)
        r = rep["backends"][backend]["int8"]
        quant = r.get("quant", {})
        row = {"runtime": backend, "quant": q.options(), "gate_rows": r["parity"]["data"]["n"],
               "gate_agreement": r["decision_agreement"], "refused": bool(r.get("refused")),
               "kept_fp32": quant.get("kept_fp32", []), "per_token": quant.get("per_token", []), "auto_rounds": r.get("auto_keep") or quant.get("auto_keep") or [],
               "quantization": quant.get("quantization"), "p50_ms_at_128": r.get("p50_ms")}
        if not r.get("refused"):  # the held-out figures: the written artifact re-checked on the test splits
            for split, key in (("test", ""), ("test_family", "family_")):
                v = next(iter(verify(VerifyConfig(path=f"{tmp}/dec{i}", eval_data=str(data / f"{split}.jsonl")), prog)
                              ["artifacts"].values()))["parity"]["data"]
                row.update({f"{key}decision_agreement": v["decision_agreement"], f"{key}rows": v["n"],
                            f"{key}max_abs_logit_diff": v["max_abs_logit_diff"],
                            f"{key}max_abs_prob_diff": v["max_abs_prob_diff"]})
        if quant.get("sensitivity"):
            row["sensitivity"] = quant["sensitivity"]
        out[name] = {**row, "seconds": round(time.perf_counter() - t0, 1)}
    arts = {n: next(iter((Path(tmp) / f"dec{i}").glob("*-int8"))) for i, n in enumerate(variants)
            if n in out and not out[n]["refused"]}
    for n, ms in _interleaved_p50(arts).items():  # each port's own 10 runs are not side by side: these are
        out[n]["p50_ms_at_128"] = ms
    return out


def _interleaved_p50(arts: dict, rounds: int = 40) -> dict:
    """p50 ms of every written artifact at 1 x 128 on one 128-token row, interleaved round by round (drift and a
    process's first-call effects hit every variant alike)."""
    from npuport.artifact import load_session
    from npuport.runtimes.base import feeds_of

    ids = np.arange(5, 5 + 128, dtype=np.int64)[None]
    feeds = feeds_of(ids, np.ones_like(ids))
    sessions = {n: load_session(str(a))[1] for n, a in arts.items()}
    times = {n: [] for n in sessions}
    for s in sessions.values():
        s.run(feeds)
    for _ in range(rounds):
        for n, s in sessions.items():
            t0 = time.perf_counter()
            s.run(feeds)
            times[n].append((time.perf_counter() - t0) * 1e3)
    return {n: round(statistics.median(v), 2) for n, v in times.items()}


def _label(art: Path) -> str:
    """The name bench gives this int8 artifact (-keep-GROUPS, -per-token-GROUPS: the graph), used as its directory
    name so the variants side by side never collide (render_goals.py matches decisions to speed by it)."""
    from npuport.api import _bench_label
    from npuport.artifact import read_manifest

    return _bench_label(read_manifest(art), art, set())


def speed(tmp, runs: int, prog, preset: str, both=("onnxruntime", "openvino"), capped: bool = False) -> dict:
    src, shapes = ModelSource(preset=preset, random_init=True), ShapeSpec(buckets=(512,))
    art = f"{tmp}/speed"
    port(PortConfig(source=src, out=art, runtimes=both, shapes=shapes, capture_methods=(), bench_runs=1), prog)
    # every group calibrated int8; each runtime's default recipe; OpenVINO's earlier default (ffn_out, head in float)
    # and its default with attention in float (the decisions table's rows of the same names)
    for out, rts, q in (("speed8", both, QuantOptions(**NONE)), ("speed8d", both, QuantOptions(**MEASURE)),
                        ("speed8f", ("openvino",), QuantOptions(keep_fp32=DEFAULT, **MEASURE)),
                        ("speed8a", ("openvino",), QuantOptions(keep_fp32=("attention", "head"), **MEASURE))):
        port(PortConfig(source=src, out=f"{tmp}/{out}", runtimes=rts, shapes=shapes, precision="int8",
                        capture_methods=(), bench_runs=1, quant=q), prog)
        for d in rts:
            a = Path(f"{tmp}/{out}/{d}-int8")
            if not Path(f"{art}/{_label(a)}").exists():  # a label already there is the same graph
                shutil.move(str(a), f"{art}/{_label(a)}")
    # --attention banded (sliding-window layers compute their band only), fp32 and int8 on both runtimes; bench
    # labels them *-banded
    port(PortConfig(source=src, out=f"{tmp}/speedb", runtimes=both, shapes=shapes,
                    capture_methods=(), bench_runs=1, attention="banded"), prog)
    port(PortConfig(source=src, out=f"{tmp}/speedb8", runtimes=both, shapes=shapes,
                    precision="int8", capture_methods=(), bench_runs=1, attention="banded", quant=QuantOptions(**NONE)),
         prog)
    for d in (f"speedb{x}/{rt}-{p}" for rt in both for x, p in (("", "fp32"), ("8", "int8"))):
        shutil.move(f"{tmp}/{d}", f"{art}/{d.replace('/', '-')}")
    seen = cpuid_seen() if capped else None
    out = {"preset": preset, **bench(BenchConfig(artifact_dir=art, vs=("eager",), runs=runs, warmup=2), prog)}
    if capped:  # the evidence the cap took, and that the timed loop did not pay for trapped CPUIDs
        after = cpuid_seen()
        out["cpuid_seen"] = {**after, "cpuid_traps_in_bench": after["cpuid_traps"] - seen["cpuid_traps"]}
        out["onnxruntime_profile"] = _ort_profiles(Path(art))
    return out


def _ort_profiles(art: Path) -> dict:
    """Where ONNX Runtime's time goes in its fp32 and int8 graphs at 1 x 512 (its own profiler, share of kernel time
    per op type): what int8 leaves in float bounds how far int8 can go on kernels without VNNI."""
    from npuport.runtimes.onnxruntime import op_profile

    ids = np.random.default_rng(0).integers(5, 1000, (1, 512), dtype=np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    return {d.name: op_profile(d / "model.onnx", feeds, threads=os.cpu_count() or 1)
            for d in sorted(art.iterdir()) if "onnxruntime" in d.name and (d / "model.onnx").exists()}


def overhead(root, tmp, prog, calls: int = 400, rounds: int = 5) -> dict:
    from npuport.artifact import load_session
    from npuport.router import BucketRouter
    from npuport.runtimes.base import feeds_of

    port(PortConfig(source=ModelSource(model_dir=str(root / "model")), out=f"{tmp}/ovh", runtimes=("onnxruntime",),
                    shapes=ShapeSpec(buckets=(32, 64, 128)), capture_methods=(), bench_runs=1), prog)
    manifest, session = load_session(f"{tmp}/ovh/onnxruntime-fp32")
    router = BucketRouter(session.shapes, manifest.pad_token_id)
    row = np.arange(5, 5 + 57, dtype=np.int64)  # 57 tokens -> the 64 bucket
    ids = np.zeros((1, 64), np.int64)
    ids[0, :57] = row
    feeds = feeds_of(ids, (ids != 0).astype(np.int64))
    raw = session.sessions[(1, 64)]

    def t(fn):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - t0) / calls * 1e6

    paths = {"raw onnxruntime": lambda: raw.run(None, feeds), "npuport Session.run": lambda: session.run(feeds),
             "router + Session.run": lambda: session.run(router.pack([row], router.bucket_for(len(row)), 1))}
    for fn in paths.values():
        fn()
    samples = {n: [] for n in paths}
    for _ in range(rounds):  # interleaved rounds: drift hits every path alike
        for n, fn in paths.items():
            samples[n].append(t(fn))
    med = {n: statistics.median(v) for n, v in samples.items()}
    base = med["raw onnxruntime"]
    return {"shape": [1, 64], "calls_per_round": calls, "rounds": rounds, "median_us": med,
            "overhead_vs_raw": {n: v / base - 1 for n, v in med.items() if n != "raw onnxruntime"}}


PARTS = ("decisions", "overhead", "speed", "speed_base", "speed_avx2cap")
SPEED_PRESETS = {"speed": "mmbert-small", "speed_base": "mmbert-base", "speed_avx2cap": "mmbert-small"}


def _in_avx2_child() -> bool:
    return any(p.endswith("cpuid_avx2.so") for p in os.environ.get("LD_PRELOAD", "").split())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10, help="timed runs per path in the speed part")
    ap.add_argument("--variants", default="", metavar="TEXT",
                    help="decisions: re-run only the variants whose name contains TEXT (several: A|B); the others are "
                         "kept from the last result (e.g. a variant timed while other work shared the cores)")
    ap.add_argument("--parts", default=",".join(p for p in PARTS if p != "speed_avx2cap"),
                    help="which parts to run (comma-separated; default all but speed_avx2cap, which runs alone); the "
                         "others are kept from the last result")
    args = ap.parse_args()
    parts = [x for x in args.parts.split(",") if x]
    if not parts or set(parts) - set(PARTS):
        ap.error(f"--parts: choose from {', '.join(PARTS)}")
    if "speed_avx2cap" in parts and parts != ["speed_avx2cap"]:
        ap.error("--parts speed_avx2cap runs alone (it needs its own process, which sees the AVX2 CPUID from its "
                 "start): python benchmarks/p11_int8.py --parts speed_avx2cap")
    if parts == ["speed_avx2cap"] and not _in_avx2_child():
        work = tempfile.mkdtemp(prefix="npuport-cpuid-")
        try:
            env = {**os.environ, **cpuid_avx2_env(work)}
            raise SystemExit(subprocess.call([sys.executable, *sys.argv], env=env))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    if _in_avx2_child() and cpuid_seen()["torch"] != "AVX2":
        raise SystemExit(f"the AVX2 CPUID did not take (PyTorch sees {cpuid_seen()['torch']}): see "
                         "benchmarks/cpuid_avx2.c")
    prog = Progress()
    root = build_demo(DemoBuildConfig(), prog, show_bar=False) if {"decisions", "overhead"} & set(parts) else None
    previous = json.loads(RESULT.read_text()) if RESULT.exists() else {}
    res = {p: previous[p] for p in PARTS if p in previous and p not in parts and "machine" in previous[p]}
    tmp = tempfile.mkdtemp(prefix="npuport-p11-")
    try:
        for part in parts:
            t0 = time.perf_counter()
            head = meta("p11_int8.py")
            last = previous.get("decisions") or {}
            # variants kept from the last run only when it measured the same demo build (else they are dropped)
            same = root is not None and last.get("demo") == demo_build(root)
            kept = last.get("variants", {}) if args.variants and same else {}
            body = {"decisions": lambda: {"demo": demo_build(root),
                                          "variants": {**kept, **decisions(root, tmp, prog, args.variants)}},
                    "overhead": lambda: overhead(root, tmp, prog),
                    "speed": lambda: speed(tmp, args.runs, prog, SPEED_PRESETS["speed"]),
                    "speed_base": lambda: speed(tmp, args.runs, prog, SPEED_PRESETS["speed_base"]),
                    "speed_avx2cap": lambda: {"isa_cap": CPUID_AVX2, "uncapped": [],
                                              **speed(tmp, args.runs, prog, SPEED_PRESETS["speed_avx2cap"],
                                                      capped=True)}}[part]()
            res[part] = {"date": head["date"], "machine": head["machine"], "versions": head["versions"],
                         "seconds": round(time.perf_counter() - t0, 1), **body}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    write_result("p11_int8", {**meta("p11_int8.py"), "goal_agreement": GOAL_AGREEMENT,
                              "model": "demo detector (decisions, overhead); mmBERT-small / mmBERT-base random init "
                                       "(speed / speed_base)", **res})


if __name__ == "__main__":
    main()
