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


def die_with_parent(parent_pid: int | None = None) -> None:
    """Linux: SIGTERM this process when its parent dies, whatever killed the parent (SIGKILL included), so no
    child of npuport runs on orphaned. With `parent_pid`: a parent that died before this call was made is caught
    too (the process was already reparented), and the same SIGTERM is sent at once."""
    import ctypes
    import os

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: no such call
        return
    if parent_pid is not None and os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGTERM)


def terminate_interrupts() -> None:
    """SIGTERM handled as Ctrl-C (recorded, KeyboardInterrupt): staged outputs are removed on the way out."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _handler)


def interrupted() -> bool:
    return _interrupted.is_set()


def raise_if_interrupted() -> None:
    if _interrupted.is_set():
        raise KeyboardInterrupt
