"""The goals RESULTS.md and README judge, as data: each a text, the results JSON it reads, how it is measured and
its bars, every threshold written once (a `Bar`: comparison, value and how the text shows it)."""

from __future__ import annotations

from typing import Callable, Iterable, NamedTuple

from render_sections import Bar, _flags, _has_vnni, _held_out, head, pct, row, times, times1, tree_memory, tree_peak_mb

# -- goals: data, each threshold written once --------------------------------------------------------------------




class Goal(NamedTuple):
    """One goal. `text` holds {0}, {1}, ... where its bars are shown, and {name} fields the measure fills in per row;
    `goal` is the same for a table with a goal column. `measure(results)` yields (fields, the measured figure as shown,
    the values the bars judge: one per bar, None when not measured), optionally followed by the measuring machine's
    CPU flags and bars of the row's own (a goal that depends on the machine); `source` names the results JSON it reads
    (no rows when it is absent)."""

    text: str
    source: str
    bars: tuple[Bar, ...]
    measure: Callable[[dict], Iterable[tuple]]
    goal: str = ""

    def rows(self, results: dict) -> list[tuple[str, ...]]:
        """(goal text, goal column, measured, met, CPU flags) per row."""
        if self.source not in results:
            return []
        out = []
        for fields, shown, values, *rest in self.measure(results):
            bars = rest[1] if len(rest) > 1 else self.bars
            text, goal = (t.format(*bars, **fields) for t in (self.text, fields.get("goal", self.goal)))
            if any(v is None for v in values):
                met = "—" if not bars else "no"
            else:
                met = "yes" if all(b.holds(v) for b, v in zip(bars, values, strict=True)) else "no"
            out.append((text, goal, shown, met, rest[0] if rest else ""))
        return out


FP32_RUNTIMES = ("onnxruntime", "openvino", "inductor")  # the fp32 artifacts B1 and B3 time beside eager


def _best_fp32(results):
    res = results["b1_latency_mmbert_base_512"]["bench"]["results"]
    fp32 = {n: v for n, v in res.items() if n in FP32_RUNTIMES}
    return res, min(fp32, key=lambda n: fp32[n]["p50_ms"])


def _vs_eager(results):
    res, best = _best_fp32(results)
    ratio = res["eager"]["p50_ms"] / res[best]["p50_ms"]
    yield {}, f"{best} {ratio:.2f}×", (ratio,)


def _vs_compile(results):
    res, best = _best_fp32(results)
    if "torch.compile" in res:
        rc = res["torch.compile"]["p50_ms"] / res[best]["p50_ms"]
        yield {}, f"{rc:.2f}×", (rc,)


def _vs_peer(results):
    peers = results.get("b1_peers") or {}
    pres = peers.get("results", {})
    # fp32 against fp32: optimum-intel's default runs bf16 where the CPU has it, so it is compared separately.
    theirs = {n: v["p50_ms"] for n, v in pres.items() if n in _peers_fp32(peers)}
    ours = {n: v["p50_ms"] for n, v in pres.items() if _npuport_fp32(n)}
    if theirs and ours:
        bp, bo = min(theirs, key=theirs.get), min(ours, key=ours.get)
        rp = theirs[bp] / ours[bo]
        yield ({"how": "same process, interleaved"}, f"{bo} {ours[bo]:.0f} ms vs {bp} {theirs[bp]:.0f} ms = {rp:.2f}×",
               (rp,))
    else:
        yield {"how": "optimum ORT / OpenVINO"}, "not measured", (None,)


def _bf16_vs_peer(results):
    pres = (results.get("b1_peers") or {}).get("results", {})
    if "optimum-intel-openvino" in pres and "npuport-openvino-bf16" in pres:
        a, b = pres["optimum-intel-openvino"]["p50_ms"], pres["npuport-openvino-bf16"]["p50_ms"]
        yield {}, f"{b:.0f} ms vs {a:.0f} ms = {a / b:.2f}×", (a / b,)


