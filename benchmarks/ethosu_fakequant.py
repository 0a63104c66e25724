"""P13: on Ethos-U, is a lost decision lost to quantisation or to the lowering? The demo detector's PT2E graph as
npuport's Ethos-U compile quantises it (ExecuTorch's EthosUQuantizer, symmetric, per-channel weights; int8, and a16w8
everywhere with LayerNorm in its scaled form for int16), calibrated on the same validation rows as `npu_mixed.py`,
run as fake-quantised PyTorch on the same 30 test + 30 test_family rows at 1 x 64 against the float detector.
Beside `npu_mixed.py`'s Ethos-U rows (the TOSA reference model running the compiled partitions of the same
recipes): where fake-quant keeps a decision that the reference model loses, the loss is in the lowering, not in the
quantisation. Also the widest activation ranges the observers saw (per-tensor scales are set by them).

What executes: PyTorch on this CPU (the fake-quantised graph), no Vela and no reference model.

    python benchmarks/ethosu_fakequant.py [--model-dir DEMO_BUILD] [--precisions int8,int16]
"""

from __future__ import annotations

import argparse
import json
import time

import ethosu_setup
from common import meta, write_result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ethosu_setup.add_arguments(ap)
    ap.add_argument("--precisions", default="int8,int16")
    a = ap.parse_args()

    import numpy as np
    import torch

    from npuport.parity import agreement
    from npuport.runtimes.ethosu_quant import compile_spec, quantize

    demo, captured, shape, calib, rows = ethosu_setup.capture(a.model_dir, a.device, a.seq_len, prefix="npuport-eu-fq-",
                                                              pick=a.pick, calibration=a.calibration)
    with torch.no_grad():
        ref = torch.cat([captured.reference(i, m) for i, m in rows]).numpy()
    build = json.loads((demo / "build.json").read_text()) if (demo / "build.json").is_file() else {}
    out = {**meta("ethosu_fakequant.py"), "demo_version": build.get("demo_version"), "demo_init": build.get("init"),
           "device": a.device, "shape": list(shape), "pick": a.pick, "calibration": a.calibration, "eval_rows": len(rows), "calibration_rows": len(calib),
           "executes": "fake-quantised PyTorch graph (PT2E, EthosUQuantizer), this CPU", "precisions": {}}
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e

    for prec in filter(None, a.precisions.split(",")):
        t0 = time.perf_counter()
        prepared = quantize(captured.export, captured.static, captured.example(shape), calib, compile_spec(a.device),
                            prec, keep_observers=True)
        widest = sorted(((float(m.min_val), float(m.max_val)) for m in prepared.modules()
                         if hasattr(m, "min_val") and m.min_val.numel() == 1), key=lambda r: -max(map(abs, r)))[:5]
        qm = convert_pt2e(prepared)
        with torch.no_grad():
            got = torch.cat([qm(i, m) for i, m in rows]).numpy()
        agree, dl = agreement(ref, got, captured.task)
        dr, dg = captured.task.decisions(ref), captured.task.decisions(got)
        changed = [int(i) for i in np.flatnonzero(~(dr == dg).reshape(len(ref), -1).all(axis=1))]
        out["precisions"][prec] = {"decision_agreement": agree, "max_abs_logit_diff": dl, "changed_rows": changed,
                                   "logits": {"float": ref.tolist(), "fake_quant": got.tolist()} if a.pick else None,
                                   "widest_activation_ranges": widest, "seconds": round(time.perf_counter() - t0, 1)}
        print(prec, json.dumps(out["precisions"][prec]), flush=True)
        write_result(ethosu_setup.result_name("ethosu_fakequant", a), out)


if __name__ == "__main__":
    main()
