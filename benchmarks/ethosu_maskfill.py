"""P13: what the -inf substitute costs on Ethos-U. An attention mask puts -inf on the padded keys' scores; ExecuTorch's
Arm pipeline replaces it by a finite value before quantisation (its QuantizeInfConfig, -256 by default), and the
observers of the masked scores and of softmax's `x - max` span it, so it sets their quantisation step and the span of
the exp table the lowering builds. npuport sets it to `ethosu_quant.MASKED_SCORE`.

Per value: the demo detector quantised as `npuport port` does (calibrated on val.jsonl as port takes it), run as
fake-quantised PyTorch and lowered for the target, then every partition on the TOSA reference model; decisions and
logits against the float detector, and the reference model against the fake-quantised graph (the lowering's own
error). Rows: `--pick` (e.g. the rows a verify run flipped: results/npu_verify.json's changed_lines) or a sample.

What executes: PyTorch on this CPU (float, fake-quantised graph), the TOSA reference model (the partitions handed to
Vela). No Vela figures here.

    python benchmarks/ethosu_maskfill.py --seq-len 128 --precision int16 --pick 'test_family:267,356,536,589;test:165'
    python benchmarks/ethosu_maskfill.py --seq-len 64 --precision int8 --rows 60
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import ethosu_setup
from common import RESULTS, meta, write_result


def _run(setup, device: str, precision: str, masked: float) -> dict:
    import numpy as np
    import torch
    from executorch.backends.arm.ethosu import EthosUPartitioner
    from executorch.exir import to_edge_transform_and_lower

    from npuport.parity import agreement
    from npuport.runtimes import ethosu_quant
    from npuport.runtimes.ethosu import _vela_parts
    from npuport.runtimes.ethosu_debug import Lowered

    demo, cap, shape, calib, rows = setup
    saved, ethosu_quant.MASKED_SCORE = ethosu_quant.MASKED_SCORE, masked  # compile_spec reads it when called
    try:
        spec = ethosu_quant.compile_spec(device)
    finally:
        ethosu_quant.MASKED_SCORE = saved
    example = cap.example(shape)
    t0 = time.perf_counter()
    with ethosu_quant.quiet():
        prepared = ethosu_quant.quantize(cap.export, cap.static, example, calib, spec, precision, keep_observers=True)
        # the softmax inputs' ranges: the observers right after each `x - max`
        spans = [float(getattr(prepared, n.target).min_val) for n in prepared.graph.nodes
                 if n.op == "call_module" and "activation_post_process" in n.target
                 and str(getattr(n.args[0], "target", "")).startswith("aten.sub")
                 and float(getattr(prepared, n.target).max_val) == 0.0]
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e

        from npuport.runtimes.ethosu_quant import fast_histogram_search

        with fast_histogram_search():
            qm = convert_pt2e(prepared)
        with torch.no_grad():
            fl = torch.cat([cap.reference(i, m) for i, m in rows]).float().numpy()
            fq = torch.cat([qm(i, m) for i, m in rows]).float().numpy()
            ep = torch.export.export(qm, tuple(example), strict=True)
        with _vela_parts(Path(tempfile.mkdtemp(prefix="npuport-eu-mask-")) / "vela") as parts:
            edge = to_edge_transform_and_lower(ep, partitioner=[EthosUPartitioner(spec)])
    low = Lowered(edge, parts)
    ref = torch.cat([low.run(i, m, on_reference="all")[0].float() for i, m in rows]).numpy()

    def changed(a, b):
        da, db = cap.task.decisions(a), cap.task.decisions(b)
        return [int(i) for i in np.flatnonzero(~(da == db).reshape(len(a), -1).all(axis=1))]

    figs = {}
    for name, (a, b) in {"fake_quant": (fl, fq), "reference": (fl, ref), "reference_vs_fake_quant": (fq, ref)}.items():
        agree, dl = agreement(a, b, cap.task)
        figs[name] = {"decision_agreement": agree, "max_abs_logit_diff": dl, "changed_rows": changed(a, b)}
    return {"masked_score": masked, **figs, "softmax_input_min": [min(spans), max(spans)] if spans else None,
            "seconds": round(time.perf_counter() - t0, 1)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ethosu_setup.add_arguments(ap)
    ap.set_defaults(calibration="port")
    ap.add_argument("--precision", default="int16", choices=("int8", "int16"))
    ap.add_argument("--rows", type=int, default=60, help="eval rows without --pick (half test, half test_family)")
    ap.add_argument("--masked-scores", default="-256,-32",
                    help="the -inf substitutes to compare (default: ExecuTorch's -256 and npuport's -32)")
    a = ap.parse_args()
    values = [float(v) for v in a.masked_scores.split(",") if v.strip()]
    setup = ethosu_setup.capture(a.model_dir, a.device, a.seq_len, a.rows, prefix="npuport-eu-mask-", pick=a.pick,
                                 calibration=a.calibration)
    key = f"{a.precision}-1x{a.seq_len}-{'picked' if a.pick else f'{a.rows}rows'}"
    entry = {**meta("ethosu_maskfill.py"), "device": a.device, "precision": a.precision, "shape": list(setup.shape),
             "pick": a.pick, "eval_rows": len(setup.rows), "calibration": a.calibration,
             "calibration_rows": len(setup.calib),
             "executes": "PyTorch (float, fake-quantised graph) and the TOSA reference model (every partition)",
             "values": []}
    for v in values:
        entry["values"].append(_run(setup, a.device, a.precision, v))
        print(json.dumps(entry["values"][-1]), flush=True)
    old = RESULTS / "ethosu_maskfill.json"  # read at the end: a run of another key may have written meanwhile
    runs = json.loads(old.read_text())["runs"] if old.exists() else {}
    runs[key] = entry
    write_result("ethosu_maskfill", {**meta("ethosu_maskfill.py"), "runs": runs})


if __name__ == "__main__":
    main()
