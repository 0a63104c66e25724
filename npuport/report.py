"""Markdown renderings of report.json (port) — every figure comes from the JSON, nothing is typed by hand."""

from __future__ import annotations

from .runtimes import REFERENCE


def _f(x, fmt="{:.2e}") -> str:
    if x is None:
        return "—"
    if isinstance(x, float) and x != x:
        return "NaN"
    return fmt.format(x)


def _psnr(v: dict) -> str:
    """PSNR of the logits: ∞ where they were identical (no PSNR is stored then), — where none was measured."""
    if v.get("psnr_db") is None:
        return "∞" if v.get("max_abs_logit_diff") == 0 else "—"
    return f"{v['psnr_db']:.1f}"


def _head_line(h: dict | None, src: dict) -> list[str]:
    if not h:
        return []
    new = " (new and random: --new-head)" if src.get("new_head") else ""
    return [f"- head: `{h.get('head', 'npuport:mean-linear')}`{new}, {h.get('problem_type', 'single_label_classification')}, "
            f"labels {', '.join(h.get('labels', []))}"]


def _plan_line(plan: dict | None) -> list[str]:
    if not plan:
        return []
    return [f"- buckets planned from data (`--buckets auto`, at most {plan['max_buckets']}; {plan['source']}, "
            f"{plan['rows']} rows): {plan['padded_tokens']:,} padded tokens vs {plan['pad_to_max_tokens']:,} padded to "
            f"{plan['buckets'][-1]} ({plan['saving_vs_pad_to_max']:.1%} fewer); rows per bucket {plan['rows_per_bucket']}"]


def port_markdown(r: dict) -> str:
    lines = [*_header_lines(r), *_capture_lines(r), *_backend_lines(r), *_quant_lines(r), *_int16_lines(r),
             *_auto_keep_lines(r), *_sensitivity_lines(r), *_npu_lines(r), ""]
    return "\n".join(lines)


def _header_lines(r: dict) -> list[str]:
    src = r["source"]
    name = src.get("preset") or src.get("path") or src.get("class")
    return [
        f"# npuport port report — {name}",
        "",
        f"- model: `{src['model_type']}`, {src['parameters'] / 1e6:.1f}M parameters"
        + (f", random init (seed {src['seed']})" if src.get("random_init") else ""),
        f"- source sha256: `{src['sha256']}`",
        *_head_line(r.get("head"), src),
        f"- shapes (batch × seq): {r['shapes']['batch_sizes']} × {r['shapes']['buckets']}; precision {r['precision']}",
        *_plan_line(r.get("bucket_plan")),
        f"- wall time {r['wall_seconds']} s, peak RSS {r['peak_rss_mb']:.0f} MB, disk {r['disk_mb']:.0f} MB",
        f"- machine: {r['machine']['processor']}, {r['machine']['cpu_count']} CPUs; npuport {r['npuport_version']}",
        f"- overall: **{'PASS' if r['pass'] else 'FAIL'}**",
        "",
        "## Adapter",
        "",
        *[f"- {a}" for a in r["adapter"]["actions"]],
    ]


def _capture_lines(r: dict) -> list[str]:
    lines = [
        "",
        "## Capture proof (eager HF model vs captured graph, max |Δlogit|)",
        "",
        "| method | max abs diff | exact | inputs | per shape |",
        "|---|---|---|---|---|",
    ]
    for m, p in r["capture"].items():
        if "error" in p:
            lines.append(f"| {m} | error: {p['error']} | — | — | — |")
            continue
        per = ", ".join(f"{k}: {_f(v)}" for k, v in p["per_shape"].items())
        lines.append(f"| {m} | {_f(p['max_abs_diff'])} | {'yes' if p['exact'] else 'no'} | {p['inputs']} | {per} |")
    return lines