def _int8_b1(results):
    res, _ = _best_fp32(results)
    if "onnxruntime-int8" in res:
        r8 = res["eager"]["p50_ms"] / res["onnxruntime-int8"]["p50_ms"]
        yield {}, f"{r8:.2f}×", (r8,)


def _jitter_vs_eager(results):
    res, best = _best_fp32(results)
    jb, je = res[best]["jitter"], res["eager"]["jitter"]
    yield {}, f"{jb:.3f} vs {je:.3f}", (jb - je,)


def _jitter(results):
    res, best = _best_fp32(results)
    yield {}, f"{res[best]['jitter']:.3f}", (res[best]["jitter"],)


def _gemm_share(results):
    paths = results["b3_efficiency"]["paths"]
    share, name = max((v["fraction_of_gemm_peak"], n) for n, v in paths.items() if n in FP32_RUNTIMES)
    yield {}, f"{name} {share:.0%}", (share,)


def _buckets(results):
    for n, v in results["b2_buckets"]["results"].items():
        yield {"name": n}, f"{v['throughput_ratio']:.2f}×, {v['decision_agreement']:.0%}", (
            v["throughput_ratio"], v["decision_agreement"])


def _c16(results):
    return results["serve_load"]["results"][2]


def _serve_errors(results):
    c = _c16(results)
    yield ({}, f"{c['errors']} errors, {c['http_5xx']} 5xx, {c['duration_s']:.0f} s",
           (c["errors"] + c["http_5xx"], c["duration_s"]))


def _serve_rss(results):
    c = _c16(results)
    yield {}, f"{c['rss_growth_after_warmup']:.2%}", (c["rss_growth_after_warmup"],)


def _serve_scaling(results):
    x = results["serve_load"]["c16_vs_c1_throughput"]
    yield {}, f"{x:.2f}×", (x,)


def _fleet_efficiency(results):
    r = results["serve_fleet"]
    where = ("direct ingress; the ingress and load generator on the same cores" if "ingress_modes" in r
             else "proxy and load generator on the same cores")
    what = {"demo": "the demo detector", "minilm": "MiniLM + new head"}[r.get("model_choice", "minilm")]
    small = results.get("serve_fleet_minilm")
    beside = (f"; MiniLM, half its layers: {small['per_replica_efficiency']:.0%}"
              if small and r.get("model_choice") == "demo" else "")
    yield {}, f"{r['per_replica_efficiency']:.0%} ({what}, 1 thread per replica, {where}{beside})", (
        r["per_replica_efficiency"],)


def _fleet_overload(results):
    ov = results["serve_fleet"].get("overload")
    if ov:
        at = ov["at_4x"]
        yield ({}, f"{at['http_5xx']} 5xx, {at['share_429']:.1%} 429, admitted p99 {ov['admitted_p99_ratio']:.2f}×",
               (at["http_5xx"], ov["admitted_p99_ratio"]))


def _fleet_kill(results):
    k = results["serve_fleet"].get("kill")
    if k:
        other = k["http_5xx"] - k["503_with_retry_after"]
        yield ({}, f"{other} 5xx beyond 503+Retry-After, recovery {k['recovery_s']} s",
               (other, k["recovery_s"] if k["recovery_s"] is not None else float("inf")))


def _diloco_warm(results):
    r = results["lm_diloco"]["runs"].get("perworker/diloco-4-h50-b64") or {}
    w = results["lm_diloco"]["runs"].get("warm/diloco-4-h50") or {}
    for name, v in (("batch 16 per worker", r), ("global batch 16", w)):
        if "val_gap_pct" in v:
            yield ({"name": name}, f"{v['val_gap_pct']:+.1f} %, {v['traffic_reduction']:.0f}× less traffic",
                   (v["val_gap_pct"] / 100, v["traffic_reduction"]))


