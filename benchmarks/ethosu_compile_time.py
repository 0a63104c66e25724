"""P13 #3: what each Ethos-U compile-time change buys, and how the compile grows with the layer count.

ModernBERT detectors of the `tiny-modernbert` width (random init) with 3 and 6 layers, one bucket, ported for one
Ethos-U target (`npuport port`, in this process) under five variants: neither compile-time change, only the shared
node provenance (`npuport/runtimes/_provenance.py`), only RoPE in token layout (`_rope_layout.py`), both, and
npuport's full set (both, plus q, k and v projected separately: `_qkv_layout.py`, a change for the NPU's cycles, and
PT2E's histogram range search without its per-element Python loop: `_histogram.py`, the same ranges), and that set
with torchao's own search (`torchao-search`). The benchmark switches a change off by replacing its context manager with an empty one; npuport
itself has no such switch. Per run: the compile's seconds (as the manifest records them), the whole-graph retraces
of ExecuTorch's permute propagation passes and their seconds (counted by wrapping the pass's `_retrace`), Vela's
cycle estimate, and the exact proof (fake-quantised PyTorch vs the TOSA reference model). What executes: the compile
is real (ExecuTorch's Arm backend, Vela); the proof runs on the TOSA reference model.

    python benchmarks/ethosu_compile_time.py [--layers 3,6] [--target ethos-u85-256] [--seq-len 64]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import time
from pathlib import Path

from common import meta, write_result

# (shared provenance, RoPE in token layout, separate q/k/v projections, npuport's histogram range search);
# "npuport" is what a port does; "torchao-search" is npuport with torchao's own HistogramObserver search
VARIANTS = {"neither": (False, False, False, False), "provenance": (True, False, False, False),
            "rope-layout": (False, True, False, False), "both": (True, True, False, False),
            "torchao-search": (True, True, True, False), "npuport": (True, True, True, True)}


@contextlib.contextmanager
def _off():
    yield []


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", default="3,6")
    ap.add_argument("--target", default="ethos-u85-256")
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    a = ap.parse_args()

    from executorch.backends.transforms import propagate_view_copy_permute_pass as prop

    from npuport.cli import main as cli
    from npuport.models.detector import build_preset
    from npuport.runtimes import ethosu, ethosu_quant

    counted = {"retraces": 0, "seconds": 0.0}
    retrace = prop.PropagateViewCopyPermutePass._retrace

    def counting(self, gm):
        t0 = time.perf_counter()
        try:
            return retrace(self, gm)
        finally:
            counted["retraces"] += 1
            counted["seconds"] += time.perf_counter() - t0

    prop.PropagateViewCopyPermutePass._retrace = counting
    keep = {"provenance": ethosu.shared_provenance, "rope": ethosu.rope_in_token_layout,
            "qkv": ethosu.separate_qkv_projections, "histogram": ethosu_quant.fast_histogram_search}
    tmp = Path(tempfile.mkdtemp(prefix="npuport-eu-time-"))
    out = {**meta("ethosu_compile_time.py"), "target": a.target, "seq_len": a.seq_len, "runs": {}}
    old = Path(__file__).parent / "results" / "ethosu_compile_time.json"
    if old.exists():  # a rerun of some variants keeps the others' rows
        prev = json.loads(old.read_text())
        if (prev["target"], prev["seq_len"]) == (a.target, a.seq_len):
            out["runs"] = {k: {"date": prev["date"], **v} for k, v in prev["runs"].items()}  # rows of another run
    for layers in [int(x) for x in a.layers.split(",")]:
        model = tmp / f"modernbert-{layers}"
        build_preset("tiny-modernbert", seed=0, num_hidden_layers=layers).save_pretrained(model)
        for name in a.variants.split(","):
            provenance, rope, qkv, histogram = VARIANTS[name]
            ethosu_quant.fast_histogram_search = keep["histogram"] if histogram else _off
            ethosu.shared_provenance = keep["provenance"] if provenance else _off
            ethosu.rope_in_token_layout = keep["rope"] if rope else _off
            ethosu.separate_qkv_projections = keep["qkv"] if qkv else _off
            counted.update(retraces=0, seconds=0.0)
            d = tmp / f"{layers}-{name}"
            t0 = time.perf_counter()
            rc = cli(["-q", "port", str(model), "-o", str(d), "--backend", "ethos-u", "--device", a.target,
                      "--seq-len", str(a.seq_len), "--bench-runs", "1", "--min-agreement", "0"])
            wall = time.perf_counter() - t0
            report = json.loads((d / "report.json").read_text())
            b = next(iter(report["backends"]["ethos-u"].values()))
            shape = json.loads((d / b["artifact"] / "manifest.json").read_text())["runtime"]["meta"]["shapes"]
            (s,) = shape.values()
            out["runs"][f"{layers}L/{name}"] = {
                "layers": layers, "variant": name, "date": out["date"], "exit_code": rc, "wall_s": round(wall, 1),
                "compile_seconds": b["compile_seconds"], "compile_s": s.get("compile_s"),
                "propagation_retraces": counted["retraces"], "propagation_s": round(counted["seconds"], 1),
                "cycles": s["cycles"], "estimated_ms": s["estimated_ms"], "partitions": s["partitions"],
                "fake_quant_vs_reference_max_abs": s["proof"]["fake_quant_vs_reference_max_abs"],
                "float_vs_reference_max_abs": s["proof"]["float_vs_reference_max_abs"]}
            print(f"{layers}L/{name}", json.dumps(out["runs"][f"{layers}L/{name}"]), flush=True)
            write_result("ethosu_compile_time", out)
    ethosu.shared_provenance, ethosu.rope_in_token_layout = keep["provenance"], keep["rope"]
    ethosu.separate_qkv_projections, ethosu_quant.fast_histogram_search = keep["qkv"], keep["histogram"]


if __name__ == "__main__":
    main()