def _backend_lines(r: dict) -> list[str]:
    lines = [
        "",
        "## Backends (parity vs eager fp32, latency at the largest shape)",
        "",
        "| backend | precision | max abs Δlogit | max abs Δprob | decision agreement | PSNR dB (logits) | top-1 agreement "
        "| p50 ms | p99 ms | compile s | load s | disk MB | result |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    refused = []
    for b, per in r["backends"].items():
        for prec, v in per.items():
            if v.get("refused"):
                lines.append(f"| {b} | {prec} | {_f(v['max_abs_logit_diff'])} | — | {v['decision_agreement']:.2%} | — | — "
                             f"| — | — | — | — | — | REFUSED (no artifact written) |")
                refused.append((b, prec, v))
                continue
            lines.append(
                f"| {b} | {prec}{' (ran ' + v['execution_precision'] + ')' if v.get('execution_precision') else ''} | "
                f"{_f(v['max_abs_logit_diff'])} | {_f(v['max_abs_prob_diff'])} | {v['decision_agreement']:.2%} | "
                f"{_psnr(v)} | {_f(v.get('top1_agreement'), '{:.2%}')} | {v['p50_ms']:.1f} | {v['p99_ms']:.1f} | "
                f"{v['compile_seconds']} | {_f(v.get('load_seconds'), '{:g}')} | {v['disk_mb']} | "
                f"{'PASS' if v['pass'] else 'FAIL'} |"
            )
    for b, prec, v in refused:
        lines += ["", f"**{b} {prec} refused**: {v['reason']}"]
    for b, per in r["backends"].items():
        for prec, v in per.items():
            if v.get("decisions_unchecked"):
                lines += ["", f"**{b} {prec}**: {v['decisions_unchecked']}."]
    return lines


def _quant_lines(r: dict) -> list[str]:
    """How each artifact was quantised, and what it left in float (auto's rounds: _auto_keep_lines)."""
    lines = []
    for b, prec, v, how in _quant_entries(r, "quantization"):
        if not v.get("refused"):
            lines += ["", f"**{b} {prec}** quantised: {how}."]
    for b, prec, v, kept in _quant_entries(r, "kept_fp32"):
        if not v.get("refused") and not v["quant"].get("auto_keep"):
            by_default = v["quant"].get("kept_by_default") or []
            lines += ["", f"**{b} {prec}** left in float: {', '.join(kept)}" + (
                f" ({', '.join(by_default)} by default; `--keep-fp32 none` quantises every group)" if by_default else "") + "."]
    for b, prec, v, groups in _quant_entries(r, "per_token"):
        if not v.get("refused") and groups:
            by_default = v["quant"].get("per_token_by_default") or []
            lines += ["", f"**{b} {prec}** quantised per token at run time: {', '.join(groups)}" + (
                " (the default; `--per-token none` calibrates them per tensor)" if by_default else "") + "."]
    return lines


def _quant_entries(r: dict, key: str):
    """(runtime, precision, entry, value) for every report entry that records `key`: at its top level (a refused
    artifact) or among its quantisation facts (a written one)."""
    for b, per in r["backends"].items():
        for prec, v in per.items():
            value = v.get(key) or (v.get("quant") or {}).get(key)
            if value:
                yield b, prec, v, value


def _int16_lines(r: dict) -> list[str]:
    """An integer NPU's groups at 16-bit activations, when no --keep-fp32 auto rounds list them."""
    out = []
    for b, prec, v, raised in _quant_entries(r, "int16"):
        if not v.get("refused") and not v["quant"].get("auto_keep") and raised != ["all"]:
            by_default = v["quant"].get("int16_by_default") or []
            tables = v["quant"].get("int8_table_tensors") or []
            out += ["", f"**{b} {prec}** 16-bit activations (weights 8-bit) in: {', '.join(raised)}" + (
                f" (the {b} default recipe; `--int16 none` keeps every group at 8 bits)" if by_default else "") + "." + (
                f" The tensors that carry the vocabulary table's type stay 8-bit ({', '.join(tables)}: at 16 bits the "
                "table would double)." if tables else "")]
    return out


def _auto_keep_lines(r: dict) -> list[str]:
    """The rounds of `--keep-fp32 auto`: what was kept in float and what the decisions were each time."""
    out = []
    for b, prec, v, rounds in _quant_entries(r, "auto_keep"):
        if "int16" in rounds[0]:  # an integer NPU: groups were raised to 16-bit, with their cost on the target
            out += _raised_rounds(b, prec, v, rounds)
            continue
        final = "refused" if v.get("refused") else f"written: {v['decision_agreement']:.2%} keeping " + (
            ", ".join(v["quant"]["kept_fp32"]) or "nothing") + " in fp32"
        out += ["", f"## {b} ({prec}): --keep-fp32 auto — {len(rounds)} round(s) below the bar, then {final}", "",
                "| kept in fp32 | decision agreement | max abs Δlogit |", "|---|---|---|"]
        out += [f"| {', '.join(t['kept_fp32']) or '—'} | {t['decision_agreement']:.2%} | {_f(t['max_abs_logit_diff'])} |"
                for t in rounds]
    return out


def _raised_rounds(b: str, prec: str, v: dict, rounds: list[dict]) -> list[str]:
    quant = v.get("quant") or {}
    final = "refused" if v.get("refused") else f"written: {v['decision_agreement']:.2%} with 16-bit activations in " + (
        ", ".join(quant.get("int16") or []) or "nothing")
    rows = [*rounds] + ([] if v.get("refused") else [{**quant, "decision_agreement": v["decision_agreement"],
                                                      "max_abs_logit_diff": v["max_abs_logit_diff"]}])
    out = ["", f"## {b} ({prec}): --keep-fp32 auto — {len(rounds)} round(s) below the bar, then {final}", "",
           "| 16-bit activations in | decision agreement | max abs Δlogit | context MB | host ops |", "|---|---|---|---|---|"]
    for t in rows:
        cost = t.get("cost") or {}
        out.append(f"| {', '.join(t.get('int16') or []) or '—'} | {t['decision_agreement']:.2%} | "
                   f"{_f(t['max_abs_logit_diff'])} | {cost.get('context_mb', '—')} | "
                   f"{', '.join(cost.get('host_ops') or []) or 'none'} |")
    return out


def _sensitivity_lines(r: dict) -> list[str]:
    """Per quantisation group, what quantising it alone costs (`port --sensitivity`)."""
    out = []
    for b, prec, _, sens in _quant_entries(r, "sensitivity"):
        alone = ("alone at 8-bit, the rest at 16-bit, on the " + next(iter(sens.values()))["judged_on"]
                 if "judged_on" in next(iter(sens.values()), {}) else "quantised alone, the rest in float")
        out += ["", f"## {b} ({prec}): sensitivity — each group {alone}", "",
                "| group | max abs Δlogit | decision agreement |", "|---|---|---|"]
        out += [f"| {g} | {_f(x['max_abs_logit_diff'])} | {x['decision_agreement']:.2%} |"
                for g, x in sorted(sens.items(), key=lambda kv: -kv[1]["max_abs_logit_diff"])]
    return out


def _npu_lines(r: dict) -> list[str]:
    """Placement per NPU backend; for Ethos-U, Vela's estimates per shape and its costliest ops."""
    out = []
    for b, per in r["backends"].items():
        for prec, v in per.items():
            npu = v.get("npu")
            if not npu:
                continue
            out += ["", f"## {b} ({prec}): on the NPU, on the host", "",
                    f"- executes here: {v['executes']} ({npu.get('executes_on', '—')}); whole graph on the NPU: "
                    f"{'yes' if npu.get('whole_graph_on_npu') else 'no'}"]
            if npu.get("calibration"):
                out.append(f"- quantisation: {npu.get('quantization', '—')}; calibration: {npu['calibration']}")
            if "per_shape" not in npu:
                out += [f"- host ops at {s}: {', '.join(h) or 'none'}" for s, h in npu.get("host_ops", {}).items()]
                continue
            out += ["", "| shape | partitions | Vela cycles | estimated ms | clock MHz | SRAM KiB | flash KiB | "
                    "fake-quant vs reference | float vs reference | host ops |", "|---|---|---|---|---|---|---|---|---|---|"]
            for s, x in npu["per_shape"].items():
                vela = x["vela"]
                host = ", ".join(f"{k.split('.')[1]}×{n}" for k, n in x["host_ops"].items()
                                 if "quantize" not in k and "dim_order" not in k) or "q/dq only"
                out.append(f"| {s} | {x['partitions']} | {x['cycles']:,} | {x['estimated_ms']:.3f} | {vela[0]['clock_mhz']:g} | "
                           f"{max(p['sram_kib'] for p in vela):.1f} | {sum(p['off_chip_flash_kib'] for p in vela):.1f} | "
                           f"{_f(x['proof']['fake_quant_vs_reference_max_abs'])} | {_f(x['proof']['float_vs_reference_max_abs'])} | {host} |")
            last = list(npu["per_shape"].values())[-1]
            top = max(last["vela"], key=lambda p: p["cycles"])
            out += ["", f"Costliest ops (Vela, largest shape, biggest partition, {top['npu_ops']} NPU ops):", "",
                    "| op | target | cycles | share |", "|---|---|---|---|"]
            out += [f"| {o['op']} | {o['target']} | {o['cycles']:,} | {o['share']:.1%} |" for o in top["top_ops"]]
    return out


def _held_out_lines(r: dict) -> list[str]:
    h = r.get("detector_held_out_family")
    if not h:
        return []
    return [f"Held-out template family (the test personas, phrasings no training row used): F1 {h['f1']:.4f}, precision "
            f"{h['precision']:.4f}, recall {h['recall']:.4f}, ROC-AUC {h['roc_auc']:.4f} ({h['n']} rows).", ""]


def demo_markdown(r: dict) -> str:
    d = r["detector"]
    cm = d["confusion_matrix"]
    lines = [
        "# npuport demo report",
        "",
        f"- npuport {r['npuport_version']} on {r['machine']['processor']} ({r['machine']['cpu_count']} CPUs); "
        f"wall time {r['wall_seconds']} s"
        + (f", peak RSS {r['peak_rss_mb']:.0f} MB, disk {r['disk_mb']:.0f} MB" if "peak_rss_mb" in r else "")
        + (" (" + ", ".join(f"{k} {v:.0f} s" for k, v in r["stage_seconds"].items()) + ")" if r.get("stage_seconds")
           else "")
        + f"; overall **{'PASS' if r['pass'] else 'FAIL'}**",
        "- demo data: " + ", ".join(f"{k} {v['rows']} rows / {v['personas']} personas ({v['deviation_fraction']:.0%} deviations)"
                                     for k, v in r["data"]["splits"].items()),
        "",
        "## Detector on the test split (personas never seen in training)",
        "",
        "| F1 | accuracy | precision | recall | ROC-AUC | ECE | threshold | TN / FP / FN / TP |",
        "|---|---|---|---|---|---|---|---|",
        f"| {d['f1']:.4f} | {d['accuracy']:.4f} | {d['precision']:.4f} | {d['recall']:.4f} | {d['roc_auc']:.4f} | "
        f"{d['ece']:.4f} | {d['threshold']:.3f} | {cm['tn']} / {cm['fp']} / {cm['fn']} / {cm['tp']} |",
        "",
        *_held_out_lines(r),
        "![ROC](plots/roc.png) ![reliability](plots/reliability.png)",
        "",
        "## Proof and parity (compiled vs eager fp32)",
        "",
        "| capture | max abs Δlogit |",
        "|---|---|",
        *[f"| {m} | {_f(p.get('max_abs_diff'))} |" for m, p in r["port"]["capture"].items()],
        "",
        "| backend | max abs Δlogit | max abs Δprob | decision agreement (test split + probes) | result |",
        "|---|---|---|---|---|",
    ]
    for b, per in r["port"]["backends"].items():
        v = per["fp32"]
        lines.append(f"| {b} | {_f(v['max_abs_logit_diff'])} | {_f(v['max_abs_prob_diff'])} | {v['decision_agreement']:.2%} | "
                     f"{'PASS' if v['pass'] else 'FAIL'} |")
    pb = r["bench"]["per_bucket"]
    seqs = sorted(pb, key=int)
    names = list(pb[seqs[0]])
    pairing = r["bench"].get("pairing")
    how = f"interleaved runs, {pairing}" if pairing else "interleaved runs"
    lines += ["", f"## Latency, batch 1, p50 ms (p99) — {r['bench']['runs']} {how}", "",
              "| path | " + " | ".join(f"{s} tokens" for s in seqs) + " | vs eager at " + seqs[-1] + " |",
              "|---|" + "---|" * (len(seqs) + 1)]
    for n in names:
        ratio = pb[seqs[-1]][REFERENCE]["p50_ms"] / pb[seqs[-1]][n]["p50_ms"]
        lines.append(f"| {n} | " + " | ".join(f"{pb[s][n]['p50_ms']:.2f} ({pb[s][n]['p99_ms']:.2f})" for s in seqs)
                     + f" | {ratio:.2f}× |")
    lines += ["", "![latency vs length](plots/latency_vs_length.png)", "",
              f"## Length buckets vs padding to {seqs[-1]} ({r['bench']['length_mix_rows']} test rows, "
              f"mean {r['bench']['length_mix_mean_tokens']:.0f} tokens)", "",
              "| backend | bucketed rows/s | padded rows/s | speed-up | decision agreement |", "|---|---|---|---|---|"]
    for b, v in r["bench"]["length_mix"].items():
        lines.append(f"| {b} | {v['buckets']['rows_per_s']:.1f} | {v['pad_to_max']['rows_per_s']:.1f} | {v['speedup']:.2f}× | "
                     f"{v['decision_agreement']:.2%} |")
    lines.append("")
    return "\n".join(lines)
