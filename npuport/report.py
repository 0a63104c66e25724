"""Markdown renderings of report.json (port) — every figure comes from the JSON, nothing is typed by hand."""

from __future__ import annotations


def _f(x, fmt="{:.2e}") -> str:
    if x is None:
        return "—"
    if isinstance(x, float) and x != x:
        return "NaN"
    return fmt.format(x)


def port_markdown(r: dict) -> str:
    src = r["source"]
    name = src.get("preset") or src.get("path")
    lines = [
        f"# npuport port report — {name}",
        "",
        f"- model: `{src['model_type']}`, {src['parameters'] / 1e6:.1f}M parameters"
        + (f", random init (seed {src['seed']})" if src.get("random_init") else ""),
        f"- source sha256: `{src['sha256']}`",
        f"- shapes (batch × seq): {r['shapes']['batch_sizes']} × {r['shapes']['buckets']}; precision {r['precision']}",
        f"- wall time {r['wall_seconds']} s, peak RSS {r['peak_rss_mb']:.0f} MB, disk {r['disk_mb']:.0f} MB",
        f"- machine: {r['machine']['processor']}, {r['machine']['cpu_count']} CPUs; npuport {r['npuport_version']}",
        f"- overall: **{'PASS' if r['pass'] else 'FAIL'}**",
        "",
        "## Adapter",
        "",
        *[f"- {a}" for a in r["adapter"]["actions"]],
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
    lines += [
        "",
        "## Backends (parity vs eager fp32, latency at the largest shape)",
        "",
        "| backend | precision | max abs Δlogit | max abs Δprob | decision agreement | p50 ms | p99 ms | compile s | disk MB | result |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for b, per in r["backends"].items():
        for prec, v in per.items():
            lines.append(
                f"| {b} | {prec}{' (ran ' + v['execution_precision'] + ')' if v.get('execution_precision') else ''} | "
                f"{_f(v['max_abs_logit_diff'])} | {_f(v['max_abs_prob_diff'])} | {v['decision_agreement']:.2%} | "
                f"{v['p50_ms']:.1f} | {v['p99_ms']:.1f} | {v['compile_seconds']} | {v['disk_mb']} | "
                f"{'PASS' if v['pass'] else 'FAIL'} |"
            )
    lines.append("")
    return "\n".join(lines)
