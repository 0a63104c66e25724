"""B1 peers: what a user would pick instead of npuport - Hugging Face optimum's ONNX export with ORTModel, and
optimum-intel's OpenVINO model - on the mmBERT-base architecture (published config, random init), 1 x 512, fp32.

The peers pin transformers 4.x, so they live in their own virtual environment (benchmarks/.peers-venv, created on
first use from PyPI). They export the *backbone* (feature extraction): neither supports the detector's custom
head. npuport's ONNX Runtime and OpenVINO artifacts (ported first, with the head) are loaded with the plain
runtimes in that same process, so peers, npuport and eager are timed interleaved, side by side.

    python benchmarks/b1_peers.py [--runs 12]
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
VENV = HERE / ".peers-venv"
PEERS = ["torch==2.13.0", "optimum==2.1.0", "optimum-onnx==0.1.0", "optimum-intel==1.27.0", "onnxruntime", "openvino"]


def ensure_venv() -> Path:
    py = VENV / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", *PEERS], check=True)
    return py


def inner(runs: int, out: str, art: str | None = None) -> None:
    import tempfile

    import numpy as np
    import torch
    import transformers
    from transformers import AutoConfig, AutoModel

    cfg = dict(vocab_size=256000, hidden_size=768, intermediate_size=1152, num_hidden_layers=22, num_attention_heads=12,
               max_position_embeddings=8192, global_attn_every_n_layers=3, local_attention=128, global_rope_theta=160000.0,
               local_rope_theta=160000.0, pad_token_id=0, bos_token_id=2, eos_token_id=1, cls_token_id=2, sep_token_id=1)
    torch.manual_seed(0)
    model = AutoModel.from_config(AutoConfig.for_model("modernbert", **cfg), attn_implementation="sdpa").eval()
    d = tempfile.mkdtemp()
    model.save_pretrained(d)
    ids = torch.randint(10, 256000, (1, 512))
    mask = torch.ones_like(ids)
    runners, notes = {}, {}

    def eager():
        with torch.no_grad():
            return model(input_ids=ids, attention_mask=mask).last_hidden_state

    runners["eager"] = eager
    try:
        from optimum.onnxruntime import ORTModelForFeatureExtraction

        t0 = time.perf_counter()
        ort_model = ORTModelForFeatureExtraction.from_pretrained(d, export=True)
        notes["optimum-onnxruntime"] = f"exported in {time.perf_counter() - t0:.0f} s"
        runners["optimum-onnxruntime"] = lambda: ort_model(input_ids=ids, attention_mask=mask).last_hidden_state
    except Exception as e:  # a peer that cannot export is a result, not a crash
        notes["optimum-onnxruntime"] = f"failed: {type(e).__name__}: {str(e)[:300]}"
    try:
        from optimum.intel import OVModelForFeatureExtraction

        ov_model = OVModelForFeatureExtraction.from_pretrained(d, export=True)
        runners["optimum-intel-openvino"] = lambda: ov_model(input_ids=ids, attention_mask=mask).last_hidden_state
        compiled = ov_model.request if hasattr(ov_model.request, "get_property") else ov_model.request.get_compiled_model()
        ran = compiled.get_property("INFERENCE_PRECISION_HINT")
        notes["optimum-intel-openvino"] = f"exported; its default config runs the CPU plugin at {ran}"
        # The same peer pinned to f32: the fair fp32 comparison.
        ov32 = OVModelForFeatureExtraction.from_pretrained(d, export=True, ov_config={"INFERENCE_PRECISION_HINT": "f32",
                                                                                  "PERFORMANCE_HINT": "LATENCY"})
        runners["optimum-intel-openvino-f32"] = lambda: ov32(input_ids=ids, attention_mask=mask).last_hidden_state
    except Exception as e:
        notes["optimum-intel-openvino"] = f"failed: {type(e).__name__}: {str(e)[:300]}"
    # npuport's own artifacts, run by the plain runtimes in this same process: a true side-by-side. The peers' venv
    # pins transformers 4.x, which npuport (transformers 5) cannot be installed beside: so the sessions are built
    # here with the same options npuport's runtime files use, not through npuport.
    if art:
        import onnxruntime as ort
        import openvino as ov

        feeds = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
        arrays = [feeds["input_ids"], feeds["attention_mask"]]

        def ort_runner(d):
            sess = ort.InferenceSession(f"{d}/onnxruntime-fp32/model.onnx", providers=["CPUExecutionProvider"])
            return lambda: sess.run(None, feeds)[0]

        def ov_runner(d, precision="f32"):
            cm = ov.Core().compile_model(f"{d}/openvino-fp32/model.xml", "CPU",
                                         {"INFERENCE_PRECISION_HINT": precision, "PERFORMANCE_HINT": "LATENCY"})
            req = cm.create_infer_request()
            return (lambda: req.infer(arrays)), cm.get_property("INFERENCE_PRECISION_HINT")

        runners["npuport-onnxruntime"] = ort_runner(art)
        runners["npuport-openvino"], _ = ov_runner(art)
        runners["npuport-openvino-bf16"], ran = ov_runner(art, "bf16")
        # a CPU without bf16 runs the bf16 hint in f32: say what ran, not what was asked
        notes["npuport-openvino-bf16"] = f"the CPU plugin runs it at {ran}"
        if Path(f"{art}/banded").exists():  # `port --attention banded`: the same model, sliding layers banded
            runners["npuport-onnxruntime-banded"] = ort_runner(f"{art}/banded")
            runners["npuport-openvino-banded"], _ = ov_runner(f"{art}/banded")
            notes["npuport-*-banded"] = ("ported with --attention banded (sliding-window layers compute their band "
                                         "only); its capture proof vs the HF model: " + Path(f"{art}/banded/proof.txt").read_text())
        notes["npuport"] = "artifacts ported by npuport (transformers 5) and loaded with plain onnxruntime / openvino here; they include the pooling + head"
    ref = eager().numpy()
    for n, r in runners.items():
        if n.startswith("npuport"):
            continue
        if n != "eager":
            notes[n + " max_abs_diff_vs_eager"] = float(np.abs(np.asarray(r()) - ref).max())
    samples = {n: [] for n in runners}
    for _ in range(2):
        for r in runners.values():
            r()
    for _ in range(runs):
        for n, r in runners.items():
            t0 = time.perf_counter()
            r()
            samples[n].append((time.perf_counter() - t0) * 1e3)
    res = {n: {"p50_ms": float(np.percentile(s, 50)), "p99_ms": float(np.percentile(s, 99)), "max_ms": float(max(s)),
               "runs": runs} for n, s in samples.items()}
    Path(out).write_text(json.dumps({"results": res, "notes": notes, "versions": {
        "transformers": transformers.__version__, "torch": torch.__version__,
        **{p.split("==")[0]: __import__("importlib.metadata").metadata.version(p.split("==")[0]) for p in PEERS[1:]}}}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=12)
    ap.add_argument("--inner", help=argparse.SUPPRESS)
    ap.add_argument("--art", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inner:
        return inner(args.runs, args.inner, args.art)
    sys.path.insert(0, str(HERE))
    from common import meta, write_result

    py = ensure_venv()
    tmp = HERE / "results" / ".peers.tmp.json"
    t0 = time.perf_counter()
    import shutil
    import tempfile

    from npuport.api import ModelSource, PortConfig, port
    from npuport.runtimes import ShapeSpec

    art = tempfile.mkdtemp(prefix="npuport-peers-")
    try:
        common = dict(source=ModelSource(preset="mmbert-base", random_init=True), runtimes=("onnxruntime", "openvino"),
                      shapes=ShapeSpec(buckets=(512,)), bench_runs=1)
        port(PortConfig(out=f"{art}/out", capture_methods=(), **common))
        rep = port(PortConfig(out=f"{art}/out/banded", attention="banded", capture_methods=("onnx",), **common))
        # banded is not bit-exact: its proof (adapted and ONNX graph vs the unmodified HF model) goes with the figures
        proof = {m: p["max_abs_diff"] for m, p in rep["capture"].items()}
        parity = {b: r["max_abs_logit_diff"] for b, v in rep["backends"].items() for r in v.values()}
        Path(f"{art}/out/banded/proof.txt").write_text(f"max|Δlogit| {proof}; runtimes vs eager {parity}")
        subprocess.run([str(py), __file__, "--runs", str(args.runs), "--inner", str(tmp), "--art", f"{art}/out"], check=True,
                       env={**os.environ, "TRANSFORMERS_VERBOSITY": "error"})
    finally:
        shutil.rmtree(art, ignore_errors=True)
    data = json.loads(tmp.read_text())
    tmp.unlink()
    eager = data["results"]["eager"]["p50_ms"]
    data["speed_vs_eager"] = {n: eager / r["p50_ms"] for n, r in data["results"].items()}
    write_result("b1_peers", {**meta("b1_peers.py"), "seconds": round(time.perf_counter() - t0, 1), **data})


if __name__ == "__main__":
    main()
