"""The sections of RESULTS.md: one function per results JSON, (results, link to benchmarks/) -> markdown lines.
Every figure comes from the JSON; render.py lists which section shows which JSON."""

from __future__ import annotations

import json
import operator
from pathlib import Path
from typing import Callable, NamedTuple

HERE = Path(__file__).resolve().parent


class Bar(NamedTuple):
    """A threshold: the comparison, the value and how the goal's text shows it (e.g. "≥ 1.1×")."""

    op: str  # ">=", "<=", "<"
    value: float
    fmt: Callable[[float], str] = "{:g}".format

    def __str__(self) -> str:
        return f"{SYMBOL[self.op]} {self.fmt(self.value)}"

    def holds(self, x: float) -> bool:
        return OPS[self.op](x, self.value)


OPS = {">=": operator.ge, "<=": operator.le, "<": operator.lt, ">": operator.gt}
SYMBOL = {">=": "≥", "<=": "≤", "<": "<", ">": ">"}
times = "{:g}×".format  # 2 -> "2×"
times1 = "{:.1f}×".format  # 1 -> "1.0×"
pct = "{:.0%}".format


SERVE_OVERLOAD_P99 = Bar("<=", 2, times)  # admitted p99 at 4x overload, relative to saturation
DETECTOR_VAL_F1 = Bar("<=", 0.01)  # |Δ val F1| of a static-graph fine-tune vs the eager control
DETECTOR_PEARSON = Bar(">=", 0.9999)  # its loss curve vs the control's


def load(name: str) -> dict | None:
    p = HERE / "results" / f"{name}.json"
    return json.loads(p.read_text()) if p.exists() else None


def head(header: str) -> list[str]:
    """The one table helper: a header row and its separator, the column count taken from the header."""
    return [header, "|" + "---|" * (header.count("|") - 1)]


