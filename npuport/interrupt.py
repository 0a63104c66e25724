"""Ctrl-C that cannot be swallowed.

Python turns SIGINT into KeyboardInterrupt in whatever frame runs at that instant. When that frame is a `__del__`
or a weakref callback (tokenizers, `regex`, torch all have them) the exception is printed as "Exception ignored"
and dropped, and a port the user stopped would finish and write its output. The CLI installs `install()`, which
also records the signal; `raise_if_interrupted()` at stage boundaries (progress lines, before an output is swapped
in) re-raises it, so an interrupted command always ends with 130 and leaves nothing behind.
"""

from __future__ import annotations

import signal
import threading

_interrupted = threading.Event()


def _handler(signum, frame):  # noqa: ARG001 - signal handler signature
    _interrupted.set()
    raise KeyboardInterrupt


def install() -> None:
    """Record SIGINT as well as raising it (main thread only; elsewhere the default handler stays)."""
    _interrupted.clear()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _handler)


def interrupted() -> bool:
    return _interrupted.is_set()


def raise_if_interrupted() -> None:
    if _interrupted.is_set():
        raise KeyboardInterrupt