def _ft_kill(results):
    v = results["lm_ft"]["runs"].get("diloco-sigkill") or {}
    if "val_gap_pct_vs_fault_free" in v:
        ws = v["world_size"]
        dipped = min(ws) < 3 and ws[-1] == 3
        yield ({}, f"exit {v['exit_code']}, steps in order: {v['steps']}, world_size {min(ws)}→{ws[-1]}, "
               f"val {v['val_gap_pct_vs_fault_free']:+.2f} %",
               (v["exit_code"] + (0 if v["steps"] and dipped else 1), abs(v["val_gap_pct_vs_fault_free"]) / 100))


def _lm_control(results):
    for n, c in results["lm_control"].get("compare", {}).items():
        if not n.endswith("-jitter"):
            yield {"name": n}, f"{c['pearson']:.8f}, {c['max_abs_loss_diff']:.1e}", (c["pearson"], c["max_abs_loss_diff"])


def _lm_ort(results):
    v = results["lm_throughput"]["backends"].get("onnxruntime", {}).get("vs_eager")
    if v is not None:
        yield {}, f"{v:.2f}×", (v,)


def _int8_b4(results):
    v = results["b4_b6_precision"]["results"].get("int8", {}).get("onnxruntime")
    if v:
        a = v["decision_agreement_test_split"]
        yield {}, f"{a:.2%}, max abs Δprob {v['max_abs_prob_diff']:.1e}", (a,)


# Per NPU, the npu_mixed.py recipe a user gets by default: qnn's int8 recipe (its default precision is fp16, which
# is not an integer recipe), ethos-u's default precision (int16, a16w8 everywhere).
DEFAULT_RECIPES = {"qnn-int8-default": "qnn-int8", "ethos-u-int16": "ethos-u"}  # -> its npu_verify.py target


def _npu_recipe(results):
    verified = (results.get("npu_verify") or {}).get("targets", {})  # every unseen row: that goal row replaces this
    for name, v in results["npu_mixed"]["recipes"].items():
        if name in DEFAULT_RECIPES and "decision_agreement" in v and DEFAULT_RECIPES[name] not in verified:
            yield ({"name": name}, f"{v['decision_agreement']:.1%} of {v['n']} rows, 16-bit activations: "
                   f"{', '.join(v.get('int16') or []) or 'none'}",
                   (v["decision_agreement"],))


def built(r: dict) -> str:
    """Which demo detector a result measured: "demo vN" from its build record (`demo`, common.demo_build), or its date
    for runs from before v8, which did not record it."""
    d = r.get("demo")
    return f"demo v{d['demo_version']}" if d else f"a demo build before v8, {r['date'][:10]}"


def _npu_verified(results):
    """npu_verify.py: the default recipe ported as a user does, verified on every row of both unseen splits."""
    for name, t in results["npu_verify"]["targets"].items():
        if name not in DEFAULT_RECIPES.values():  # a trial recipe beside a default: its table row, not a goal
            continue
        s = t.get("splits") or {}
        done = {k: s[k] for k in ("test", "test_family") if "decision_agreement" in s.get(k, {})}
        if len(done) == 2:
            yield ({"name": name}, ", ".join(f"{k} {v['decision_agreement']:.2%} ({v['rows']} rows)"
                                             for k, v in done.items()) + f" ({built(t)})",
                   (min(v["decision_agreement"] for v in done.values()),))
        elif done:  # a run on one split (npu_verify.py --splits): the goal needs both
            missing = ", ".join(k for k in ("test", "test_family") if k not in done)
            yield ({"name": name}, ", ".join(f"{k} {v['decision_agreement']:.2%} ({v['rows']} rows)" for k, v in done.items())
                   + f"; {missing} not verified in this run", (None,))
        else:
            yield ({"name": name}, f"not verified: {(t.get('failed') or 'a split failed')[:160]}", (t.get("gate") or 0.0,))


def _qat_gain(source: str):
    """npu_qat.py: QAT's decisions on the unseen rows minus PTQ's with the same recipe, in points."""
    def rows(results):
        r = results[source]
        ptq, qat = (r["runs"][k]["on_eval"]["decisions_kept_vs_float"] for k in ("ptq", "qat"))
        recipe = "int8" + (f", 16-bit {', '.join(r['int16'])}" if r.get("int16") else "")
        yield ({"name": f"{r['device']}, {recipe}"}, f"QAT {qat:.1%} vs PTQ {ptq:.1%} ({r['eval_split']}; "
               f"{built(r)})", ((qat - ptq) * 100,))
    return rows