def row(*cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def e(x: float) -> str:
    return "0 (exact)" if x == 0 else f"{x:.1e}"


def _cpuid_seen(seen: dict | None) -> str:
    """What the libraries detected in the capped run (benchmarks/common.py cpuid_seen), as evidence the cap took."""
    if not seen:
        return ""
    return (f"; detected there: PyTorch {seen['torch']}, numpy {'/'.join(seen['numpy'])}, OpenVINO "
            f"{'/'.join(seen['openvino'])}; CPUIDs trapped inside the timed runs: {seen['cpuid_traps_in_bench']}")


def machine_line(r: dict) -> str:
    m, v = r["machine"], r["versions"]
    iree = f", iree {v['iree-base-compiler']}" if v.get("iree-base-compiler") else ""
    flags = f" (CPU flags: {' '.join(m['cpu_flags'])})" if m.get("cpu_flags") else ""
    return (f"{m['processor']}, {m['cpu_count']} CPUs{flags}; torch {v['torch']}, transformers {v['transformers']}, "
            f"onnxruntime {v['onnxruntime']}, openvino {v['openvino']}{iree}; {r['date'][:10]}")


def port_section(r: dict, link: str) -> list[str]:
    rep = r["report"]
    out = [f"**Port of {rep['source']['preset']} (random init, {rep['source']['parameters'] / 1e6:.0f}M parameters), batch 1 × "
           f"{rep['shapes']['buckets'][0]} tokens, fp32** — `{r['command']}` ([script]({link}/port_mmbert_base.py), "
           f"[JSON]({link}/results/{Path(r['_file']).name})). Wall {rep['wall_seconds']:.0f} s, peak RSS "
           f"{rep['peak_rss_mb'] / 1024:.1f} GB, disk {rep['disk_mb'] / 1024:.1f} GB. {machine_line(r)}.", "",
           *head("| capture proof (eager HF model vs graph) | max abs Δlogit |")]
    out += [f"| {m} | {e(p['max_abs_diff'])} |" for m, p in rep["capture"].items()]
    out += ["", *head("| backend | max abs Δlogit | max abs Δprob | decisions agree | p50 ms | p99 ms |")]
    for b, v in rep["backends"].items():
        v = v["fp32"]
        out.append(f"| {b} | {e(v['max_abs_logit_diff'])} | {e(v['max_abs_prob_diff'])} | {v['decision_agreement']:.0%} | "
                   f"{v['p50_ms']:.0f} | {v['p99_ms']:.0f} |")
    return out


def tree_peak_mb(r: dict) -> float | None:
    """The demo's process-tree peak: proportional (shared pages split among sharers) where sampled, else the resident
    sum of an earlier run (shared pages counted once per process)."""
    return r.get("first_run_tree_peak_pss_mb") or r.get("first_run_tree_peak_rss_mb")


def tree_memory(r: dict) -> str:
    if r.get("first_run_tree_peak_pss_mb"):
        return (f"{r['first_run_tree_peak_pss_mb']:.0f} MB proportional, {r['first_run_tree_peak_rss_sum_mb']:.0f} MB "
                f"resident summed")
    return f"{r['first_run_tree_peak_rss_mb']:.0f} MB resident summed"


def _empty(r: dict) -> str:
    """What the first run started without (demo_run.py --fresh; Inductor's compile cache only since 2026-12-07)."""
    return "empty caches (npuport's and PyTorch Inductor's)" if r.get("empty_compiler_cache") else "an empty cache"


def _stage_seconds(r: dict) -> str:
    """The demo's stages, timed by the demo itself (report stage_seconds; older results: the build alone)."""
    st = r.get("first_run_stage_seconds") or r["report"].get("stage_seconds")
    if not st:
        return f"build {r['build']['seconds']:.0f} s"
    return ", ".join(f"{k} {v:.0f} s" for k, v in st.items())


def demo_capped_section(r: dict, link: str) -> list[str]:
    """`npuport demo` on an empty cache as on the AVX2 machine (demo_run.py --cap-avx2)."""
    cap = ", ".join(f"`{k}={v}`" for k, v in r["isa_cap"].items())
    if "CPUID" in r["isa_cap"]:
        how = (f"{cap}: every library in the demo and its subprocesses picks its AVX2 kernels itself (PyTorch, MKL, "
               f"oneDNN, ONNX Runtime, OpenVINO, IREE's host target), so this is the AVX2 machine's work on this "
               f"machine's cores")
    else:  # the earlier environment caps
        how = (f"{cap}, so the build (PyTorch training, most of the demo's time) and eager run AVX2 kernels; ONNX "
               f"Runtime, OpenVINO and IREE keep their own choice (AVX-512 here), so this bounds the AVX2 machine's "
               f"time from below")
    return [f"**`npuport demo`, kernels capped at AVX2** ([script]({link}/demo_run.py), [JSON]({link}/results/"
            f"{r['_file']})): {how}. First run with {_empty(r)} {r['first_run_seconds']:.0f} s "
            f"({_stage_seconds(r)}), peak RSS {r['first_run_peak_rss_mb']:.0f} MB (process tree "
            f"{tree_memory(r)}), F1 test {r['report']['detector']['f1']:.3f}. "
            f"{machine_line(r)}."]


def demo_section(r: dict, link: str) -> list[str]:
    rep, b = r["report"], r["build"]
    d = rep["detector"]
    tr = b["data"]["splits"]
    first = (f"first run with {_empty(r)} {r['first_run_seconds']:.0f} s (unpack, build, port, benchmark"
             + (f"; {_stage_seconds(r)}" if r.get("first_run_stage_seconds") or (
                 r["report"].get("stage_seconds") and r.get("cached_run_seconds") is None) else "") + ")"
             + (f", peak RSS {r['first_run_peak_rss_mb']:.0f} MB, disk {r['first_run_disk_mb']:.0f} MB"
                if r.get("first_run_peak_rss_mb") else "")
             + (f" (its whole process tree, stage and compiler subprocesses summed, sampled: peak "
                f"{tree_memory(r)})" if tree_peak_mb(r) else "")
             + "; " if r.get("empty_cache") else "")
    out = [f"**`npuport demo`** ([script]({link}/demo_run.py), [JSON]({link}/results/demo.json)): demo detector "
           f"({b.get('init', 'scratch')} init, {b['train']['train_rows']} training rows, {tr['train']['personas']} training "
           f"personas) built in {b['seconds']:.0f} s; {first}demo wall {rep['wall_seconds']:.0f} s with the model cached"
           + (f" (process tree peak {r['cached_run_tree_peak_pss_mb']:.0f} MB proportional)"
              if r.get("cached_run_tree_peak_pss_mb") else "") + ". "
           f"{machine_line(r)}.", "",
           f"- Test split, {d['n']} rows, {tr['test']['personas']} personas never seen in training: **F1 {d['f1']:.3f}**, "
           f"accuracy {d['accuracy']:.3f}, ROC-AUC {d['roc_auc']:.3f}, ECE {d['ece']:.3f}."]
    h = rep.get("detector_held_out_family")
    if h:
        out.append(f"- Held-out template family (same personas, phrasings no training row used), {h['n']} rows: "
                   f"**F1 {h['f1']:.3f}**, precision {h['precision']:.3f}, recall {h['recall']:.3f}, ROC-AUC {h['roc_auc']:.3f}.")
    out.append("")
    pb = rep["bench"]["per_bucket"]
    seqs = sorted(pb, key=int)
    out += [*head("| path | parity: max abs Δprob, decisions | " + " | ".join(f"p50 ms @ {s}" for s in seqs) + " | bucketed vs padded |")]
    out.append("| eager PyTorch | reference | " + " | ".join(f"{pb[s]['eager']['p50_ms']:.2f}" for s in seqs) + " | — |")
    for name, per in rep["port"]["backends"].items():
        v = per["fp32"]
        mix = rep["bench"]["length_mix"][name]
        out.append(f"| {name} | {e(v['max_abs_prob_diff'])}, {v['decision_agreement']:.0%} | "
                   + " | ".join(f"{pb[s][name]['p50_ms']:.2f}" for s in seqs) + f" | {mix['speedup']:.2f}× |")
    return out


def demo_init_section(r: dict, link: str) -> list[str]:
    res = r["results"]
    out = [f"**Demo detector: which init** ([script]({link}/demo_init.py), [JSON]({link}/results/demo_init.json)). Same seeded "
           "data; F1 at the threshold each build chose on its own validation split. *test*: personas never seen in "
           "training; *held-out family*: the same personas written only with templates no training row used; *check*: "
           f"{r['check_rows']} rows written by hand ([{r['check_set']}]({link}/{r['check_set'].removeprefix('benchmarks/')})), "
           f"other characters and phrasing, never used for training or thresholds"
           + (f"; *Korean check 2*: a second hand-written Korean set ([{r['check_ko2_set']}]"
              f"({link}/{r['check_ko2_set'].removeprefix('benchmarks/')})), written later with other characters"
              if r.get("check_ko2_set") else "")
           + (f"; *Korean checks 3 and 4*: two more ([3]({link}/{r['check_ko3_set'].removeprefix('benchmarks/')}), "
              f"[4]({link}/{r['check_ko4_set'].removeprefix('benchmarks/')})), new characters again; 3's errors were "
              "studied, 4 was scored only by its figures" if r.get("check_ko4_set") else "") + f". {machine_line(r)}.", "",
           *head("| init | parameters | build s | build peak RSS MB | model MB | F1 test | F1 held-out family | "
           "F1 check (P / R) | check rows | check ROC-AUC | check F1 en / ja / ko | check precision ko | "
           "F1 Korean check 2 (P / R) | F1 Korean checks 3 / 4 | [UNK] share ja / ko (check) | measured |")]
    for init, v in res.items():
        c = v["check"]
        langs = " / ".join(f"{c[k]['f1']:.2f}" for k in ("en", "ja", "ko") if k in c)
        unk = " / ".join(f"{c[k]['unk_share']:.1%}" for k in ("ja", "ko") if k in c)
        rss, disk = v.get("peak_rss_mb"), v.get("disk_mb")
        out.append(f"| {init} | {v['parameters'] / 1e6:.1f}M | {v['build_seconds']:.0f} | {f'{rss:.0f}' if rss else '—'} "
                   f"| {f'{disk:.0f}' if disk else '—'} | {v['test']['all']['f1']:.3f} | "
                   f"{v['test_family']['all']['f1']:.3f} | **{c['all']['f1']:.3f}** ({c['all']['precision']:.2f} / "
                   f"{c['all']['recall']:.2f}) | {c['all']['n']} | {c['all']['roc_auc']:.3f} | {langs} | "
                   f"{c.get('ko', {}).get('precision', 0):.2f} | {_ko2(v)} | {_ko34(v)} | {unk} | "
                   f"{v.get('date', '')[:10] or 'earlier'} |")
    for init, v in res.items():
        for seed, o in (v.get("other_seeds") or {}).items():
            c = o["check"]
            out.append(f"\n*{init}, seed {seed}* (another seed's data and training, same recipe): F1 test "
                       f"{o['test']['all']:.3f}, held-out family {o['test_family']['all']:.3f}, check {c['all']:.3f} "
                       f"(en / ja / ko {' / '.join(f'{c[k]:.2f}' for k in ('en', 'ja', 'ko') if k in c)}), "
                       + (f"Korean check 2 {o['check_ko2']['all']:.3f}, " if "check_ko2" in o else "")
                       + (f"Korean checks 3 / 4 {o['check_ko3']['all']:.3f} / {o['check_ko4']['all']:.3f}, "
                          if "check_ko4" in o else "")
                       + f"threshold {o['threshold']:.2f} (seed {v.get('seed', 0)}: {v['threshold']:.2f}).")
    return out


def _ko34(v: dict) -> str:
    ks = [v.get(k, {}).get("all") for k in ("check_ko3", "check_ko4")]
    return " / ".join(f"{k['f1']:.3f}" for k in ks) if all(ks) else "—"


def _ko2(v: dict) -> str:
    k = v.get("check_ko2", {}).get("all")
    return f"{k['f1']:.3f} ({k['precision']:.2f} / {k['recall']:.2f})" if k else "—"


def pretrained_section(r: dict, link: str) -> list[str]:
    res = r["results"]
    out = [f"**all-MiniLM-L6-v2, real weights, ported with proof** ([script]({link}/pretrained_minilm.py), "
           f"[JSON]({link}/results/pretrained_minilm.json)): parity vs eager fp32 on real sentences (demo test split + "
           f"hand-written check set), max abs Δprob and decision agreement, per precision; *random* is the same "
           f"architecture at random init; **FAIL** marks a port outside its precision's tolerance (verify.py). "
           f"{machine_line(r)}.", ""]
    runtimes = sorted({b for m in res.values() for p, per in m.items() if p in ("fp32", "fp16", "bf16", "int8") for b in per})
    out += [*head("| model | precision | " + " | ".join(runtimes) + " |")]
    for name, m in res.items():
        for prec in ("fp32", "fp16", "bf16", "int8"):
            if prec not in m:
                continue
            cells = [f"{e(m[prec][b]['max_abs_prob_diff'])}, {m[prec][b]['decision_agreement']:.1%}"
                     + ("" if m[prec][b]["pass"] else " **FAIL**") if b in m[prec] else "—" for b in runtimes]
            out.append(f"| {name} | {prec} | " + " | ".join(cells) + " |")
    return out


def b1_section(r: dict, link: str) -> list[str]:
    b = r["bench"]
    res = b["results"]
    eager = res["eager"]["p50_ms"]
    out = [f"**B1 latency: {r['preset']} (published config, random init), batch 1 × {r['seq_len']} tokens** — "
           f"{b['runs']} runs per path, interleaved in one process ([script]({link}/b1_latency.py), "
           f"[JSON]({link}/results/{r['_file']})). {machine_line(r)}.", "",
           *head("| path | p50 ms | p99 ms | max ms | jitter p99/p50 | speed vs eager (p50) | parity max abs Δlogit |")]
    parity = {**{k: v["max_abs_logit_diff"] for k, v in r["parity"]["fp32"].items()},
              "onnxruntime-int8": r["parity"]["int8"]["max_abs_logit_diff"]}
    for n, st in sorted(res.items(), key=lambda kv: kv[1]["p50_ms"]):
        out.append(f"| {n} | {st['p50_ms']:.0f} | {st['p99_ms']:.0f} | {st['max_ms']:.0f} | {st['jitter']:.3f} | "
                   f"{eager / st['p50_ms']:.2f}× | {e(parity[n]) if n in parity else 'reference' if n == 'eager' else '—'} |")
    out += ["", "The peer exporters (optimum, optimum-intel) need transformers 4.x and run in their own environment: see B1 peers."]
    return out


def b2_section(r: dict, link: str) -> list[str]:
    L = r["lengths"]
    out = [f"**B2 buckets {r['buckets']} vs padding to 512**, {r['preset']}, {L['n']} rows (length p50 {L['p50']:.0f}, "
           f"p90 {L['p90']:.0f}, max {L['max']}) ([script]({link}/b2_buckets.py), [JSON]({link}/results/{r['_file']})).", "",
           *head("| backend | bucketed rows/s | padded rows/s | throughput ratio | mean ms (bucketed / padded) | p99 ms (bucketed / padded) | decisions agree |")]
    for n, v in r["results"].items():
        out.append(f"| {n} | {v['buckets']['rows_per_s']:.2f} | {v['pad_to_512']['rows_per_s']:.2f} | {v['throughput_ratio']:.2f}× | "
                   f"{v['buckets']['mean_ms']:.0f} / {v['pad_to_512']['mean_ms']:.0f} | {v['buckets']['p99_ms']:.0f} / "
                   f"{v['pad_to_512']['p99_ms']:.0f} | {v['decision_agreement']:.0%} |")
    return out


def plan_buckets_section(r: dict, link: str) -> list[str]:
    out = [f"**Buckets planned from data** (`--buckets auto`, `npuport plan-buckets`) on the demo detector ({r['init']}) "
           f"splits ([script]({link}/plan_buckets.py), [JSON]({link}/results/plan_buckets.json)): at most K buckets "
           "(multiples of 8) minimising padded tokens; *saving* is against padding every row to the longest. "
           f"{machine_line(r)}.", "", *head("| split | rows | K | buckets | padded tokens | pad-to-max tokens | saving | real tokens / computed |")]
    for split, per in r["plans"].items():
        for k, v in per.items():
            out.append(f"| {split} | {v['rows']} | {k} | {', '.join(map(str, v['buckets']))} | {v['padded_tokens']:,} | "
                       f"{v['pad_to_max_tokens']:,} | {v['saving_vs_pad_to_max']:.1%} | {v['efficiency']:.1%} |")
    a = r["auto_port"]["bucket_plan"]
    out += ["", f"`port --buckets auto --max-buckets 3 --eval-data test.jsonl` chose {a['buckets']} "
            f"(**{'PASS' if r['auto_port']['pass'] else 'FAIL'}**; `verify --eval-data test_family.jsonl`: "
            f"**{'PASS' if r['verify_test_family']['pass'] else 'FAIL'}**). Throughput on the test split's {r['rows']} rows "
            f"(ONNX Runtime, batch 1, median of {r['runs']} interleaved runs):", "",
            *head("| shapes | buckets | rows/s |")]
    for name, v in r["throughput_test_split"].items():
        out.append(f"| {name} | {', '.join(map(str, v['buckets']))} | {v['rows_per_s']:.1f} |")
    return out


def b3_section(r: dict, link: str) -> list[str]:
    out = [f"**B3 efficiency**: {r['gflop_per_forward']:.1f} GFLOP per forward (analytic, dense-masked attention); measured fp32 "
           f"GEMM peak {r['gemm_peak_gflops']:.0f} GFLOP/s ({r['gemm']}, {r['threads']} threads) "
           f"([script]({link}/b3_efficiency.py), [JSON]({link}/results/{r['_file']})).", "",
           *head("| path | GFLOP/s | share of GEMM peak |")]
    for n, v in sorted(r["paths"].items(), key=lambda kv: -kv[1]["gflops_per_s"]):
        out.append(f"| {n} | {v['gflops_per_s']:.0f} | {v['fraction_of_gemm_peak']:.0%} |")
    prof = r.get("eager_profile_self_cpu_share")
    if prof:
        out += ["", "Profile of eager PyTorch at 1 × 512 (torch.profiler, share of self CPU time): "
                + ", ".join(f"`{k}` {v:.0%}" for k, v in prof.items()) + "."]
    return out


def demo_which(r: dict) -> str:
    """The demo detector a result measured, from its build record (`demo`: benchmarks/common.demo_build); runs from
    before v8 did not record it and are named by their date."""
    d = r.get("demo")
    return (f"demo data v{d['demo_version']}, {d['init']}, seed {d['seed']}" if d
            else f"a demo build before v8, {r['date'][:10]}: its version was not recorded")


def b4_section(r: dict, link: str) -> list[str]:
    out = [f"**B4/B6 lower precision** on the trained demo detector ({demo_which(r)}), drift vs eager fp32 and decisions on the demo test split "
           f"([script]({link}/b4_b6_precision.py), [JSON]({link}/results/{r['_file']})).", "",
           *head("| precision | backend | ran as | max abs Δlogit | max abs Δprob | decisions agree (test) | p50 ms @128 |")]
    for prec, per in r["results"].items():
        for b, v in per.items():
            out.append(f"| {prec} | {b} | {v.get('execution_precision') or prec} | {e(v['max_abs_logit_diff'])} | "
                       f"{e(v['max_abs_prob_diff'])} | {v['decision_agreement_test_split']:.2%} | {v['p50_ms_at_128']:.2f} |")
    return out


def serve_section(r: dict, link: str) -> list[str]:
    raw = r["raw_session_latency"]
    out = [f"**Serving under load** — {r['model']}; `{r['server']}`; closed-loop clients on loopback, on the same 2 cores as "
           f"the server ([script]({link}/serve_load.py), [JSON]({link}/results/{r['_file']})). Raw session latency without "
           f"HTTP: p50 {raw['p50_ms']:.1f} ms.", "",
           *head("| concurrency | seconds | requests/s | p50 ms | p99 ms | errors | 5xx | server RSS growth after warm-up |")]
    for x in r["results"]:
        out.append(f"| {x['concurrency']} | {x['duration_s']:.0f} | {x['throughput_rps']:.1f} | {x['latency']['p50_ms']:.1f} | "
                   f"{x['latency']['p99_ms']:.1f} | {x['errors']} | {x['http_5xx']} | {x['rss_growth_after_warmup']:.2%} |")
    out += ["", f"Throughput at concurrency 16 is {r['c16_vs_c1_throughput']:.2f}× that at concurrency 1.", ""]
    ov = r.get("overload")
    if ov:
        out += [f"Overload: the server admits {ov['admit']} requests at a time (`--max-concurrent-requests "
                f"{ov['admit']}`), driven at that concurrency and at 4×; a client answered 429 retries after 20 ms.", "",
                *head("| clients | admitted requests/s | admitted p50 ms | admitted p99 ms | 429 share | other errors | 5xx | "
                "server RSS growth after warm-up |")]
        for c, x in ov["runs"].items():
            a = x["admitted_latency"] or {"p50_ms": float("nan"), "p99_ms": float("nan")}
            out.append(f"| {c} | {x['admitted_rps']:.1f} | {a['p50_ms']:.1f} | {a['p99_ms']:.1f} | {x['share_429']:.1%} | "
                       f"{x['errors']} | {x['http_5xx']} | {x['rss_growth_after_warmup']:.2%} |")
        out += ["", f"Admitted p99 at 4× overload is {ov['admitted_p99_ratio']:.2f}× its value at saturation "
                f"(goal {SERVE_OVERLOAD_P99}: {'met' if SERVE_OVERLOAD_P99.holds(ov['admitted_p99_ratio']) else 'not met'})."]
    return out


def peers_section(r: dict, link: str) -> list[str]:
    out = [f"**B1 peers** (own environment: transformers {r['versions']['transformers']}, optimum {r['versions'].get('optimum')}, "
           f"optimum-onnx {r['versions'].get('optimum-onnx')}, optimum-intel {r['versions'].get('optimum-intel')}), backbone only, "
           f"1 × 512, interleaved with eager in that process ([script]({link}/b1_peers.py), [JSON]({link}/results/{r['_file']})).", "",
           *head("| path | p50 ms | p99 ms | speed vs eager (same process) |")]
    for n, v in r["results"].items():
        out.append(f"| {n} | {v['p50_ms']:.0f} | {v['p99_ms']:.0f} | {r['speed_vs_eager'][n]:.2f}× |")
    for n, note in r["notes"].items():
        if not n.endswith("vs_eager"):
            out.append(f"\n- {n}: {note}")
    return out


def lm_control_section(r: dict, link: str) -> list[str]:
    runs = r["runs"]
    ref = next(iter(runs))
    title = "LM control run, bf16 mixed precision" if any(n.endswith("-bf16") for n in runs) else "LM control run (P3)"
    out = [f"**{title}** — preset `{r['preset']}` ({runs[ref]['n_params'] / 1e6:.1f}M parameters), {r['steps']} "
           f"steps, batch {r['batch']} × {r['seq_len']} characters of `{Path(r['corpus']).name}`, peak lr {r.get('lr', 3e-3):g}; "
           f"the same init, data and schedule on every backend; each run against `{ref}` with `npuport lm compare` "
           f"([script]({link}/lm_control.py), [JSON]({link}/results/{r['_file']}), [plot]({link}/results/{r['plot'].split('/')[-1]})). "
           + ("`eager-jitter` is eager again from an init perturbed by 1e-7 relative (one ulp): the fp32 noise floor any "
              "non-bit-identical implementation shares. " if any(n.endswith("-jitter") for n in runs) else "")
           + ("`-bf16` runs train in bf16 mixed precision (`lm train --precision bf16`: bf16 gradients, fp32 master "
              "weights and AdamW; eager by autocast, OpenVINO by its bf16 hint on the gradient graph"
              + _executes_in(runs) + "): not the fp32 arithmetic, so they are judged by the loss curve, not bit for bit. "
              if any(n.endswith("-bf16") for n in runs) else "") + f"{machine_line(r)}.", "",
           *head("| run | final loss | val loss (bpc) | Pearson vs eager | max abs Δloss | final max abs Δparam | Gather/Scatter ops in graph |")]
    for n, v in runs.items():
        c = r["compare"].get(n)
        gl = ", ".join(sorted({o for g in v["graphs"].values() for o in g["gather_like_ops"]})) or ("none" if v["graphs"] else "—")
        cmp = (f"{c['pearson']:.8f} | {c['max_abs_loss_diff']:.1e} | {c.get('final_max_abs_param_diff', float('nan')):.1e}"
               if c else "(reference) | — | —")
        out.append(f"| {n} | {v['final_loss']:.4f} | {v['val_loss']:.4f} ({v['val_bpc']:.3f}) | {cmp} | {gl} |")
    floor = next((c["max_abs_loss_diff"] for n, c in r["compare"].items() if n.endswith("-jitter")), None)
    if floor is not None:  # the sentence is computed, not typed: which runtime sits within the fp32 noise floor
        graph = {n: c for n, c in r["compare"].items() if not n.endswith("-jitter")}
        within = [n for n, c in graph.items() if c["max_abs_loss_diff"] <= floor]
        above = [f"{n} ({c['max_abs_loss_diff']:.1e})" for n, c in graph.items() if c["max_abs_loss_diff"] > floor]
        out += ["", f"Against the 1-ulp noise floor (max abs Δloss {floor:.1e}): within it "
                f"{', '.join(within) or 'none'}; above it {', '.join(above) or 'none'}."]
    return out


def _executes_in(runs: dict) -> str:
    ran = sorted({p for v in runs.values() for p in v.get("executes_in", [])} - {"f32"})
    return f", which ran in {', '.join(ran)} on this CPU" if ran else ", which stayed in f32 on this CPU (no native bf16)"


def lm_npu_section(r: dict, link: str) -> list[str]:
    """Backprop on the Qualcomm HTP simulator vs the eager fp32 control (P9 #4)."""
    runs = r["runs"]
    ref = next(iter(runs))
    out = [f"**LM training on an NPU (P9)** — preset `{r['preset']}` ({runs[ref]['n_params'] / 1e6:.3f}M parameters), "
           f"{r['steps']} steps, batch {r['batch']} × {r['seq_len']} characters of `{Path(r['corpus']).name}`, peak lr "
           f"{r['lr']:g}, same init, data and schedule. `qnn`: the gradient graph (scaled loss) compiled for the Hexagon HTP "
           f"in fp16 and executed in Qualcomm's x86 HTP simulator, AdamW in fp32 on the host on fp32 master weights, "
           f"dynamic loss scaling; `-npu` = the gather-free graph ([script]({link}/lm_control.py), "
           f"[JSON]({link}/results/{r['_file']}), [plot]({link}/results/{r['plot'].split('/')[-1]})). Steps/s in the "
           f"simulator are simulation speed, not the chip's. {machine_line(r)}.", "",
           *head("| run | final loss | val loss | Pearson vs eager | max abs Δloss | skipped steps | loss scale (min–max) | ops left on the host | steps/s |")]
    for n, v in runs.items():
        c = r["compare"].get(n)
        mp = v.get("mixed_precision")
        host = ", ".join(sorted({o for g in v["graphs"].values() for o in g.get("host_ops", [])})) or ("none" if mp else "—")
        cmp = f"{c['pearson']:.6f} | {c['max_abs_loss_diff']:.1e}" if c else "(control) | —"
        sc = f"{mp['skipped_steps']} | {mp['loss_scale_min']:g}–{mp['loss_scale_max']:g}" if mp else "— | —"
        sps = v["tokens_per_s_median"] / (r["batch"] * r["seq_len"])
        out.append(f"| {n} | {v['final_loss']:.4f} | {v['val_loss']:.4f} | {cmp} | {sc} | {host} | {sps:.2f} |")
    return out


def npu_port_section(r: dict, link: str) -> list[str]:
    """The demo detector and mmBERT-small on the two NPUs that install here (P9 #5)."""
    out = [f"**The detector on NPUs (P9)** — {r['demo_model']}, buckets {r['buckets']}, calibrated on {r['calibration_rows']} "
           f"rows of the demo validation split, judged on {r['eval_rows']} rows of the test split "
           f"([script]({link}/npu_port.py), [JSON]({link}/results/{r['_file']})). What executes here: `simulator` = "
           f"Qualcomm's x86 HTP simulator running the compiled context binary; `reference` = the TOSA reference model "
           f"running the exact partitions handed to Vela. Ethos-U speed is Vela's cycle estimate, not a measurement. "
           f"{machine_line(r)}.", "",
           *head("| target | executes | max abs Δlogit (data) | decisions (data) | whole graph on NPU | result | per bucket |")]
    for name, v in r["detector"].items():
        if "failed" in v:
            out.append(f"| {name} | — | — | — | — | failed: {v['failed'][-160:]} | — |")
            continue
        d = v["parity"].get("data", v["parity"]["probes"])
        if "per_bucket" in v:
            per = "; ".join(f"{s}: {b['cycles']:,} cycles = {b['estimated_ms']:.2f} ms at {b['clock_mhz']:g} MHz, "
                            f"fake-quant vs reference {b['proof']['fake_quant_vs_reference_max_abs']:.1e}"
                            for s, b in v["per_bucket"].items())
        else:
            per = "host ops: " + "; ".join(f"{s}: {', '.join(h) or 'none'}" for s, h in v["host_ops"].items())
        out.append(f"| {name} | {v['executes']} | {d['max_abs_logit_diff']:.1e} | {d['decision_agreement']:.1%} | "
                   f"{'yes' if v['whole_graph_on_npu'] else 'no'} | {'PASS' if v['pass'] else 'FAIL'} | {per} |")
    for name, v in r.get("mmbert_small", {}).items():
        if "failed" in v:
            chk = v.get("check")
            pre = (f"`npuport check` ({chk['wall_s']:.0f} s): {chk['verdict'][:300]}" if chk else "—")
            out.append(f"| mmBERT-small {name} | — | — | — | — | port did not complete ({v['wall_s']:.0f} s): "
                       f"{v['failed'].strip().splitlines()[-1][:200]} | {pre} |")
        else:
            p = v["parity"]["probes"]
            per = ("; ".join(f"{s}: {b['cycles']:,} cycles = {b['estimated_ms']:.1f} ms at {b['clock_mhz']:g} MHz, "
                             f"SRAM {b['sram_kib']:,.0f} KiB, flash {b['flash_kib']:,.0f} KiB, {b['partitions']} "
                             f"partition(s), fake-quant vs reference {b['proof']['fake_quant_vs_reference_max_abs']:.1e}, "
                             f"costliest op {b['top_ops'][0]['op']} {b['top_ops'][0]['share']:.0%} of cycles"
                             + (f", compile: quantise {b['compile_s']['quantize']:.0f} s, lower "
                                                f"{b['compile_s']['lower']:.0f} s" if b.get("compile_s") else "")
                             for s, b in v["per_bucket"].items()) + "; " if "per_bucket" in v else "")
            per += f"compile {v['compile_seconds']:.0f} s, whole port {v['wall_s']:.0f} s" + (
                f" ({v['date'][:10]})" if v.get("date") else "")
            out.append(f"| mmBERT-small {name} (probes) | {v['executes']} | {p['max_abs_logit_diff']:.1e} | "
                       f"{p['decision_agreement']:.1%} | {'yes' if v['whole_graph_on_npu'] else 'no'} | "
                       f"{'PASS' if v['pass'] else 'FAIL'} | {per} |")
    return out


def ethosu_fakequant_section(r: dict, link: str) -> list[str]:
    """P13: the same Ethos-U recipes as fake-quantised PyTorch beside the TOSA reference model (npu_mixed.json)."""
    mixed = (load("npu_mixed") or {}).get("recipes", {})
    ref_of = {"int8": "ethos-u-int8-none", "int16": "ethos-u-int16"}
    out = [f"**Ethos-U: quantisation or lowering? (P13)** — the demo detector (init {r.get('demo_init')}, demo data "
           f"v{r.get('demo_version')}), {r['device']} recipes at {r['shape'][0]} × {r['shape'][1]}, "
           f"{r['eval_rows']} rows: the PT2E graph npuport's compile builds, run as fake-quantised PyTorch against the "
           "float detector, beside the TOSA reference model running the compiled partitions of the same recipe "
           f"(`npu_mixed.py`) ([script]({link}/ethosu_fakequant.py), [JSON]({link}/results/{r['_file']})). "
           f"{machine_line(r)}.", "",
           *head("| precision | fake-quantised graph: decisions | max abs Δlogit | TOSA reference model: decisions | "
                 "max abs Δlogit | widest activation range |")]
    for prec, v in r["precisions"].items():
        m = mixed.get(ref_of.get(prec, ""), {})
        ref = (f"{m['decision_agreement']:.1%} of {m['n']} | {m['max_abs_logit_diff']:.2f}"
               if "decision_agreement" in m else "— | —")
        lo, hi = v["widest_activation_ranges"][0]
        out.append(row(prec, f"{v['decision_agreement']:.1%}", f"{v['max_abs_logit_diff']:.2f}", ref,
                       f"[{lo:.3g}, {hi:.3g}]"))
    return out


def npu_mixed_section(r: dict, link: str) -> list[str]:
    """The demo detector's integer recipes on integer NPUs, judged on the target's own execution (P13 #1)."""
    out = [f"**Integer NPUs that keep the decisions (P13)** — the demo detector ({r['demo_init']} init), buckets "
           f"{r['buckets']}, calibrated on {r['calibration_rows']} validation rows, judged on {r['eval_split']} "
           f"([script]({link}/npu_mixed.py), [JSON]({link}/results/{r['_file']})). `simulator`: Qualcomm's x86 HTP "
           f"simulator running the compiled context binaries (bit-accurate); `reference`: the TOSA reference model "
           f"running the .tosa partitions handed to Vela (cost: Vela's cycle estimate). 16-bit activations = weights "
           f"stay 8-bit (w8a16 / a16w8). {machine_line(r)}.", "",
           *head("| recipe | flags | executes | decisions (data) | max abs Δlogit | 16-bit activations in | "
                 "artifact MB | cost on the target | host compute ops |")]
    sens = None
    for name, v in r["recipes"].items():
        rows = v.get("calibration_rows", r["calibration_rows"])  # a recipe run on another count says so in its name
        flags = f"`{v['flags']}`" + (f" (calibrated on {rows} rows)" if rows != r["calibration_rows"] else "") + (
            f"; {v['note']}" if v.get("note") else "")
        name = name.split(", calibrated on")[0]
        if "failed" in v:
            out.append(f"| {name} | {flags} | — | — | — | — | — | — | failed: {v['failed'][-160:]} |")
            continue
        if "refused" in v:
            out.append(f"| {name} | {flags} | — | {v['decision_agreement']:.1%} (refused) | "
                       f"{v['max_abs_logit_diff']:.2f} | — | — | — | — |")
            continue
        raised = v.get("int16") or []
        where = ("every activation" if raised == ["all"] else ", ".join(raised) or "none") + (
            " (default recipe)" if v.get("int16_by_default") and "default" in name else "")
        cost = v.get("cost") or {}
        host = ", ".join(cost.get("host_ops") or []) or "none"
        on_target = (f"{cost['cycles']:,} cycles" if "cycles" in cost else
                     f"{cost['context_mb']} MB context" if "context_mb" in cost else "—")
        out.append(f"| {name} | {flags} | {v['executes']} | {v['decision_agreement']:.1%} of {v['n']} | "
                   f"{v['max_abs_logit_diff']:.2f} | {where if 'int' in v['flags'] else '— (fp16)'} | {v['disk_mb']} | "
                   f"{on_target} | {host} |")
        sens = v.get("sensitivity") or sens
        for t in v.get("auto_keep") or []:
            out.append(f"| ↳ auto round | 16-bit in {', '.join(t.get('int16') or []) or 'nothing'} | | "
                       f"{t['decision_agreement']:.1%} (refused) | {t['max_abs_logit_diff']:.2f} | | | "
                       f"{(t.get('cost') or {}).get('context_mb', '—')} MB context | |")
    qnn_int = [n for n, v in r["recipes"].items() if n.startswith("qnn-") and "int" in v.get("flags", "")]
    per_tensor = [n for n in qnn_int if "per output channel" not in (r["recipes"][n].get("quantization") or "")]
    if per_tensor:  # recorded in each recipe's quantization string
        which = ("every qnn integer row above" if per_tensor == qnn_int else
                 ", ".join(dict.fromkeys(n.split(", calibrated on")[0] for n in per_tensor)))
        out += ["", f"MatMul weights per tensor in {which}: measured before qnn quantised them per "
                "output channel (the unseen-rows table below has qnn's default with per-channel weights, and the "
                "weights table after it why)."]
    if sens:
        first = next(iter(sens.values()))
        out += ["", f"Sensitivity ({first['rows']} calibration rows, on the {first['judged_on']}): each group alone at "
                "8-bit, every other activation at 16-bit — " + ", ".join(
                    f"{g} {x['decision_agreement']:.0%} / Δlogit {x['max_abs_logit_diff']:.2f}"
                    for g, x in sorted(sens.items(), key=lambda kv: (kv[1]["decision_agreement"],
                                                                      -kv[1]["max_abs_logit_diff"]))) + "."]
    return out


def _qat_loss(distill: float) -> str:
    if distill == 1:
        return "distilled from the float detector (`--qat-distill 1`)"
    return "the labels only (`--qat-distill 0`)" if distill == 0 else f"{distill:g} distillation + labels"


def npu_qat_section(r: dict, link: str) -> list[str]:
    """Quantization-aware fine-tuning for Ethos-U against post-training calibration (P13 #2)."""
    q, f = r["qat"], r["float"]
    mixed = f" with 16-bit activations in {', '.join(r['int16'])} (both runs)" if r.get("int16") else ""
    out = [f"**Quantization-aware fine-tuning for Ethos-U (P13)** — the demo detector ({r['demo_init']} init; "
           f"{demo_which(r)}) to "
           f"{r['device']} at int8{mixed}, {r['shape']}, executed by the TOSA reference model on the partitions handed to "
           f"Vela; decisions against the float detector's (before QAT) on {r['eval_split']}, never trained or "
           f"calibrated on. PTQ: calibrated on {r['calibration_rows']} validation rows. QAT: `detector train --qat "
           f"ethos-u` on {q['train_rows']} training rows, {q['epochs']} epoch(s), lr {q['lr']:g}, batch {q['batch']}, "
           f"loss {_qat_loss(q.get('distill', 1.0))}; "
           f"its port loads the ranges QAT held, no calibration"
           + (f"; each port's own `--eval-data` gate: {r['port_eval_split']}" if r.get("port_eval_split") else "")
           + "; wall s: the PTQ port ran beside a QAT run "
           f"([script]({link}/npu_qat.py), "
           f"[JSON]({link}/results/{r['_file']})). {machine_line(r)}.", "",
           *head("| run | decisions kept vs float | F1 | max abs ΔP vs float | fake-quant vs reference | "
                 "Vela cycles (est. ms) | wall s |"),
           f"| float detector | 100.0% | {f['f1']:.4f} | — | — | — | — |"]
    for name, label in (("ptq", "PTQ (calibrated)"), ("qat", "QAT (calibrated ranges held, weights trained)")):
        v = r["runs"][name]
        e = v["on_eval"]
        wall = v["port_wall_s"] + v.get("train_wall_s", 0)
        proof = v["proof"]
        fq = f"{proof['fake_quant_vs_reference_max_abs']:.1e}" + (
            f" (trained graph {proof['qat_forward_vs_reference_max_abs']:.1e})"
            if "qat_forward_vs_reference_max_abs" in proof else "")
        out.append(f"| {label} | {e['decisions_kept_vs_float']:.1%} | {e['f1']:.4f} | {e['max_abs_prob_diff_vs_float']:.3f} "
                   f"| {fq} | {v['cycles']:,} ({v['estimated_ms']:.1f}) | {wall:.0f} |")
    val = r["runs"]["qat"]["on_val"]
    out += ["", f"QAT's own figures on the validation rows (fake-quantised graph, decisions kept vs float): before "
            f"training {val['fake_quant_before']['decisions_kept_vs_float']:.1%} (calibrated ranges, the original "
            f"weights: what a port without QAT gives), after {val['fake_quant_after']['decisions_kept_vs_float']:.1%} "
            f"({r['runs']['qat']['steps']} steps)."]
    return out


def ethosu_profile_section(r: dict, link: str) -> list[str]:
    """Where an Ethos-U port's time goes (P13 #3)."""
    own = {k: v for k, v in r["arm_pass_seconds_top"].items() if k != "arm_pass_manager"}  # the manager: every pass
    passes = ", ".join(f"{k} {v:.1f} s" for k, v in list(own.items())[:6])
    out = [f"**Where an Ethos-U port's time goes (P13)** — {r['model']}, {r['target']}, one bucket {r['shape']}, "
           f"`npuport port` under cProfile, {r['wall_s']:.0f} s end to end ([script]({link}/ethosu_profile.py), "
           f"[JSON]({link}/results/{r['_file']})). Cumulative seconds (nested stages are indented and counted in "
           f"their parent). {machine_line(r)}.", "", *head("| stage | seconds | calls |")]
    out += [f"| {k.replace('  ', '· ')} | {v['seconds']:.1f} | {v['calls']} |" for k, v in r["stages"].items()]
    out += ["", f"ExecuTorch's Arm pass manager: {r['arm_pass_seconds_top'].get('arm_pass_manager', 0):.0f} s; the "
            f"passes with their own `call` ({r['arm_passes_counted']} modules) take little each ({passes}): the time is "
            "the generic retrace every ExportPass makes of the whole graph (the fx Interpreter row), not one pass."]
    return out


def lm_throughput_section(r: dict, link: str) -> list[str]:
    out = [f"**LM training throughput** — preset `{r['preset']}` ({r['n_params'] / 1e6:.1f}M parameters), batch {r['batch']} × "
           f"{r['seq_len']}, {r['threads']} threads for every backend, {r['rounds']} interleaved rounds of "
           f"{r['steps_per_round']} steps, medians ([script]({link}/lm_throughput.py), [JSON]({link}/results/{r['_file']})). "
           f"Peak RSS {r['peak_rss_mb'] / 1024:.2f} GB"
           + (f"; eager PyTorch's fp32 matmul at the step's largest shape: {r['torch_matmul_gflops']:.0f} GFLOPS"
              if "torch_matmul_gflops" in r else "") + f". {machine_line(r)}.", "",
           *head("| backend | precision (executes in) | tokens/s | step ms (median) | vs eager fp32 | setup s (export + compile) |")]
    for n, v in r["backends"].items():
        vs = f"{v['vs_eager']:.2f}×" if "vs_eager" in v else "—"
        prec = v.get("precision", "fp32") + (f" ({', '.join(v['executes_in'])})" if v.get("executes_in") else "")
        out.append(f"| {n} | {prec} | {v['tokens_per_s']:,.0f} | {v['step_ms_median']:.0f} | {vs} | {v['setup_s']:.1f} |")
    if any(v.get("precision") == "bf16" for v in r["backends"].values()):
        out += ["", "bf16 rows: mixed precision (`lm train --precision bf16`), not eager's fp32 arithmetic; their peer is "
                "`eager-bf16` (PyTorch autocast), their loss curves against the fp32 control are in the bf16 control run."]
    if r.get("onnxruntime_profile"):
        prof = ", ".join(f"{k} {v:.0%}" for k, v in list(r["onnxruntime_profile"].items())[:6])
        out += ["", f"ONNX Runtime step profile (share of kernel time): {prof}."]
    return out


def lm_distributed_section(r: dict, link: str) -> list[str]:
    out = [f"**Data-parallel LM training (P6)** — preset `{r['preset']}`, {r['steps']} steps × global batch {r['global_batch']} × "
           f"{r['seq_len']} characters ({r['tokens_total']:,} tokens for every configuration), `{r['backend']}` step graphs, one "
           f"thread per worker, torch.distributed gloo ([script]({link}/lm_distributed.py), [JSON]({link}/results/{r['_file']}), "
           f"[plot]({link}/results/lm_distributed.png)). {r['note']} MB sent = the all-reduce payload per worker (a ring "
           f"all-reduce moves 2(N−1)/N of it over each link). {machine_line(r)}.", "",
           *head("| configuration | final val loss (bpc) | MB sent per worker | wall s | DiLoCo: val-loss gap vs all-reduce N=4 | communication reduction |")]
    for n, v in r["runs"].items():
        gap = f"{v['val_loss_gap_vs_allreduce_4']:+.4f}" if "val_loss_gap_vs_allreduce_4" in v else "—"
        red = f"{v['communication_reduction_vs_allreduce_4']:.0f}×" if "communication_reduction_vs_allreduce_4" in v else "—"
        sent = f"{v['bytes_sent_per_worker'] / 1e6:,.1f}" if v["workers"] > 1 else "0 (one worker)"
        out.append(f"| {n} | {v['val_loss']:.4f} ({v['val_bpc']:.3f}) | {sent} | "
                   f"{v['wall_s']:.0f} | {gap} | {red} |")
    return out


def lm_gpu_section(r: dict, link: str) -> list[str]:
    m, v = r["machine"], r["versions"]
    out = [f"**LM control run on a GPU (the field report's setup)** — eager PyTorch on an {r['gpu']} (fp32, TF32 off) vs the "
           f"static-graph step on ONNX Runtime ({r['cpu_threads_for_onnxruntime']} CPU threads) on the same lent machine "
           f"({m['processor']}; torch {v['torch']}, onnxruntime {v['onnxruntime']}; {r['date'][:10]}) "
           f"([script]({link}/lm_gpu_control.py), [JSON]({link}/results/{r['_file']})).", "",
           *head("| model | steps | final loss GPU / ORT | val loss GPU / ORT | Pearson | max abs Δloss | tokens/s GPU / ORT | ORT peak RSS |")]
    for part, x in r["parts"].items():
        g, o, c = x["runs"]["eager-cuda"], x["runs"]["onnxruntime"], x["compare"]
        out.append(f"| {part} ({g['n_params'] / 1e6:.1f}M) | {x['config']['steps']} | {g['final_loss']:.4f} / {o['final_loss']:.4f} | "
                   f"{g['val_loss']:.4f} / {o['val_loss']:.4f} | {c['pearson']:.8f} | {c['max_abs_loss_diff']:.1e} | "
                   f"{g['tokens_per_s']:,.0f} / {o['tokens_per_s']:,.0f} | {o['peak_rss_mb'] / 1024:.1f} GB |")
    return out


def b5_section(r: dict, link: str) -> list[str]:
    """B5 on a lent GPU: latency and parity to eager fp32 of every CUDA path, and the compiled path per bucket."""
    m, v, b = r["machine"], r["versions"], r.get("batch", 1)
    done = "" if r.get("complete", True) else " — **cut short: the stages after the last row were not measured**"
    out = [f"**B5 — {r['preset']} {b} × {r['seq_len']} on a GPU** ({r['device']}; {r['runs']} runs per path, CUDA-synchronized; "
           f"TF32 {'on' if r.get('tf32_matmul') else 'off'}; {m['processor']}, {m['cpu_count']} CPUs; torch {v['torch']}, "
           f"transformers {v['transformers']}, onnxruntime {v.get('onnxruntime', '—')}; {r['date'][:10]}; "
           f"[script]({link}/b5_gpu.py), [JSON]({link}/results/{r['_file']})){done}.", "",
           *head("| path | p50 ms | p99 ms | sequences/s at p50 | vs eager fp32 | max abs Δlogit vs eager fp32 |")]
    eager = r["results"]["eager"]["p50_ms"]
    for n, x in r["results"].items():
        out.append(f"| {n} | {x['p50_ms']:.2f} | {x['p99_ms']:.2f} | {b * 1e3 / x['p50_ms']:,.0f} | "
                   f"{eager / x['p50_ms']:.1f}× | {e(x['max_abs_logit_diff'])} |")
    out += [f"| {n} | skipped: {why} | | | | |" for n, why in r.get("skipped", {}).items()]
    if r.get("buckets"):
        paths = list(next(iter(r["buckets"].values())))
        full = {n: r["results"][n]["p50_ms"] for n in paths if n in r["results"]}
        lengths = sorted(r["buckets"], key=int)
        out += ["", f"Bucketed lengths at batch {b} (p50 ms; ratio to the same path at {r['seq_len']} in brackets):", "",
                *head("| path | " + " | ".join(f"{b} × {n}" for n in lengths) + f" | {b} × {r['seq_len']} |")]
        for n in paths:
            cells = [f"{r['buckets'][k][n]['p50_ms']:.2f} ({full[n] / r['buckets'][k][n]['p50_ms']:.1f}×)"
                     if n in full else f"{r['buckets'][k][n]['p50_ms']:.2f}" for k in lengths]
            out.append(f"| {n} | " + " | ".join(cells) + f" | {full.get(n, float('nan')):.2f} |")
        comp = next((n for n in paths if n.startswith("torch.compile") and n in full), None)
        if comp:  # computed, so the sentence follows the JSON
            times = [r["buckets"][k][comp]["p50_ms"] for k in lengths] + [full[comp]]
            out += ["", f"`{comp}` at batch {b}: {min(times):.2f}–{max(times):.2f} ms from {lengths[0]} to "
                    f"{r['seq_len']} tokens, so the shortest bucket runs {full[comp] / times[0]:.1f}× faster than the longest"
                    + (" — at one sequence a call is bound by its fixed cost, and buckets buy the GPU little; they pay "
                       "when a batch fills it." if full[comp] / times[0] < 2 else
                       " — with a full batch the time follows the tokens, so routing to the smallest bucket pays.")]
    return out


def iree_flags_section(r: dict, link: str) -> list[str]:
    out = [f"**IREE compile flags for the LM step** — preset `{r['preset']}`, fused step graph, batch {r['batch']} × "
           f"{r['seq_len']}, variants timed interleaved ([script]({link}/iree_flags.py), [JSON]({link}/results/{r['_file']})). "
           f"{machine_line(r)}.", "", *head("| variant | flags | compile s | step ms (median) | vs default |")]
    for n, v in r["variants"].items():
        if "error" in v:
            out.append(f"| {n} | `{' '.join(v['flags'])}` | failed: {v['error']} | — | — |")
            continue
        out.append(f"| {n} | `{' '.join(v['flags']) or '(none)'}` | {v['compile_s']} | {v['step_ms_median']} | "
                   f"{v['vs_default']:.2f}× |")
    return out


def detector_control_section(r: dict, link: str) -> list[str]:
    """The detector fine-tuned with its step on static-graph runtimes vs the same schedule in eager PyTorch (P12)."""
    runs, rc = r["runs"], r["recipe"]
    ref = next(iter(runs))
    bf16 = any(v.get("precision") == "bf16" for v in runs.values())
    title = ("Detector fine-tuned in bf16 mixed precision (`detector train --precision bf16`) vs the fp32 control" if bf16
             else "Detector fine-tuned on static-graph runtimes (P12)")
    out = [f"**{title}** — {r['init']}, top {rc['train_top_layers']} layers "
           f"+ head trained ({runs[ref]['trained_parameters'] / 1e6:.2f}M parameters), {r['data']}; {rc['epochs']} epochs, "
           f"batch {rc['batch']}, buckets {'/'.join(map(str, rc['buckets']))}, one step graph per bucket sharing one set "
           f"of weights. Same init, data order and schedule everywhere; `{ref}` runs the same static schedule in eager "
           f"PyTorch ([script]({link}/detector_control.py), [JSON]({link}/results/{r['_file']}), "
           f"[plot]({link}/results/{r['plot'].split('/')[-1]})). {machine_line(r)}.", "",
           *head("| run | val F1 | test F1 | Pearson vs control | max abs Δloss | test decisions = control | tokens/s | × control | Gather/Scatter ops |")]
    for n, v in runs.items():
        c = r["compare"].get(n)
        gl = ", ".join(sorted({o for g in v["graphs"].values() for o in g["gather_like_ops"] or []})) or (
            "none" if v["graphs"] else "—")
        cmp = (f"{c['pearson']:.8f} | {c['max_abs_loss_diff']:.1e} | {c['test_decision_agreement']:.2%}" if c
               else "(control) | — | —")
        ratio = f"{c['tokens_per_s_ratio']:.2f}×" if c else "1.00×"
        out.append(f"| {n} | {v['best_val_f1']:.4f} | {v['test_f1']:.4f} | {cmp} | {v['tokens_per_s']:.0f} | {ratio} | {gl} |")
    worst_f1 = max((c["val_f1_diff"] for c in r["compare"].values()), default=0.0)
    worst_p = min((c["pearson"] for c in r["compare"].values()), default=1.0)
    if bf16:  # not fp32's arithmetic: judged by what the trained detector decides, not by a bit-level loss curve
        out += ["", f"bf16 runs: bf16 gradients, fp32 weights and AdamW{_executes_in(runs)}; worst |Δ val F1| vs the fp32 "
                f"control {worst_f1:.4f}, lowest Pearson {worst_p:.6f}."]
        return out
    f1, pe = DETECTOR_VAL_F1, DETECTOR_PEARSON
    out += ["", f"Goals (P12): validation F1 within {f1.fmt(f1.value)} of the control — worst |ΔF1| {worst_f1:.4f}, "
            f"{'met' if f1.holds(worst_f1) else 'not met'}; Pearson {pe} — worst {worst_p:.8f}, "
            f"{'met' if pe.holds(worst_p) else 'not met'}."]
    return out


def _has_vnni(r: dict) -> bool:
    return any("vnni" in f for f in r["machine"].get("cpu_flags", []))


def _flags(r: dict) -> str:
    return " ".join(r["machine"].get("cpu_flags", [])) or "—"


def p11_section(r: dict, link: str) -> list[str]:
    """Calibrated static int8 on the demo detector, its speed at 1 x 512, and the per-call overhead (P11)."""
    src = f"[script]({link}/p11_int8.py), [JSON]({link}/results/{r['_file']})"
    out = []
    dec = r.get("decisions")
    if dec:
        out += [f"**Calibrated int8 that holds decisions (P11)** — the demo detector ({demo_which(dec)}) at buckets 32/64/128; calibrated on "
                f"256 train rows, gated on the val split ({r['goal_agreement']:.1%} bar; `--keep-fp32 auto` rounds), "
                f"reported by `npuport verify` against eager fp32 on the test split (unseen personas) and on test_family "
                f"(unseen personas in a template family no training row saw) ({src}). {machine_line(dec)}.", "",
                *head("| int8 variant | kept in fp32 | val (gate) | test decisions | test_family decisions | max abs Δlogit (test) | "
                f"p50 ms @128 (interleaved) | held-out ≥ {r['goal_agreement']:.1%} |")]
        for n, v in dec["variants"].items():
            if v["refused"]:
                out.append(f"| {n} | {', '.join(v['kept_fp32']) or '—'} | {v['gate_agreement']:.2%} | refused | — | — | — "
                           "| no |")
                continue
            fam = f"{v['family_decision_agreement']:.2%}" if "family_decision_agreement" in v else "not measured"
            kept = ", ".join(v["kept_fp32"]) or "—"
            if v.get("per_token"):
                kept += f" ({', '.join(v['per_token'])} per token)"
            if v["auto_rounds"]:
                kept += f" ({len(v['auto_rounds'])} round(s) below the bar first: " + ", ".join(
                    f"{t['decision_agreement']:.2%}" for t in v["auto_rounds"]) + ")"
            out.append(f"| {n} | {kept} | {v['gate_agreement']:.2%} | {v['decision_agreement']:.2%} ({v['rows']} rows) | "
                       f"{fam} | {e(v['max_abs_logit_diff'])} | {v['p50_ms_at_128']:.1f} | "
                       f"{'yes' if _held_out(v) >= r['goal_agreement'] else 'no'} |")
        for n, v in dec["variants"].items():
            if v.get("sensitivity"):
                worst = sorted(v["sensitivity"].items(), key=lambda kv: -kv[1]["max_abs_logit_diff"])
                out += ["", f"Sensitivity ({n}; each group quantised alone, on the calibration rows): " + ", ".join(
                    f"{g} {e(x['max_abs_logit_diff'])} ({x['decision_agreement']:.1%})" for g, x in worst) + "."]
    for sp in filter(None, (r.get("speed"), r.get("speed_base"), r.get("speed_avx2cap"))):
        eager, model = sp["results"]["eager"]["p50_ms"], _preset_name(sp)
        cap = sp.get("isa_cap")
        capped = (f"; capped at AVX2 on this machine, the kernels an AVX2 machine runs: "
                  f"{', '.join(f'`{k}={v}`' for k, v in cap.items())}"
                  + (f"; not capped, so not run: {', '.join(sp['uncapped'])}" if sp.get("uncapped") else "")
                  + _cpuid_seen(sp.get("cpuid_seen"))) if cap else ""
        title = "int8 speed on AVX2 kernels (P11, P13)" if cap else "int8 speed (P11)"
        out += ["", f"**{title}** — {model} 1 × 512 (random init, calibrated on random probes: speed only{capped}; "
                f"every MatMul int8, or every one but the groups named after -keep- in float, and those after "
                f"-per-token- quantised per token at run time; ffn_out: the FFN down-projections, attention: the attention "
                f"core, softmax(QKᵀ)V), interleaved with eager ({src}). {machine_line(sp)}.", "",
                *head(f"| {model} 1 × 512 | p50 ms | p99 ms | vs eager fp32 |")]
        for n, v in sp["results"].items():
            out.append(f"| {n} | {v['p50_ms']:.0f} | {v['p99_ms']:.0f} | {eager / v['p50_ms']:.2f}× |")
    o = r.get("overhead")
    if o:
        out += ["", f"**Per-call overhead (P11)** at {o['shape'][0]} × {o['shape'][1]} (the demo detector on ONNX Runtime, "
                f"{o['rounds']} interleaved rounds of {o['calls_per_round']} calls, medians; {src}): " + ", ".join(
                    f"{n} {us:.0f} µs" for n, us in o["median_us"].items()) + "; overhead vs the raw call: " + ", ".join(
                    f"{n} {x:+.1%}" for n, x in o["overhead_vs_raw"].items()) + f". {machine_line(o)}."]
    return out

def p13_inductor_section(r: dict, link: str) -> list[str]:
    """PyTorch's own x86 int8 path (PT2E + Inductor) beside eager at 1 x 512, native and on AVX2 kernels (P13)."""
    src = f"[script]({link}/p13_inductor_int8.py), [JSON]({link}/results/{r['_file']})"
    parts = [(n, label, r[n]) for n, label in (("native", "this machine's"), ("avx2cap", "AVX2 (CPUID capped)"))
             if r.get(n)]
    paths = [p for p in dict.fromkeys(k for _, _, v in parts for k in v["p50_ms"]) if p != "eager"]
    profiles = [k for k in dict.fromkeys(k for _, _, v in parts for k in v) if k.startswith("profile_")]
    out = [f"**int8 through PyTorch's own x86 path (P13)** — mmBERT-small 1 × 512 (random init, calibrated on random "
           "tokens: speed only), PT2E with torchao's X86InductorQuantizer (static int8 activations, per-channel int8 "
           "weights: oneDNN's qlinear) compiled by Inductor with freezing, interleaved with eager fp32, medians; "
           "*-band*: the sliding-window layers in 64-token blocks, each block one entry of a fused-attention batch; "
           "*-mm*: attention as two matmuls and a softmax (Hugging Face's eager attention) instead of the fused SDPA "
           f"kernel; *profile*: ms per call by what runs, int8 GEMMs / attention / the rest ({src}).", "",
           *head("| kernels | eager ms | " + " | ".join(f"{p} ms (× eager)" for p in paths) + " | "
                 + " | ".join(f"profile {k.removeprefix('profile_int8_')}" for k in profiles) + " | CPU flags | date |")]
    for _, label, v in parts:
        p, x = v["p50_ms"], v["ratio_vs_eager"]
        cells = [f"{p[n]:.0f} ({x[n]:.2f}×)" if n in p else "not run" for n in paths]
        profs = [(f"{v[k]['int8_gemm_ms']:.0f} / {v[k]['attention_ms']:.0f} / {v[k]['other_ms']:.0f}" if k in v
                  else "—") for k in profiles]
        out.append(row(label, f"{p['eager']:.0f}", *cells, *profs, _flags(v), v["date"][:10]))
    cap = r.get("avx2cap")
    if cap:
        best = max((n for n in cap["ratio_vs_eager"] if n != "eager"), key=lambda n: cap["ratio_vs_eager"][n])
        prof, half = cap["profile_int8_dense"], cap["p50_ms"]["eager"] / 2
        out += ["", f"On AVX2 kernels the best of these, {best}, runs {cap['ratio_vs_eager'][best]:.2f}× eager: the "
                f"≥ 2× goal is {'met' if cap['ratio_vs_eager'][best] >= 2 else 'not met'} by PyTorch's own int8 path "
                f"either. 2× eager is {half:.0f} ms; the dense graph's int8 GEMMs alone take {prof['int8_gemm_ms']:.0f} "
                f"ms of its {prof['total_ms']:.0f} ms profiled, attention {prof['attention_ms']:.0f} ms and the fused "
                f"rest {prof['other_ms']:.0f} ms."]
    return out


def _preset_name(sp: dict) -> str:
    """The speed part's model as the tables name it (parts before the preset was recorded measured mmBERT-base)."""
    return {"mmbert-small": "mmBERT-small", "mmbert-base": "mmBERT-base"}.get(sp.get("preset", "mmbert-base"),
                                                                           sp.get("preset"))


def _held_out(v: dict) -> float:
    """A variant's decisions on unseen data: the lower of the test split and test_family (where measured)."""
    return min(v["decision_agreement"], v.get("family_decision_agreement", 1.0))


def serve_fleet_section(r: dict, link: str) -> list[str]:
    """npuport serve on Ray Serve: 1 and 2 model replicas beside the single process, overload, a replica killed."""
    out = [f"**Serving a fleet on Ray Serve (P14)** — {r['model']}; closed loop, {r['concurrency']} clients, "
           f"{r['duration_s']:.0f} s per run, every server the real CLI, the load generator on the same 2 cores; CPU "
           f"from each process's CPU time ([script]({link}/serve_fleet.py) `--model {r.get('model_choice', 'minilm')}`, [JSON]({link}/results/{r['_file']})). "
           f"{machine_line(r)}.", "",
           *head("| configuration | requests/s | p50 ms | p99 ms | errors | 5xx | CPU cores: server / Ray proxy / "
                 "ingress / model replicas / load generator | started in s |")]
    for name, v in r["runs"].items():
        cpu = v["cpu_cores_used"]
        parts = " / ".join(f"{cpu.get(k, 0):.2f}" for k in ("server (driver)", "proxy", "ingress", "model",
                                                              "load generator"))
        out.append(row(name, f"{v['throughput_rps']:.1f}", f"{v['latency']['p50_ms']:.1f}",
                       f"{v['latency']['p99_ms']:.1f}", v["errors"], v["http_5xx"], parts, f"{v['start_s']:.0f}"))
    modes = r.get("ingress_modes") or {"proxy": {"per_replica_efficiency": r["per_replica_efficiency"],
                                                  "vs_single_process": r["ray_vs_single_process"]}}
    for mode, m in modes.items():
        rs = m["vs_single_process"]
        hops = "Ray's proxy, then the ingress" if mode == "proxy" else "the ingress replica serving HTTP itself"
        out += ["", f"`--ray-ingress {mode}` ({hops}): per-replica efficiency at 2 replicas **"
                f"{m['per_replica_efficiency']:.0%}** (2-replica requests/s over twice the 1-replica figure); 1 "
                f"replica against the single process at the same concurrency: {rs['throughput']:.2f}× the throughput, "
                f"{rs['p50']:.2f}× the p50."
                + (f" The estimate from the 1-replica run's cost: it spent {r['runs'][f'ray {mode}, 1 replica']['cpu_ms_per_request']:.1f} CPU ms "
                   f"per request (every process, the load generator included), so {r['machine']['cpu_count']} cores "
                   f"give about {m['efficiency_ceiling_at_1_replica_cpu']:.0%} at that cost (the 2-replica run spent "
                   f"{r['runs'][f'ray {mode}, 2 replicas']['cpu_ms_per_request']:.1f} ms)."
                   if "efficiency_ceiling_at_1_replica_cpu" in m else "")]
    ov = r.get("overload")
    if ov:
        at = ov["at_4x"]
        out += ["", f"Overload through Ray at 4× the admission limit ({4 * ov['admit']} clients, "
                f"`--max-concurrent-requests {ov['admit']}`{', direct ingress' if 'ingress_modes' in r else ''}): "
                f"{at['share_429']:.1%} answered 429, {at['http_5xx']} "
                f"5xx, admitted p99 {at['admitted_latency']['p99_ms']:.0f} ms = {ov['admitted_p99_ratio']:.2f}× the "
                "saturated run's."]
    k = r.get("kill")
    if k:
        codes = ", ".join(f"{n} × {c}" for c, n in sorted(k["status_counts"].items()))
        rec = f"{k['recovery_s']:.1f} s" if k["recovery_s"] is not None else "not within the run"
        out += ["", f"One model replica SIGKILLed under load ({k['concurrency']} clients): {codes} over "
                f"{k['requests']} requests ({k['503_with_retry_after']} × 503 with Retry-After, {k['http_5xx']} 5xx in "
                f"all); {k['in_flight_at_kill']} requests were in flight at the kill, answered "
                f"{'/'.join(k['in_flight_status']) or '—'} within {k['in_flight_max_s']:.2f} s; a replacement replica "
                f"served after {rec}."]
    return out


def lm_diloco_section(r: dict, link: str) -> list[str]:
    """P15: DiLoCo against all-reduce at equal tokens, by warm start, per-worker batch, H and N."""
    runs = r["runs"]
    base = runs["base"]
    out = [f"**DiLoCo against all-reduce at equal tokens (P15)** — preset `{r['preset']}`, sequence {r['seq_len']}, "
           f"`{r['backend']}` step graphs, one thread per worker; warm starts from {r['base_steps']} all-reduce steps "
           f"(val {base['val_loss']:.4f}) with `--init-from` ([script]({link}/lm_diloco.py), "
           f"[JSON]({link}/results/{r['_file']}), [plot]({link}/results/lm_diloco.png)). All-reduce over N workers is "
           "one process at the same global batch bit for bit (P6 above), so the all-reduce rows ran as one process "
           f"and their traffic is one fp32 gradient per step. {machine_line(r)}.", "",
           *head("| group | run | tokens | val loss | vs all-reduce, same tokens | MB sent per worker | traffic saved |")]
    for key, v in runs.items():
        if key == "base":
            continue
        group, name = key.split("/")
        gap = f"{v['val_gap_pct']:+.1f} %" if "val_gap_pct" in v else "—"
        saved = f"{v['traffic_reduction']:.0f}×" if "traffic_reduction" in v else "—"
        out.append(row(group, name, f"{v['tokens']:,}", f"{v['val_loss']:.4f}", gap,
                       f"{v['bytes_sent_per_worker'] / 1e6:,.1f}", saved))
    return out + ["", *_diloco_findings(runs)]


def _diloco_findings(runs: dict) -> list[str]:
    """What the table says, computed from it: the per-worker batch, H, warm start, fragments and outer dtypes."""
    def gap(key):
        return runs.get(key, {}).get("val_gap_pct")

    out = []
    g16, g64 = gap("warm/diloco-4-h50"), gap("perworker/diloco-4-h50-b64")
    if g16 is not None and g64 is not None:
        out.append(f"- **Per-worker batch.** N = 4, H = 50, warm: {g16:+.1f} % when the global batch of 16 is split "
                   f"four ways (4 rows per worker), {g64:+.1f} % when every worker keeps 16 rows (all-reduce at 64 "
                   "beside it). A small per-worker batch makes each worker's AdamW steps noisy, and averaging after "
                   "H steps recovers only part of what one all-reduced step gets.")
    hs = {h: gap(f"warm/diloco-4-h{h}") for h in (10, 50, 100)}
    hs2 = {h: gap(f"warm/diloco-2-h{h}") for h in (10, 50, 100)}
    if None not in hs.values() and None not in hs2.values():
        out.append("- **H and N.** Gap at H = 10 / 50 / 100: N = 2 " + " / ".join(f"{hs2[h]:+.1f} %" for h in hs2)
                   + ", N = 4 " + " / ".join(f"{hs[h]:+.1f} %" for h in hs) + ".")
    sc, wm = gap("scratch/diloco-4-h50"), g16
    if sc is not None and wm is not None:
        out.append(f"- **Warm start.** N = 4, H = 50: {sc:+.1f} % from scratch (600 steps), {wm:+.1f} % warm-started "
                   "(200 all-reduce steps, then 400).")
    sh = {(n, h): gap(f"scratch-h/diloco-{n}-h{h}") or gap(f"scratch/diloco-{n}-h{h}") for n in (2, 4) for h in (10, 50, 100)}
    if None not in sh.values():
        out.append("- **From scratch, H and N.** Gap at H = 10 / 50 / 100: N = 2 "
                   + " / ".join(f"{sh[2, h]:+.1f} %" for h in (10, 50, 100)) + ", N = 4 "
                   + " / ".join(f"{sh[4, h]:+.1f} %" for h in (10, 50, 100)) + ".")
    outer = {k.split("/", 1)[1]: v for k, v in runs.items() if k.startswith("outer/") and "val_gap_pct" in v}
    if outer:
        parts = []
        for h in (10, 50):
            tried = {k: v for k, v in outer.items() if f"-h{h}-" in k}
            default = gap(f"warm/diloco-4-h{h}")
            if tried and default is not None:
                best = min(tried, key=lambda k: tried[k]["val_gap_pct"])
                parts.append(f"at H = {h}, {best} {tried[best]['val_gap_pct']:+.1f} % against {default:+.1f} % with the "
                             "paper's outer Nesterov (lr 0.7, momentum 0.9)")
        if parts:
            out.append(f"- **Tuning** (N = 4, warm; {len(outer)} outer-optimizer and inner-lr settings): best "
                       + "; ".join(parts) + ".")
    out += _diloco_scaled(runs, gap) + _diloco_floor(runs, gap) + _diloco_sched(runs, gap)
    longer = sorted((int(k.rsplit("-", 1)[1]), v["val_gap_pct"]) for k, v in runs.items()
                    if k.startswith("long/diloco-4-h50-") and "val_gap_pct" in v)
    if longer and g16 is not None:
        out.append("- **Run length.** N = 4, H = 50, warm, the schedule stretched with the run: "
                   + " / ".join(f"{v:+.1f} % at {n} steps" for n, v in [(400, g16), *longer])
                   + " (each against all-reduce over the same tokens). A longer run gives DiLoCo more outer steps, "
                   "and the gap narrows.")
    return out + _diloco_stream(runs)


def lm_diloco_gpu_section(r: dict, link: str) -> list[str]:
    """P15's run-length question taken further on a lent GPU (eager PyTorch on CUDA: the same recipe, faster)."""
    m, v = r["machine"], r["versions"]
    out = [f"**DiLoCo run length on a lent GPU (P15)** — preset `{r['preset']}`, `{r['backend']}` (fp32, TF32 off), the "
           f"warm start of the table above (its base reached the same val loss, {r['runs']['base']['val_loss']:.4f}), "
           f"N = 4, H = 50 ({m['processor']}, {m['cpu_count']} CPUs; torch {v['torch']}; {r['date'][:10]}; "
           f"[script]({link}/lm_diloco.py), [JSON]({link}/results/{r['_file']})).", "",
           *head("| run | steps | tokens | val loss | vs all-reduce, same tokens | MB sent per worker | wall s |")]
    for k, x in r["runs"].items():
        if k == "base":
            continue
        gap = f"{x['val_gap_pct']:+.1f} %" if "val_gap_pct" in x else "—"
        out.append(row(k.split("/")[1], x["config"]["steps"], f"{x['tokens']:,}", f"{x['val_loss']:.4f}", gap,
                       f"{x['bytes_sent_per_worker'] / 1e6:,.1f}", f"{x['wall_s']:.0f}"))
    return out


def _diloco_sched(runs: dict, gap) -> list[str]:
    """The warm start's schedule: each pair (all-reduce, DiLoCo N = 4 H = 50) with the same peak lr or warmup."""
    pairs = [(t, runs.get(f"sched/allreduce-{t}", {}).get("val_loss"), gap(f"sched/diloco-4-h50-{t}"))
             for t in ("lr5e-4", "lr3e-4", "warmup200")]
    ref, g = runs.get("warm/allreduce", {}).get("val_loss"), gap("warm/diloco-4-h50")
    if ref is None or g is None or any(v is None or x is None for _, v, x in pairs):
        return []
    best = min([("the default (lr 1e-3, 50-step warmup)", ref), *((t, v) for t, v, _ in pairs)], key=lambda kv: kv[1])
    return ["- **The warm start's schedule** (both runs of a pair alike; all-reduce val / DiLoCo's gap): lr 1e-3 with "
            f"a 50-step warmup (the default) {ref:.4f} / {g:+.1f} %; " + "; ".join(
                f"{t} {v:.4f} / {x:+.1f} %" for t, v, x in pairs) + ". A lower peak lr narrows the gap (smaller "
            "steps drift less between syncs), mostly by slowing all-reduce; a longer warmup after the restart does not "
            f"help either. All-reduce's own best of these is {best[0]}, so the goal is judged there."]


def _diloco_floor(runs: dict, gap) -> list[str]:
    """The gap split in two: what averaging every step already costs (no drift), and what H adds."""
    h = {k: gap(f"{g}/diloco-4-h{k}-lr1-m0") for g, k in (("floor", 1), ("outer", 10), ("outer", 50))}
    alone, ref, dl = (runs.get(k, {}).get("val_loss") for k in ("floor/one-worker-b4", "warm/allreduce",
                                                                 "warm/diloco-4-h50"))
    out = []
    if None not in h.values():
        out.append("- **Where the gap comes from.** N = 4, plain averaging (outer lr 1, no momentum) every 1 / 10 / 50 "
                   "steps: " + " / ".join(f"{v:+.1f} %" for v in h.values()) + ". Averaged every step there is no "
                   "drift at all, and still a gap: each worker's AdamW normalises its own 4-row gradient, and the mean "
                   "of four such steps is not one AdamW step on their mean. What H adds on top is the workers drifting "
                   "apart between syncs.")
    if None not in (alone, ref, dl) and alone > ref:
        out.append(f"- **What the four workers buy.** One worker alone on its 4 rows (a quarter of the tokens) reaches "
                   f"{alone:.4f}; DiLoCo's four at H = 50 reach {dl:.4f}, all-reduce {ref:.4f}: DiLoCo recovers "
                   f"{100 * (alone - dl) / (alone - ref):.0f} % of the distance from one worker to all-reduce.")
    return out


def _diloco_scaled(runs: dict, gap) -> list[str]:
    """Two questions the outer sweep answers: is the averaged step too short, and when does the gap open?"""
    out = []
    scaled = {lr: gap(f"outer/diloco-4-h50-lr{lr}-m0") for lr in ("1", "1.5", "2")}
    if None not in scaled.values():
        out.append("- **A longer averaged step.** N = 4, H = 50, plain averaging (no momentum) scaled by an outer lr "
                   "of 1 / 1.5 / 2: " + " / ".join(f"{v:+.1f} %" for v in scaled.values()) + ". If each worker's "
                   "small-batch AdamW steps only moved less along the true gradient, scaling their mean up would "
                   "close the gap; it narrows it a little and then overshoots.")

    def at(key, step):
        return dict(map(tuple, runs.get(key, {}).get("val_curve", []))).get(step)

    ref, key = "warm/allreduce", "outer/diloco-4-h10-lr1-m0"
    steps = [s for s, _ in runs.get(key, {}).get("val_curve", [])]
    if steps and ref in runs:
        first, last = steps[0], steps[-1]
        g = [100 * (at(key, s) - at(ref, s)) / at(ref, s) for s in (first, last) if at(ref, s)]
        if len(g) == 2:
            out.append(f"- **When the gap opens.** Plain averaging every 10 steps (N = 4): {g[0]:+.1f} % at step "
                       f"{first}, {g[1]:+.1f} % at step {last}: the gap builds up over the run (the plot), it is not a "
                       "one-off cost of restarting the optimizer in the first phase.")
    return out


def _diloco_stream(runs: dict) -> list[str]:
    out = []
    base = runs.get("warm/diloco-4-h50", {})
    for key, what in (("stream/diloco-4-h50-f2", "2 fragments (Streaming DiLoCo)"),
                      ("stream/diloco-4-h50-bf16", "bf16 outer gradients"),
                      ("stream/diloco-4-h50-int8", "int8 outer gradients")):
        v = runs.get(key)
        if v and base:
            out.append(f"- **{what}**: val {v['val_loss']:.4f} against {base['val_loss']:.4f} (fp32, whole model), "
                       f"{v['bytes_sent_per_worker'] / 1e6:,.1f} MB against {base['bytes_sent_per_worker'] / 1e6:,.1f} MB "
                       "per worker.")
    return [x for x in out if x]


def lm_ft_section(r: dict, link: str) -> list[str]:
    """P15: a worker SIGKILLed mid-run under --fault-tolerance torchft, against the same run without the fault."""
    out = [f"**Training through a lost worker on torchft (P15)** — the CLI as a user runs it: {r['workers']} workers, "
           f"preset `{r['preset']}`, global batch {r['global_batch']} × {r['seq_len']}, {r['steps']} steps, DiLoCo "
           f"H = {r['inner_steps']}; worker 1 SIGKILLed at step {r['kill_at']} (its pid from workers.json) "
           f"([script]({link}/lm_ft.py), [JSON]({link}/results/{r['_file']})). {machine_line(r)}.", "",
           *head("| run | exit | val loss | vs fault-free | steps without the worker | survivors stalled | "
                 "replacement rejoined after | wall s |")]
    for name, v in r["runs"].items():
        gap = f"{v['val_gap_pct_vs_fault_free']:+.2f} %" if "val_gap_pct_vs_fault_free" in v else "—"
        stall = f"{v['survivor_stall_s']:.1f} s (a step: {v['typical_step_gap_s']:.2f} s)" if v.get(
            "survivor_stall_s") is not None else "—"
        rejoin = f"{v['rejoin_s']:.0f} s" if v.get("rejoin_s") is not None else "—"
        val = f"{v['val_loss']:.4f}" if v.get("val_loss") is not None else "—"
        out.append(row(name, v["exit_code"], val, gap, v.get("steps_without_worker", 0), stall, rejoin,
                       f"{v['wall_s']:.0f}"))
    return out
