"""Terminal progress: a rich status line with elapsed time on a TTY, plain timestamped lines elsewhere (CI logs)."""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from typing import Callable

from .interrupt import raise_if_interrupted

# What every stage takes to report progress: a Progress below, `silent`, or any function of one message.
ProgressFn = Callable[[str], None]


class Progress:
    """The terminal's ProgressFn: a rich status line on a TTY, timestamped lines elsewhere."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self.t0 = time.perf_counter()
        self._status = None

    def __call__(self, message: str) -> None:
        raise_if_interrupted()  # every stage boundary reports progress: a swallowed Ctrl-C stops here
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
    raise_if_interrupted()


class StepBar:
    """The one step progress bar (LM and detector training): rich on a TTY, a plain line every ~10% elsewhere."""

    def __init__(self, label: str, total: int, done: int = 0, enabled: bool = True, sink=None):
        """sink: a ProgressFn that takes the ~10% lines instead of a bar (a child process reporting to its parent)."""
        self.label, self.total, self.done = label, total, done
        self.enabled, self.sink = enabled or sink is not None, sink
        self.tty = enabled and sink is None and sys.stderr.isatty()
        self.every = max(1, total // 10)
        self.t0 = time.perf_counter()
        if self.tty:
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
            from rich.progress import Progress as RichProgress

            self.p = RichProgress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                                  TimeRemainingColumn(), transient=False)
            self.p.start()
            self.task = self.p.add_task("", total=total, completed=done)

    def update(self, done: int, description: str) -> None:
        raise_if_interrupted()
        self.done = done
        if self.tty:
            self.p.update(self.task, completed=done, description=description)
        elif self.enabled and (done % self.every == 0 or done == self.total) and self.sink is not None:
            self.sink(f"{self.label} {done}/{self.total}  {description}")
        elif self.enabled and (done % self.every == 0 or done == self.total):
            print(f"[{time.perf_counter() - self.t0:7.1f}s] {self.label} {done}/{self.total}  {description}",
                  file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.tty:
            self.p.stop()