def _mmbert_npu_compile(results):
    for name, v in results["npu_port"].get("mmbert_small", {}).items():
        if name.startswith("ethos-u") and "@" in name:  # the ones asked for a named device (P13: the U85)
            shown = (f"{v['compile_seconds']:.0f} s, {v['wall_s']:.0f} s the whole port" if "compile_seconds" in v else
                     f"did not finish in {v['wall_s']:.0f} s")
            yield ({"name": name.split("@")[1]}, shown, (v.get("compile_seconds"),))


def _demo_budget(results, source="demo"):
    r = results[source]
    if not r.get("empty_cache"):
        return
    tree = tree_peak_mb(r)
    cap = f" (capped: {', '.join(f'{k}={v}' for k, v in r['isa_cap'].items())})" if r.get("isa_cap") else ""
    name = ("every library sees an AVX2 CPUID" if "CPUID" in (r.get("isa_cap") or {}) else
            "PyTorch, MKL and oneDNN only; the other runtimes uncapped")
    yield ({"name": name}, f"{r['first_run_seconds']:.0f} s, peak RSS {r['first_run_peak_rss_mb']:.0f} MB (process tree "
           + (tree_memory(r) if tree else "not sampled") + f"), flags {_flags(r)}{cap}",
           (r["first_run_seconds"], max(r["first_run_peak_rss_mb"], tree or 0) / 1024))


def _sci(x: float) -> str:
    return f"{x:.0e}".replace("e-0", "e-")  # 0.01 -> "1e-2"


