"""RESULTS.md sections for the integer-NPU localisation (P13), kept apart from render_sections.py (which is long)."""

from __future__ import annotations

from render_sections import head, load, machine_line, row


def _holds(p: dict) -> str:
    ops = p["ops"]
    what = [w for w, op in (("LayerNorm (rsqrt)", "rsqrt"), ("softmax (exp, reciprocal)", "exp"), ("GELU", "gelu"))
            if op in ops]
    where = ", ".join(m for m in p["modules"] if m) or "—"
    return f"{where}: {', '.join(what) or 'matmuls'}"


def _cells(p: dict | None) -> list[str]:
    if not p:
        return ["—", "—", "—"]
    return [f"{p['median_row_max_steps']:.0f}", f"{p['decision_agreement_alone']:.0%}",
            f"{p['logit_shift_vs_fake_quant']:.2f}"]


def ethosu_localise_section(r: dict, link: str) -> list[str]:
    """Per partition of the int16 U55 program: each alone on the TOSA reference model, with LayerNorm plain and in
    npuport's scaled integer form (two JSONs of ethosu_localise.py)."""
    scaled = load(f"ethosu_localise_{r['precision']}_scaled") or {}
    runs = [("plain LayerNorm", r), ("scaled LayerNorm (npuport's form)", scaled)]
    whole = "; ".join(f"{name}: fake-quantised graph {x['fake_quant']['decision_agreement']:.1%}, every partition on "
                      f"the reference model {x['reference_all']['decision_agreement']:.1%} (max abs Δlogit "
                      f"{x['reference_all']['max_abs_logit_diff']:.2f})" for name, x in runs if x)
    alone = r["alone_rows"]["rows"]
    out = [f"**Where the Ethos-U {r['precision']} lowering loses decisions, partition by partition (P13)** — the demo "
           f"detector (init {r.get('demo_init')}), {r['device']} at {r['shape'][0]} × {r['shape'][1]}, "
           f"{r['eval_rows']} rows (30 test + 30 test_family, as `npu_mixed.py`). Each of the program's "
           f"{len(r['partitions'])} partitions runs alone on the TOSA reference model, every other one as the "
           "fake-quantised graph it was lowered from; *error* = the median over rows of the largest difference in "
           f"its output (int16 steps), on the same inputs; *decisions* and *Δlogit* = that partition's error "
           f"carried through the rest of the graph, on the {alone} rows the whole reference run shifts most "
           f"([script]({link}/ethosu_localise.py), [JSON]({link}/results/{r['_file']}), [JSON, scaled]"
           f"({link}/results/ethosu_localise_{r['precision']}_scaled.json)). {machine_line(r)}.", "",
           f"Whole program — {whole}.", "",
           *head("| partition | holds | plain: error (steps) | plain: decisions alone | plain: Δlogit vs fake-quant "
                 "| scaled: error (steps) | scaled: decisions alone | scaled: Δlogit vs fake-quant |")]
    other = {p["index"]: p for p in scaled.get("partitions", [])} if len(scaled.get("partitions", [])) == len(
        r["partitions"]) else {}
    attention = [p for p in r["partitions"] if "rsqrt" not in p["ops"]]
    for p in r["partitions"]:
        if "rsqrt" in p["ops"]:
            out.append(row(p["index"], _holds(p), *_cells(p), *_cells(other.get(p["index"]))))
    if attention:
        def agg(ps):
            if not ps:
                return ["—", "—", "—"]
            return [f"≤ {max(p['median_row_max_steps'] for p in ps):.0f}",
                    ("" if min(p["decision_agreement_alone"] for p in ps) == 1 else "≥ ")
                    + f"{min(p['decision_agreement_alone'] for p in ps):.0%}",
                    f"≤ {max(p['logit_shift_vs_fake_quant'] for p in ps):.2f}"]
        ids = [p["index"] for p in attention]
        out.append(row(f"{len(ids)} others ({ids[0]}, {ids[1]}, …)", "each layer's attention scores: softmax "
                       "(exp, reciprocal)", *agg(attention), *agg([other[i] for i in ids if i in other])))
    return out


