"""P13: where, partition by partition, does the Ethos-U lowering lose the decisions the fake-quantised graph keeps?

`ethosu_fakequant.py` showed that at int16 (a16w8 everywhere) the PT2E graph npuport handed to ExecuTorch's Arm backend
kept every decision as fake-quantised PyTorch, and the TOSA reference model running the compiled partitions did not.
`--layernorm plain` reproduces that graph; `scaled` (the default) is what npuport quantises at int16 since this
localisation found the LayerNorms' rsqrt tables (npuport/runtimes/ethosu_quant.py, ScaledLayerNorm).
This script lowers that same graph (same quantizer, calibration rows and eval rows as `npu_mixed.py`) and runs it with
each partition in turn on the TOSA reference model and every other partition as the fake-quantised graph it was
lowered from (ExecuTorch keeps it as the delegate's `original_module`). Per partition:
- its own error, isolated: the reference model and the fake-quantised partition on the same inputs, in output steps;
- what that error alone does to the decisions and the logits, carried through the rest of the fake-quantised graph;
- what the partition holds (its ops, and the modules they came from).

What executes: the TOSA reference model (the exact .tosa handed to Vela) for one partition at a time, PyTorch on this
CPU for the rest. No Vela figures are reported here (`npu_mixed.py` has them).

    python benchmarks/ethosu_localise.py [--model-dir DEMO_BUILD] [--precision int16] [--layernorm plain] [--rows 60]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter
from pathlib import Path

import ethosu_setup
from common import meta, write_result


def _describe(lowered) -> dict:
    """A partition's compute ops (quantise / dequantise / views left out) and the modules they came from."""
    ops, modules = Counter(), Counter()
    skip = ("quantize_per", "dequantize_per", "view", "permute", "clone", "expand", "squeeze", "_to_copy",
            "_to_dim_order", "slice", "unsqueeze", "select", "getitem")
    for n in lowered.original_module.graph.nodes:
        if n.op != "call_function":
            continue
        name = str(getattr(n.target, "_op", n.target)).removeprefix("aten.").split(".")[0]
        if any(s in name for s in skip):
            continue
        ops[name] += 1
        stack = n.meta.get("nn_module_stack") or {}
        if stack:
            path = list(stack.values())[-1][0]
            # "encoder.layer.3.attention.self.query" -> "layer.3.attention" (where it is, not every Linear)
            parts = path.replace("L['self'].", "").split(".")
            if "layer" in parts:
                i = parts.index("layer")
                path = ".".join(parts[i:i + 3])
            modules[path] += 1
    return {"ops": dict(ops.most_common()), "modules": [m for m, _ in modules.most_common(3)]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ethosu_setup.add_arguments(ap)
    ap.add_argument("--precision", default="int16", choices=("int8", "int16"))
    ap.add_argument("--layernorm", default="scaled", choices=("scaled", "plain"),
                    help="scaled: npuport's integer form (ethosu_quant.integer_form); plain: LayerNorm as the model has it")
    ap.add_argument("--rows", type=int, default=60, help="eval rows (30 test + 30 test_family by default)")
    ap.add_argument("--alone-rows", type=int, default=8,
                    help="rows on which each partition runs alone on the reference model (the most shifted ones)")
    a = ap.parse_args()

    import numpy as np
    import torch
    from executorch.backends.arm.ethosu import EthosUPartitioner
    from executorch.exir import to_edge_transform_and_lower

    from npuport.parity import agreement
    from npuport.runtimes.ethosu import _vela_parts
    from npuport.runtimes.ethosu_debug import Lowered
    from npuport.runtimes.ethosu_quant import compile_spec, quantize, quiet

    demo, captured, shape, calib, rows = ethosu_setup.capture(a.model_dir, a.device, a.seq_len, a.rows,
                                                              prefix="npuport-eu-loc-", pick=a.pick,
                                                              calibration=a.calibration)
    example = captured.example(shape)
    tmp = Path(tempfile.mkdtemp(prefix="npuport-eu-vela-"))

    t0 = time.perf_counter()
    eu_spec = compile_spec(a.device)
    with quiet():
        qm = quantize(captured.export, captured.static, example, calib, eu_spec, a.precision,
                      scaled_layernorm=a.layernorm == "scaled")
        with torch.no_grad():
            ep = torch.export.export(qm, tuple(example), strict=True)
        with _vela_parts(tmp / "vela") as parts:
            edge = to_edge_transform_and_lower(ep, partitioner=[EthosUPartitioner(eu_spec)])
    lower_s = time.perf_counter() - t0
    print(f"lowered in {lower_s:.0f} s", flush=True)
    low = Lowered(edge, parts)
    described = [_describe(m) for m in low.modules]

    with torch.no_grad():
        floats = torch.cat([captured.reference(i, m) for i, m in rows]).float().numpy()
    P = len(low.modules)
    fq_logits, all_ref_logits, refs_by_row = [], [], []
    steps = [[] for _ in range(P)]  # per partition: max |ref - fq| in output steps, per row
    differ = [[] for _ in range(P)]
    t1 = time.perf_counter()
    for r, (ids, mask) in enumerate(rows):
        logits, seen = low.run(ids, mask)
        fq_logits.append(logits.float())
        refs = {}
        for k in range(P):  # the partition's own error: the reference model on the fake-quantised inputs
            ins, out = seen[k]
            got = low.reference(k, ins)
            refs[k] = got[0] if isinstance(out, torch.Tensor) else type(out)(got)
            d = [(x.double() - y.double()).abs() for x, y in zip([out] if isinstance(out, torch.Tensor) else out, got)]
            steps[k].append(max(float(t.max()) for t in d))
            differ[k].append(sum(float((t > 0).double().mean()) for t in d) / len(d))
        refs_by_row.append(refs)
        # every partition on the reference model, each fed the previous ones' outputs: the port's own figure
        all_ref_logits.append(low.run(ids, mask, on_reference="all")[0].float())
        if r == 0:
            print(f"row 1 of {len(rows)}: {time.perf_counter() - t1:.0f} s", flush=True)
    # Each partition alone on the reference model costs a whole run per partition and row: on the rows where the
    # reference model moves the logit most (every row it flips comes first).
    shift = (torch.cat(all_ref_logits) - torch.cat(fq_logits)).abs().reshape(len(rows), -1).amax(1)
    chosen = sorted(range(len(rows)), key=lambda r: -float(shift[r]))[:a.alone_rows]
    one_ref_logits = [[] for _ in range(P)]
    for r in chosen:
        ids, mask = rows[r]
        for k in range(P):
            one_ref_logits[k].append(low.run(ids, mask, given={k: refs_by_row[r][k]})[0].float())
    fq = torch.cat(fq_logits).numpy()
    build = json.loads((demo / "build.json").read_text()) if (demo / "build.json").is_file() else {}
    out = {**meta("ethosu_localise.py"), "demo_version": build.get("demo_version"), "demo_init": build.get("init"),
           "device": a.device, "precision": a.precision, "layernorm": a.layernorm,
           "shape": list(shape), "pick": a.pick, "calibration": a.calibration,
           "eval_rows": len(rows), "calibration_rows": len(calib), "lower_s": round(lower_s, 1),
           "run_s": round(time.perf_counter() - t1, 1),
           "executes": "TOSA reference model for one partition at a time; PyTorch (the fake-quantised partitions "
                       "and the host ops) for the rest",
           "fake_quant": dict(zip(("decision_agreement", "max_abs_logit_diff"), agreement(floats, fq, captured.task))),
           "reference_all": dict(zip(("decision_agreement", "max_abs_logit_diff"),
                                     agreement(floats, torch.cat(all_ref_logits).numpy(), captured.task))),
           "partitions": []}
    out["alone_rows"] = {"rows": len(chosen), "chosen_by": "largest logit shift of the all-reference run vs "
                         "fake-quant", "fake_quant": dict(zip(("decision_agreement", "max_abs_logit_diff"), agreement(
                             floats[chosen], fq[chosen], captured.task)))}
    for k in range(P):
        one = torch.cat(one_ref_logits[k]).numpy()
        agree, dl = agreement(floats[chosen], one, captured.task)
        _, dfq = agreement(fq[chosen], one, captured.task)
        out["partitions"].append({"index": k, **described[k], "output_dtypes": [m["dtype"] for m in low.reference.outputs[k]],
                                  "max_steps": max(steps[k]), "median_row_max_steps": float(np.median(steps[k])),
                                  "elements_differing": float(np.mean(differ[k])),
                                  "decision_agreement_alone": agree, "max_abs_logit_diff_alone": dl,
                                  "logit_shift_vs_fake_quant": dfq})
        print(k, json.dumps(out["partitions"][-1])[:400], flush=True)
    print(json.dumps({k: out[k] for k in ("fake_quant", "reference_all")}))
    write_result(ethosu_setup.result_name(f"ethosu_localise_{a.precision}_{a.layernorm}", a), out)


if __name__ == "__main__":
    main()