GOALS = [
    Goal("fp32 @512: best npuport backend {0} eager (p50)", "b1_latency_mmbert_base_512", (Bar(">=", 1.1, times),),
         _vs_eager),
    Goal("fp32 @512: best backend {0} torch.compile", "b1_latency_mmbert_base_512", (Bar(">=", 1.0, times1),),
         _vs_compile),
    Goal("fp32 @512: {0} the best peer exporter ({how})", "b1_latency_mmbert_base_512", (Bar(">=", 1.0, times1),),
         _vs_peer),
    Goal("bf16 @512 (OpenVINO's CPU default here): npuport vs optimum-intel default", "b1_latency_mmbert_base_512",
         (Bar(">=", 1.0),), _bf16_vs_peer),
    Goal("int8, ONNX Runtime dynamic (B1; calibrated static int8: the P11 rows) {0} eager fp32 @512", "b1_latency_mmbert_base_512", (Bar(">=", 2, times),), _int8_b1),
    Goal("jitter of best backend ≤ eager's", "b1_latency_mmbert_base_512", (Bar("<=", 0.0),), _jitter_vs_eager),
    Goal("jitter of best backend {0}", "b1_latency_mmbert_base_512", (Bar("<=", 1.10, "{:.2f}".format),), _jitter),
    Goal("{0} of measured fp32 GEMM peak", "b3_efficiency", (Bar(">=", 0.9, pct),), _gemm_share),
    Goal("buckets {0} pad-to-512 throughput, identical decisions ({name})", "b2_buckets",
         (Bar(">=", 3, times), Bar(">=", 1.0)), _buckets),
    Goal("serve: 0 errors and no 5xx at concurrency 16 for {1}", "serve_load",
         (Bar("<=", 0), Bar(">=", 60, "{:g} s".format)), _serve_errors),
    Goal("serve: RSS growth {0} after warm-up", "serve_load", (Bar("<", 0.1, pct),), _serve_rss),
    Goal("serve: throughput at concurrency 16 {0} concurrency 1", "serve_load", (Bar(">=", 2, times),), _serve_scaling),
    Goal("fleet: per-replica efficiency at 2 replicas {0}", "serve_fleet", (Bar(">=", 0.75, pct),), _fleet_efficiency),
    Goal("fleet overload at 4× the limit: 5xx {0}, admitted p99 {1} the saturated p99", "serve_fleet",
         (Bar("<=", 0), Bar("<=", 2, times)), _fleet_overload),
    Goal("fleet: a killed replica costs no 5xx beyond 503 with Retry-After, and is replaced within {1}", "serve_fleet",
         (Bar("<=", 0), Bar("<=", 60, "{:g} s".format)), _fleet_kill),
    Goal("DiLoCo N=4 H=50 warm-started ({name}): val loss {0} above all-reduce's at equal tokens, traffic {1} less",
         "lm_diloco", (Bar("<=", 0.02, pct), Bar(">=", 40, times)), _diloco_warm),
    Goal("torchft, 3-worker DiLoCo on the CLI, a worker SIGKILLed mid-run: failures (exit ≠ 0, steps out of order, "
         "world_size not dipping and recovering) {0}, val loss within {1} of the fault-free run", "lm_ft",
         (Bar("<=", 0), Bar("<=", 0.03, pct)), _ft_kill),
    Goal("LM control run, {name} vs eager: Pearson {0} and max abs Δloss {1}", "lm_control",
         (Bar(">=", 0.9999), Bar("<=", 1e-2, _sci)), _lm_control),
    Goal("LM step tokens/s on ONNX Runtime {0} eager (equal threads, interleaved)", "lm_throughput",
         (Bar(">=", 1.0, times1),), _lm_ort),
    Goal("int8, ONNX Runtime dynamic (B4; calibrated static int8: the P11 rows) {0} decision agreement vs fp32 (demo test split)", "b4_b6_precision", (Bar(">=", 0.99, pct),), _int8_b4),
    Goal("`npuport demo` with an empty cache (2-core budget, set for AVX2): wall {0}, peak memory {1}", "demo",
         (Bar("<=", 600, "{:.0f} s".format), Bar("<=", 2.5, "{:.1f} GB".format)), _demo_budget),
    Goal("`npuport demo` with an empty cache, capped at AVX2 on this machine ({name}): wall {0}, peak memory {1}",
         "demo_avx2cap",
         (Bar("<=", 600, "{:.0f} s".format), Bar("<=", 2.5, "{:.1f} GB".format)),
         lambda results: _demo_budget(results, "demo_avx2cap")),
    Goal("integer NPU default recipe ({name}, on the target's execution): decisions {0} (test + held-out family)",
         "npu_mixed", (Bar(">=", 0.995, "{:.1%}".format),), _npu_recipe),
    Goal("integer NPU default recipe ({name}) ported from val.jsonl as a user does, `npuport verify` on unseen rows of "
         "test and test_family (row counts beside): decisions {0} on each", "npu_verify", (Bar(">=", 0.995, "{:.2%}".format),), _npu_verified),
    *(Goal("`--qat ethos-u` ({name}): decisions kept on unseen rows, QAT minus PTQ of the same recipe, {0}", src,
           (Bar(">", 0, "{:.1f} points".format),), _qat_gain(src)) for src in ("npu_qat", "npu_qat_layernorm")),
    Goal("mmBERT-small at 1 × 128 compiles for {name} on 2 cores: compile {0}", "npu_port",
         (Bar("<=", 600, "{:.0f} s".format),), _mmbert_npu_compile),
]


def goals(results: dict) -> list[str]:
    """The P4 goals, each met or not, with the measured ratio."""
    out = ["## Goals (ratios from one run each)", "", *head("| goal | measured | met |")]
    return out + [row(text, shown, met) for g in GOALS for text, _, shown, met, _ in g.rows(results)]


def _noise_floor(peers: dict) -> str:
    """On a CPU without bf16 the bf16-hinted OpenVINO artifact runs the very graph of `npuport-openvino` at f32: the
    spread of their medians is the run's noise floor, the margin a ratio needs before it means anything."""
    res, note = peers["results"], peers.get("notes", {}).get("npuport-openvino-bf16", "")
    if "float32" not in note or "npuport-openvino" not in res or "npuport-openvino-bf16" not in res:
        return ""
    a, b = res["npuport-openvino"]["p50_ms"], res["npuport-openvino-bf16"]["p50_ms"]
    return f"; noise floor: the same OpenVINO f32 graph timed twice differs by {abs(a - b) / min(a, b):.1%}"