def ethosu_compile_time_section(r: dict, link: str) -> list[str]:
    """What each Ethos-U compile-time change buys, at two layer counts (P13 #3)."""
    out = [f"**Ethos-U compile time: what each change buys (P13)** — ModernBERT detectors of the tiny-modernbert "
           f"width (random init) at 1 × {r['seq_len']} for {r['target']}, `npuport port` with each change switched "
           f"off by the benchmark (npuport has no switch): the shared node provenance, RoPE in token layout, q/k/v "
           "projected separately (`npuport` rows), and the histogram range search (`torchao-search` is `npuport` "
           "with torchao's own). "
           "Permute propagation = ExecuTorch's Arm passes that move permutes, retracing the whole graph between "
           f"dependent moves ([script]({link}/ethosu_compile_time.py), [JSON]({link}/results/{r['_file']})). "
           f"{machine_line(r)}.", "",
           *head("| layers | variant | compile s | of it: quantisation s | of it: lowering s | permute propagation: retraces, s | "
                 "Vela cycles | fake-quant vs reference | measured |")]
    for v in r["runs"].values():
        low = v["compile_s"]["lower"] if v.get("compile_s") else "—"
        quant = v["compile_s"]["quantize"] if v.get("compile_s") else "—"
        out.append(row(v["layers"], v["variant"], f"{v['compile_seconds']:.0f}", quant, low,
                       f"{v['propagation_retraces']}, {v['propagation_s']:.0f}", f"{v['cycles']:,}",
                       f"{v['fake_quant_vs_reference_max_abs']:.1e}", (v.get("date") or r["date"])[:16].replace("T", " ")))
    return out


def demo_build(t: dict) -> str:
    """The demo detector a run ported: its data version and seed, or (runs before v8 recorded it) its date."""
    d = t.get("demo")
    return f"v{d['demo_version']}, seed {d['seed']}" if d else f"not recorded (before v8; {t['date'][:10]})"


def npu_verify_section(r: dict, link: str) -> list[str]:
    """P13 done-when #1: each integer NPU's default recipe ported as a user does, then `npuport verify` on every row
    of the two unseen splits (npu_verify.json: one entry per target, each run on its own)."""
    out = [f"**Integer NPU defaults on unseen rows (P13)** — the demo detector ({r['demo_init']} init) through "
           "`npuport port DEMO_MODEL --backend B --buckets 64,128 --calibration-data val.jsonl --eval-data GATE` (each "
           "target's default recipe: calibrated on the whole validation split, gated on 60 of its rows), then "
           "`npuport verify OUT --eval-data` on test.jsonl and test_family.jsonl (all 660 rows of each, or a seeded "
           "sample where the row count says so: the reference model takes seconds per row), rows never used for "
           "calibration or gating. qnn executes in Qualcomm's x86 HTP simulator, ethos-u in the TOSA reference model "
           f"([script]({link}/npu_verify.py), [JSON]({link}/results/{r['_file']})).", "",
           *head("| target | demo build | recipe | executes | gate (val) | test | test_family | max abs Δlogit | "
                 "PSNR dB (logits, lower split) | s per row (test / test_family; beside other jobs) | machine |")]
    for name, t in r["targets"].items():
        if "splits" not in t:
            out.append(row(name, demo_build(t), "—", "—", "—", "—", "—", "—", "—", "—",
                           f"port exit {t.get('port_rc')}: {(t.get('failed') or '')[-200:]}"))
            continue
        s = t["splits"]
        cells = [f"{s[k]['decision_agreement']:.2%} of {s[k]['rows']}" if "decision_agreement" in s.get(k, {}) else
                 f"failed (exit {s[k].get('rc')})" if k in s else "not run" for k in ("test", "test_family")]
        done = [v for v in s.values() if "decision_agreement" in v]
        raised = t.get("int16") or []
        every = "every group" + (" but the vocabulary table's tensors" if t.get("int16_every_group") else "")
        recipe = f"{t.get('device') or ''} {t['precision']}, 16-bit activations in " + (
            every if raised == ["all"] or t.get("int16_every_group") else ", ".join(raised) or "none")
        psnr = min((v["psnr_db"] for v in done if v.get("psnr_db") is not None), default=None)
        out.append(row(name, demo_build(t), recipe, t.get("executes") or "—", f"{t['gate']:.1%}" if t.get("gate") is not None
                       else "—", *cells, f"{max(v['max_abs_logit_diff'] for v in done):.2f}" if done else "—",
                       f"{psnr:.1f}" if psnr is not None else "—",
                       " / ".join(f"{v['s_per_row']:.2f}" for v in done) or "—", machine_line(t)))
    notes = [f"{name}: {t['note']}" for name, t in r["targets"].items() if t.get("note")]
    return out + (["", "Notes — " + "; ".join(notes) + "."] if notes else [])


