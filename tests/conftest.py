import gc
import json
import os
from pathlib import Path

import pytest
import torch

# Under pytest-xdist each worker gets its share of the cores: two workers on two cores, each with two OpenMP threads
# spinning for the other's core, run slower than one thread each.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
torch.set_num_threads(max(1, min(2, (os.cpu_count() or 1) // _WORKERS)))
# ... and so do the artifacts' runtimes (ONNX Runtime, OpenVINO, IREE take every core when asked for no threads), in
# this process and in the CLI subprocesses tests start, so that no worker's pool reaches into the other's core
# (measured on four multi-runtime modules at 2 workers: 252 s capped, 259 s not; the explicit contract is the point).
if _WORKERS > 1:
    os.environ.setdefault("NPUPORT_THREADS", str(torch.get_num_threads()))

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"

PERSONA_TEXTS = [
    "You are Captain Mara, a weathered sky-pirate who speaks in clipped sentences.",
    "You are Professor Hollow, a ghost who haunts the old library and loves riddles.",
    "あなたは江戸時代の茶屋の娘、お春です。丁寧な言葉で話します。",
    "당신은 조선 시대의 약초꾼 민호입니다. 짧고 소박하게 말합니다.",
    "Aye, the winds be fair tonight. Hold fast to the rigging!",
    "As an AI language model, I cannot help with that request.",
    "Great question! Here are five steps to file your taxes: 1. Gather documents.",
    "The clockwork golem in the tower? Built by my grandfather, it was.",
    "I'm sorry, but I can't continue this roleplay. Is there anything else I can help with?",
]


# Scheduling hint for pytest-xdist (`--dist loadscope --no-loadscope-reorder`, pyproject addopts): each test module
# runs whole on one worker, so its module-scoped fixtures (a port to every runtime, an Ethos-U compile) are built
# once; under `--dist load` a module's tests were spread over both workers and interleaved with other modules', and
# those fixtures were built up to three times. Modules go out in the order of their first test here: the modules
# holding the tests measured slowest (2 cores; whole compiles of step graphs and NPU pipelines) first, so that no
# worker starts a long one when the other is done. Order only: a name missing here runs later, nothing is skipped.
# (xdist_group marks would do the grouping by hand, but pytest 9 no longer reads the node id that pytest-xdist 3.8
# rewrites to attach a group, so the marks are ignored there: checked on a worker.)
SLOW_FIRST = ("inductor", "test_ethosu", "test_cli_diloco_survives", "iree", "test_detector_e2e", "test_check", "test_ft",
              "test_distributed", "test_classifiers",
              "test_int8", "test_qnn", "test_backends", "test_pretrained", "test_lm_train", "test_outputs")


def pytest_collection_modifyitems(config, items):
    def rank(item):
        return next((i for i, k in enumerate(SLOW_FIRST) if k in item.nodeid), len(SLOW_FIRST))

    items.sort(key=rank)  # stable: within a rank, collection order


@pytest.fixture(autouse=True, scope="module")
def _young_heap_for_gc():
    """npuport calls gc.collect() to hand a model's memory back between stages (proofs, compiles, checks), and a full
    collection walks every object the process holds: in a test worker that is every module torch, transformers and
    each runtime imported, and what earlier modules left, ~0.37 s a call, about a fifth of a tiny-model port's time
    (cProfile of tests/test_int8.py, 33 calls). Frozen objects are not walked: the heap as a module starts is
    frozen for that module, so collections walk only what the module itself made; unfrozen at its end, so what the
    module's fixtures held is collected at the next module's start."""
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


def needs_ethos_u():
    """Skip where ExecuTorch's Arm backend is not installed, but never in CI (which installs it: there a missing
    toolchain must fail, not skip)."""
    from npuport.runtimes import get_runtime

    return pytest.mark.skipif(not get_runtime("ethos-u").available()[0] and not os.environ.get("CI"),
                              reason='needs executorch + ethos-u-vela + tosa-tools: pip install "npuport[ethos-u]" '
                                     "(CI installs them)")


def make_rows(n=12):
    rows = []
    for i in range(n):
        persona = PERSONA_TEXTS[i % 4]
        reply = PERSONA_TEXTS[4 + (i % 5)] * (1 + i % 3)
        rows.append({"persona": persona, "user": "Who are you?" if i % 2 else None, "reply": reply,
                     "label": int(i % 5 in (1, 2, 4))})
    return rows


@pytest.fixture(scope="session")
def step_graph_dir(tmp_path_factory):
    """One directory of exported step graphs for the whole run, every xdist worker included: the runtimes that
    compile from ONNX share each graph, as data-parallel ranks do (the runner reuses a file exported under the same
    key, and writes atomically). What each runtime compiles goes to its own compiled_dir."""
    base = tmp_path_factory.getbasetemp()
    d = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "step-graphs"
    d.mkdir(exist_ok=True)
    return d


def fixed_tokenizer(texts, vocab_size=300):
    """A WordPiece tokenizer whose vocabulary is built here in a fixed order (specials, every character as a word
    start and as a continuation, then whole words by count): the same token ids on every run. `train_tokenizer`'s
    trainer breaks ties in hash-map order, so a random-init model fed its ids can put a row at the decision
    threshold in one run and not the next (test_qnn's int8 port failed one CI run that way)."""
    from collections import Counter

    from npuport.detector.tokenizer import SPECIALS, wordpiece_tokenizer

    pipe = wordpiece_tokenizer({t: i for i, t in enumerate(SPECIALS)}).backend_tokenizer
    words = Counter(w for t in texts for w, _ in pipe.pre_tokenizer.pre_tokenize_str(pipe.normalizer.normalize_str(t)))
    chars = sorted({c for w in words for c in w})
    tokens = list(SPECIALS) + chars + [f"##{c}" for c in chars]
    tokens += [w for w, _ in sorted(words.items(), key=lambda kv: (-kv[1], kv[0])) if len(w) > 1]
    return wordpiece_tokenizer({t: i for i, t in enumerate(dict.fromkeys(tokens[:vocab_size]))})


def _tiny_detector_dir(tmp_path_factory, name, **overrides):
    """A real tiny ModernBERT detector directory: config.json, model.safetensors, a tokenizer with fixed ids."""
    from npuport.models.detector import build_preset

    d = tmp_path_factory.mktemp(name)
    tok = fixed_tokenizer(PERSONA_TEXTS * 3, vocab_size=300)
    model = build_preset("tiny-modernbert", seed=1, vocab_size=len(tok), pad_token_id=tok.pad_token_id,
                         cls_token_id=tok.cls_token_id, sep_token_id=tok.sep_token_id,
                         bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id, **overrides)
    model.save_pretrained(d, tokenizer=tok)
    return d


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    return _tiny_detector_dir(tmp_path_factory, "tiny_model")


@pytest.fixture(scope="session")
def npu_model_dir(tmp_path_factory):
    """The same at two layers (one global, one sliding-window), for the tests that lower it for an integer NPU:
    ExecuTorch's Arm lowering retraces the graph once per pass, so its time grows with the layers, and two keep both
    attention kinds."""
    return _tiny_detector_dir(tmp_path_factory, "npu_model", num_hidden_layers=2)


@pytest.fixture(scope="session")
def eval_jsonl(tmp_path_factory):
    p = tmp_path_factory.mktemp("data") / "eval.jsonl"
    with open(p, "w", encoding="utf-8") as f:
        for r in make_rows():
            f.write(json.dumps({k: v for k, v in r.items() if v is not None}, ensure_ascii=False) + "\n")
    return p


@pytest.fixture(scope="session")
def artifacts(tiny_model_dir, tmp_path_factory):
    """A ported tiny detector (ONNX Runtime, buckets 16/32/64) with its tokenizer: what `serve` serves in tests."""
    from npuport.api import ModelSource, PortConfig, port
    from npuport.runtimes import ShapeSpec

    out = tmp_path_factory.mktemp("serve") / "out"
    port(PortConfig(source=ModelSource(model_dir=str(tiny_model_dir)), out=str(out), runtimes=("onnxruntime",),
                    shapes=ShapeSpec(batch_sizes=(1,), buckets=(16, 32, 64)), capture_methods=("trace",), bench_runs=1))
    return out