def _peers_fp32(peers: dict) -> tuple[str, ...]:
    """The fp32 peers: optimum's ORTModel, optimum-intel pinned to f32, and optimum-intel's default too where the
    CPU plugin runs it at f32 (a CPU without bf16): the fastest of them is the one to beat."""
    names = ("optimum-onnxruntime", "optimum-intel-openvino-f32")
    if "float32" in peers.get("notes", {}).get("optimum-intel-openvino", ""):
        names += ("optimum-intel-openvino",)
    return names


def _npuport_fp32(path: str) -> bool:
    """npuport's fp32 paths in the peers run: dense and `--attention banded` (fp32 too; its proof is in the notes)."""
    return path.startswith("npuport-") and not path.endswith("bf16")




def _groups_of(label: str) -> tuple[list[str], list[str]] | None:
    """(the groups an int8 bench label kept in float, those it quantised per token), [] for none; None for a label
    that is not int8. p11_int8.py's labels: NAME-int8[-keep-A+B][-per-token-C]."""
    if "-int8" not in label:
        return None
    label, _, per_token = label.partition("-per-token-")
    kept = label.split("-keep-", 1)[1].split("+") if "-keep-" in label else []
    return sorted(kept), sorted(per_token.split("+")) if per_token else []


def _peer_fp32_row(results):
    peers = results["b1_peers"]
    res = peers["results"]
    ours = {n: v["p50_ms"] for n, v in res.items() if _npuport_fp32(n)}
    theirs = {n: v["p50_ms"] for n, v in res.items() if n in _peers_fp32(peers)}
    bo, bp = min(ours, key=ours.get), min(theirs, key=theirs.get)
    ratio = theirs[bp] / ours[bo]
    bo_txt = bo
    if bo.endswith("-banded"):
        bo_txt = f"{bo} (`--attention banded`: not bit-exact, its proof is in the B1 peers notes)"
    yield ({}, f"{bo_txt} {ours[bo]:.0f} ms vs {bp} {theirs[bp]:.0f} ms = {ratio:.2f}× ({peers['date'][:10]}, "
           f"[peers]({{link}}/results/b1_peers.json){_noise_floor(peers)})", (ratio,), _flags(peers))


# int8 speed at 1 x 512 vs eager fp32: what VNNI's int8 dot products allow, and what an AVX2 machine can reach
INT8_SPEEDUP = {True: Bar(">=", 2.5, times), False: Bar(">=", 2, times)}


def _decisions_bar(r: dict) -> Bar:
    return Bar(">=", r["goal_agreement"], lambda x: f"{x * 100:g} %")  # the bar p11_int8.py gated on, from its JSON


def _int8_row(results):
    """Speed and decisions must hold on one runtime and one graph: a static variant's decisions on the demo's unseen
    rows (the decisions part: test and test_family) go with the speed at 1 x 512 of the int8 artifacts that keep the
    same groups in float and per token (the speed part; bench labels them -keep-GROUPS-per-token-GROUPS). Calibration
    changes the scales, not the graph; kept and per-token groups do. The speed_avx2cap part (the same, with the
    kernels capped at AVX2) is judged by the AVX2 bar."""
    r = results["p11_int8"]
    dec, dbar = r.get("decisions"), _decisions_bar(r)
    held = {n: v for n, v in (dec or {}).get("variants", {}).items() if "dynamic" not in n and not v["refused"]}
    if not r.get("speed"):
        best = max(held.items(), key=lambda kv: _held_out(kv[1]), default=None)
        txt = f"{best[0]} {_held_out(best[1]):.2%}" if best else "no static variant measured"
        yield ({"goal": "{0} (VNNI) / {1}; {2}"}, f"speed not measured; best static variant on unseen data: {txt}",
               (None,), _flags(dec) if dec else "—", (INT8_SPEEDUP[True], INT8_SPEEDUP[False], dbar))
    for part in ("speed", "speed_avx2cap"):
        if r.get(part):
            yield from _int8_speed_row(r[part], held, dec, dbar)


