"""Thin CLI: each command group lives in its own module (`cli/port.py`, `cli/lm.py`, ...), builds its parser,
fills a config dataclass and calls one function of the library (`npuport.api`). No argparse object enters the
library.

Exit codes, one table (npuport/errors.py): 0 ok, 1 a check failed (parity, hashes), 2 bad input or environment,
3 internal error, 130 interrupted. Every failure is one line on stderr; --debug adds the traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback

from .. import interrupt
from ..errors import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, EXIT_INTERNAL, EXIT_INTERRUPTED, CheckFailed, NpuportError
from . import check, demo, detector, doctor, lm, port, serve, sign
from .common import EPILOG

GROUPS = (doctor, check, port, sign, serve, demo, detector, lm)  # each module: register(subparsers) sets args.func


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
    interrupt.install()
    try:
        rc = args.func(args)
        interrupt.raise_if_interrupted()
        return rc
    except NpuportError as e:
        if args.debug:
            traceback.print_exc()
        kind = "check failed" if isinstance(e, CheckFailed) else "error"
        print(f"npuport {args.command}: {kind}: {e}", file=sys.stderr)
        return EXIT_CHECK_FAILED if isinstance(e, CheckFailed) else EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as e:  # noqa: BLE001 - the last boundary: one line, its own exit code, never a bare traceback
        if args.debug:
            traceback.print_exc()
        first = (str(e).strip().splitlines() or [""])[0][:300]
        print(f"npuport {args.command}: internal error: {type(e).__name__}: {first} (rerun with --debug for the "
              "traceback)", file=sys.stderr)
        return EXIT_INTERNAL


__all__ = ["build_parser", "main"]
