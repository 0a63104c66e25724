"""Terminal progress: a rich status line with elapsed time on a TTY, plain timestamped lines elsewhere (CI logs)."""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager


class Progress:
    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self.t0 = time.perf_counter()
        self._status = None

    def __call__(self, message: str) -> None:
        if not self.enabled:
            return
        elapsed = time.perf_counter() - self.t0
        if self._status is not None:
            self._status.update(f"[bold]{message}[/]  [dim]{elapsed:6.1f}s[/]")
            self._status.console.log(message)
        else:
            print(f"[{elapsed:7.1f}s] {message}", file=sys.stderr, flush=True)

    @contextmanager
    def live(self):
        if self.enabled and sys.stderr.isatty():
            from rich.console import Console

            console = Console(stderr=True)
            with console.status("starting…") as status:
                self._status = status
                try:
                    yield self
                finally:
                    self._status = None
        else:
            yield self


def silent(_message: str) -> None:
    pass