def _int8_speed_row(sp: dict, held: dict, dec, dbar: Bar):
    cap = sp.get("isa_cap")
    vnni = _has_vnni(sp) and not cap
    speed = INT8_SPEEDUP[vnni]
    eager = sp["results"]["eager"]["p50_ms"]
    rows = []
    for good, v in held.items():
        rt = v["runtime"]
        speeds = {n: eager / s["p50_ms"] for n, s in sp["results"].items()
                  if n.startswith(rt + "-") and _groups_of(n) == (sorted(v["kept_fp32"]), sorted(v.get("per_token", [])))}
        if speeds:
            fast = max(speeds, key=speeds.get)
            rows.append((speed.holds(speeds[fast]) and dbar.holds(_held_out(v)), speeds[fast], rt, fast, good,
                         _held_out(v)))
    if not rows:
        yield {"goal": "{0}; {1}"}, "no runtime has both figures", (None, None), _flags(sp), (speed, dbar)
        return
    _, x, rt, fast, good, agree = max(rows)
    flags = _flags(sp) + ("" if _flags(sp) == _flags(dec) else f" (decisions: {_flags(dec)})")
    isa = "VNNI" if vnni else "no VNNI"
    if cap:
        isa = "AVX2: capped on this machine"
        flags += " (capped: " + ", ".join(f"{k}={v}" for k, v in cap.items()) + \
            (f"; not capped: {', '.join(sp['uncapped'])}" if sp.get("uncapped") else "") + ")"
    yield ({"goal": f"{{0}} ({isa}); {{1}}"}, f"{rt}: {fast} {x:.2f}× ({sp.get('preset', 'mmbert-base')}, "
           f"{sp['date'][:10]}); the same graph's decisions "
           f"on unseen data (the lower of test and test_family): {good} {agree:.2%}", (x, agree), flags, (speed, dbar))


def _overhead_row(results):
    o = results["p11_int8"].get("overhead")
    if o:
        x = o["overhead_vs_raw"]["npuport Session.run"]
        yield {}, f"{x:+.1%} ({o['date'][:10]})", (x,), _flags(o)


LM_THROUGHPUT = ("lm_throughput", "lm_throughput_avx512")  # the same benchmark on an AVX2 and an AVX-512 machine


def _lm_step_rows(results):
    for key in LM_THROUGHPUT:  # one row per machine measured: the ratios differ between them
        lt = results.get(key)
        if not lt:
            continue
        fp32 = {n: v for n, v in lt["backends"].items() if v.get("precision", "fp32") == "fp32"}  # the same arithmetic
        x, name = max((v["vs_eager"], n) for n, v in fp32.items() if "vs_eager" in v and n != "eager")
        gemm = f"; eager's matmul {lt['torch_matmul_gflops']:.0f} GFLOPS" if "torch_matmul_gflops" in lt else ""
        yield {"preset": lt["preset"]}, f"{name} {x:.2f}× ({lt['date'][:10]}{gemm})", (x,), _flags(lt)
        bf16 = _lm_bf16(lt, results.get("lm_control_bf16"))
        if bf16:  # beyond the fp32 goal: reported beside it, judged by nothing
            yield {"goal": "—", "preset": lt["preset"]}, bf16, (None,), _flags(lt), ()


