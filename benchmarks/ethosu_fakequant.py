"""P13: on Ethos-U, is a lost decision lost to quantisation or to the lowering? The demo detector's PT2E graph as
npuport's Ethos-U compile quantises it (ExecuTorch's EthosUQuantizer, symmetric, per-channel weights; int8, and a16w8
everywhere for int16), calibrated on the same validation rows as `npu_mixed.py`, run as fake-quantised PyTorch on the
same 30 test + 30 test_family rows at 1 x 64 against the float detector. Beside `npu_mixed.py`'s Ethos-U rows (the
TOSA reference model running the compiled partitions of the same recipes): where fake-quant keeps a decision that
the reference model loses, the loss is in the lowering, not in the quantisation. Also the widest activation ranges
the observers saw (per-tensor scales are set by them).

What executes: PyTorch on this CPU (the fake-quantised graph), no Vela and no reference model.

    python benchmarks/ethosu_fakequant.py [--model-dir DEMO_BUILD] [--precisions int8,int16]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

from common import meta, write_result


def _rows(path: Path, n: int, seed: int) -> list[str]:
    lines = path.read_text().splitlines()
    random.Random(seed).shuffle(lines)
    return lines[:n]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-dir", help="a demo build (model/, data/, build.json); default: the demo detector, built "
                    "or reused as npu_mixed.py does")
    ap.add_argument("--precisions", default="int8,int16")
    ap.add_argument("--device", default="ethos-u55-128")
    ap.add_argument("--seq-len", type=int, default=64)
    a = ap.parse_args()

    import torch

    from npuport import porting
    from npuport.config import ModelSource, PortConfig
    from npuport.parity import agreement
    from npuport.runtimes import ShapeSpec
    from npuport.runtimes.ethosu_quant import compile_spec, quantize
    from npuport.ui import Progress

    if a.model_dir:
        demo = Path(a.model_dir)
    else:
        from npuport.detector.demo import DemoBuildConfig, build_demo

        demo = build_demo(DemoBuildConfig(), Progress(enabled=True), show_bar=False)
    tmp = Path(tempfile.mkdtemp(prefix="npuport-eu-fq-"))
    evalf, calibf = tmp / "eval.jsonl", tmp / "calib.jsonl"  # the rows npu_mixed.py judges and calibrates on
    evalf.write_text("\n".join(_rows(demo / "data" / "test.jsonl", 30, 0)
                               + _rows(demo / "data" / "test_family.jsonl", 30, 0)) + "\n")
    calibf.write_text("\n".join(_rows(demo / "data" / "val.jsonl", 64, 1)) + "\n")
    cfg = PortConfig(source=ModelSource(model_dir=str(demo / "model")), out=str(tmp / "o"), runtimes=("ethos-u",),
                     shapes=ShapeSpec(batch_sizes=(1,), buckets=(a.seq_len,)), eval_data=str(evalf),
                     calibration_data=str(calibf), precision="int8", device=a.device, capture_methods=("export",))
    inputs = porting.load_inputs(cfg, print)
    captured, _ = porting.capture_and_prove(inputs, inputs.cfg, tmp / "capture", print)
    shape = (1, a.seq_len)
    calib = captured.calibration_batches(shape, inputs.specs["ethos-u"].calibration)
    rows = captured.calibration_batches(shape, inputs.eval_rows)
    with torch.no_grad():
        ref = torch.cat([captured.reference(i, m) for i, m in rows]).numpy()
    build = json.loads((demo / "build.json").read_text()) if (demo / "build.json").is_file() else {}
    out = {**meta("ethosu_fakequant.py"), "demo_version": build.get("demo_version"), "demo_init": build.get("init"),
           "device": a.device, "shape": list(shape), "eval_rows": len(rows), "calibration_rows": len(calib),
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
        out["precisions"][prec] = {"decision_agreement": agree, "max_abs_logit_diff": dl,
                                   "widest_activation_ranges": widest, "seconds": round(time.perf_counter() - t0, 1)}
        print(prec, json.dumps(out["precisions"][prec]), flush=True)
        write_result("ethosu_fakequant", out)


if __name__ == "__main__":
    main()