def qnn_weights_section(r: dict, link: str) -> list[str]:
    """P13: the MatMul weights' and the embeddings' shares of the HTP's int8 error, isolated in float
    (qnn_weights.json)."""
    out = [f"**Where the HTP's int8 error came from: MatMul weights, then the embeddings (P13)** — the demo detector "
           f"({r['demo_init']} init) as its ONNX graph at 1 × {r['bucket']}, run in float by ONNX Runtime on the CPU with "
           f"only its {r['matmul_weights']} MatMul weights replaced by their 8-bit values: *per tensor* (asymmetric, one "
           "scale per matrix: what ONNX Runtime's QNN config made of them) or *per channel* (symmetric int8, one scale "
           "per output column: qnn's recipe now). Activations stay float, so every flipped decision is the weights' "
           "alone. The last rows add what of the embeddings an int8 recipe leaves at 8 bits: the tables Gather reads "
           f"({', '.join(r.get('embedding_tables', []))}; per tensor), then the embedding activations (per tensor, MinMax "
           "over the validation split; the LayerNorm's input and output excepted, 16-bit in every recipe here), all of "
           "them or only those carrying the vocabulary table's type "
           f"({', '.join(r.get('table_carriers', []))}: what qnn's int8 default keeps at 8 bits). Every row of both "
           "unseen splits, against eager fp32; flipped rows by their 0-based index in the split file. No NPU executes "
           f"here ([script]({link}/qnn_weights.py), [JSON]({link}/results/{r['_file']})). {machine_line(r)}.", "",
           *head("| 8-bit values | test: decisions kept | flipped | max abs Δlogit | test_family: decisions kept | "
                 "flipped | max abs Δlogit |")]
    names = {"float": "none (the float graph itself)", "per-tensor": "MatMul weights per tensor",
             "per-channel": "MatMul weights per output channel",
             "per-channel + embedding tables": "… and the embedding tables",
             "per-channel + embeddings (tables and activations)": "… and every embedding activation",
             "per-channel + embedding tables and their carriers (qnn's recipe)":
                 "… the tables and only their carriers (qnn's int8 default)"}
    for name, label in names.items():
        if name not in r["splits"]["test"]["variants"]:
            continue
        cells = []
        for split in ("test", "test_family"):
            v = r["splits"][split]["variants"][name]
            lines = v["flipped_lines"]
            flips = f"{v['flipped']}" + (f" (ind{'ices' if len(lines) > 1 else 'ex'} {', '.join(map(str, lines))})"
                                         if 0 < len(lines) <= 3 else "")  # 0-based, as npu_verify's changed_lines
            cells += [f"{v['decision_agreement']:.2%} of {v['rows']}", flips, f"{v['max_abs_logit_diff']:.2g}"]
        out.append(row(label, *cells))
    return out


def ethosu_maskfill_section(r: dict, link: str) -> list[str]:
    """P13: the -inf substitute before Ethos-U quantisation, ExecuTorch's against npuport's (ethosu_maskfill.json)."""
    runs = r["runs"]
    first = next(iter(runs.values()))
    out = [f"**Ethos-U: what the masked keys' -inf becomes (P13)** — an attention mask puts -inf on padded keys' scores; "
           "ExecuTorch's Arm pipeline replaces it by a finite value before quantisation, and the observers of the masked "
           "scores and of softmax's `x - max` span it, which sets their step and the span of the exp table the lowering "
           "builds. The demo detector on "
           f"{first['device']}, quantised as `npuport port` does (calibrated on {first['calibration_rows']} validation "
           "rows), as fake-quantised PyTorch and as every partition on the TOSA reference model, against the float "
           "detector; *lowering* = the reference model against the fake-quantised graph. Rows: the ones a verify run "
           "flipped (`--pick`, lines of the split files) or a sample of test + test_family "
           f"([script]({link}/ethosu_maskfill.py), [JSON]({link}/results/{r['_file']})). {machine_line(r)}.", "",
           *head("| recipe, shape, rows | -inf becomes | softmax input's lowest value (range over layers) | fake-quant: decisions "
                 "| reference: decisions | changed rows | max abs Δlogit | lowering: max abs Δlogit |")]
    for key, e in runs.items():
        what = f"{e['precision']} at {e['shape'][0]} × {e['shape'][1]}, " + (
            f"{e['eval_rows']} picked rows ({e['pick']})" if e.get("pick") else f"{e['eval_rows']} rows")
        for v in e["values"]:
            fq, ref, low = v["fake_quant"], v["reference"], v["reference_vs_fake_quant"]
            span = v.get("softmax_input_min")
            out.append(row(what, f"{v['masked_score']:g}" + (" (ExecuTorch's)" if v["masked_score"] == -256 else ""),
                           f"{span[0]:.0f} to {span[1]:.0f}" if span else "—",
                           f"{fq['decision_agreement']:.0%}", f"{ref['decision_agreement']:.0%}",
                           ", ".join(map(str, ref["changed_rows"])) or "none",
                           f"{ref['max_abs_logit_diff']:.2f}", f"{low['max_abs_logit_diff']:.2f}"))
    return out