def _lm_bf16(lt: dict, control: dict | None) -> str | None:
    """bf16 mixed precision is beyond the fp32 goal: reported beside it, against eager fp32 and eager's own autocast,
    with the loss curve of the same runtime against the fp32 control when a bf16 control run was measured."""
    b = lt["backends"]
    graph = [(v["vs_eager"], n) for n, v in b.items() if v.get("precision") == "bf16" and not n.startswith("eager")]
    if not graph:
        return None
    x, n = max(graph)
    peer = b.get("eager-bf16")
    vs_peer = f", {b['eager-bf16']['step_ms_median'] / b[n]['step_ms_median']:.2f}× eager-bf16 (autocast)" if peer else ""
    ran = ("gradient graph executed in bf16" if "bf16" in b[n].get("executes_in", [])
           else "stayed in f32: this CPU has no native bf16")
    curve = ""
    c = (control or {}).get("compare", {}).get(n)
    if c:
        curve = (f"; loss curve vs the fp32 control over {control['steps']} steps: Pearson {c['pearson']:.4f}, max abs Δloss "
                 f"{c['max_abs_loss_diff']:.3f} ([control]({{link}}/results/lm_control_bf16.json))")
    return f"{n} ({ran}) {x:.2f}× eager fp32{vs_peer}{curve}"


def _gpu_row(results):
    gpu = results.get("b5_gpu")
    if gpu:
        yield ({}, f"{gpu['best']} {gpu['best_p50_ms']:.2f} ms ({gpu['device']}, {gpu['date'][:10]})",
               (gpu["best_p50_ms"],), gpu["device"])
    else:
        yield {}, "not measured: no GPU was lent to the sessions that worked on P11", (None,), "—"


def _default_recipe_rows(results):
    """Each CPU runtime's default int8 recipe (the variant p11_int8.py names "<runtime> default"), judged on the rows
    nothing was calibrated or gated on: the lower of test and test_family."""
    r = results["p11_int8"]
    for name, v in (r.get("decisions") or {}).get("variants", {}).items():
        if not name.startswith(f"{v['runtime']} default") or v.get("refused"):  # not "... (the default before)"
            continue
        fam = v.get("family_decision_agreement")
        shown = (f"{name}: test {v['decision_agreement']:.2%} ({v['rows']} rows), test_family "
                 + (f"{fam:.2%}" if fam is not None else "not measured") + f" ({built(r['decisions'])})")
        yield ({"runtime": v["runtime"]}, shown, (min(v["decision_agreement"], fam) if fam is not None else None,),
               _flags(r["decisions"]), (_decisions_bar(r),))


P11_GOALS = [
    Goal("int8 default recipe on {runtime}: decisions on unseen rows (test, test_family)", "p11_int8", (),
         _default_recipe_rows, goal="{0}"),
    Goal("best fp32 path vs best fp32 peer, mmBERT-base 1 × 512", "b1_peers", (Bar(">=", 1.05, times),),
         _peer_fp32_row, goal="{0}"),
    Goal("int8 (static, calibrated) vs eager fp32, 1 × 512; decisions on the eval data", "p11_int8", (), _int8_row),
    Goal("demo detector at 64 tokens: npuport session call vs raw runtime call", "p11_int8", (Bar("<=", 0.05,
         lambda x: f"{x * 100:g} %"),), _overhead_row, goal="overhead {0}"),
    Goal("LM step tokens/s, best runtime vs eager (`{preset}`, fp32)", "p11_int8", (Bar(">=", 1.2, times),),
         _lm_step_rows, goal="{0}"),
    Goal("GPU 1 × 512 mmBERT-base p50", "p11_int8", (Bar("<=", 2, "{:g} ms".format),), _gpu_row, goal="{0}"),
]
BF16_ROW = "LM step, bf16 mixed precision (fp32 master weights; beyond the fp32 goal)"


def p11_goals(results: dict, link: str) -> list[str]:
    """The P11 goals table: each row met or not, with the CPU flags of the machine that measured it."""
    if "p11_int8" not in results:
        return []
    out = ["**P11 goals** (ratios measured side by side in one run each; the CPU flags of the machine that measured "
           "each row)", "", *head("| metric | goal | measured | met | CPU flags |")]
    for g in P11_GOALS:
        for text, goal, shown, met, flags in g.rows(results):
            bf16 = goal == "—"
            out.append(row(BF16_ROW if bf16 else text, goal, shown.replace("{link}", link), "—" if bf16 else met, flags))
    return out
