"""Thin CLI: each command group lives in its own module (`cli/port.py`, `cli/lm.py`, ...), builds its parser,
fills a config dataclass and calls one function of the library (`npuport.api`). No argparse object enters the
library.

Exit codes, one table: 0 ok, 1 a check failed (parity, hashes), 2 bad input or environment (one-line message;
--debug shows the traceback), 130 interrupted.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback

from ..errors import NpuportError
from . import demo, detector, doctor, lm, port, serve
from .common import EPILOG

GROUPS = (doctor, port, serve, demo, detector, lm)  # each module: register(subparsers) sets args.func


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="npuport",
        description="Port PyTorch transformer models to static-graph runtimes (NPUs, ONNX Runtime, OpenVINO, "
        "AOTInductor, IREE) and prove at every step that nothing changed.",
        epilog=EPILOG,
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress output")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for group in GROUPS:
        group.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not args.debug:
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        return args.func(args)
    except NpuportError as e:
        if args.debug:
            traceback.print_exc()
        print(f"npuport {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


__all__ = ["build_parser", "main"]
