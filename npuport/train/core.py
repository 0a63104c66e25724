"""One training-loop core, shared by `lm train` (single process and every distributed rank) and `detector train`.

    MetricsLog        metrics.jsonl: one JSON record per step (or epoch); on resume the records past the checkpoint
                      are dropped (they are replayed identically) and a torn final line is dropped with a warning
    CheckpointStore   checkpoints/<unit>_<N>: files or directories that appear whole (atomic rename), are read
                      newest first with a fallback to the previous one when the newest cannot be loaded, and are
                      pruned to the last K
    run_loop          the cadence: step -> evaluate every N -> log -> checkpoint every M -> progress -> stop?

What a step is (a captured graph on a runtime, an all-reduce, an epoch of eager batches) stays with the caller.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from pathlib import Path
from typing import Callable, TypeVar

from ..errors import DataError
from ..fsio import fsync_dir, fsync_tree, write_lines_atomic
from ..ui import StepBar

CKPT_DIR = "checkpoints"  # a run's checkpoints, under its output directory (LM, detector, distributed)

log = logging.getLogger(__name__)
T = TypeVar("T")


class MetricsLog:
    def __init__(self, path: Path, key: str = "step"):
        self.path, self.key = Path(path), key
        self._f = None

    def read(self) -> list[dict]:
        """Every record. An unparseable *final* line (a write torn by a crash) is dropped with a warning; a bad
        line anywhere else is corruption: DataError naming file:line."""
        if not self.path.is_file():
            return []
        lines = self.path.read_text(encoding="utf-8", errors="replace").splitlines()
        last = max((i for i, ln in enumerate(lines) if ln.strip()), default=-1)
        out = []
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                if not isinstance(rec, dict) or self.key not in rec:
                    raise ValueError(f"not a record with {self.key!r}")
            except (ValueError, RecursionError) as e:
                if i == last:
                    log.warning("%s:%d: dropping a torn last line (%s)", self.path, i + 1, e)
                    continue
                raise DataError(f"{self.path}:{i + 1}: unreadable metrics record ({e}); the run's log is damaged") from None
            out.append(rec)
        return out

    def truncate(self, upto: int) -> list[dict]:
        """Keep the records up to `upto` (the checkpoint a resume starts from), rewritten atomically."""
        kept = [r for r in self.read() if r[self.key] <= upto]
        write_lines_atomic(self.path, kept)
        return kept

    def reset(self) -> None:
        self.path.unlink(missing_ok=True)

    def append(self, rec: dict) -> None:
        if self._f is None:
            self._f = open(self.path, "a", encoding="utf-8")
        self._f.write(json.dumps(rec) + "\n")
        self._f.flush()

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


class CheckpointStore:
    """Checkpoints named `<unit>_<N:08d><suffix>` under one directory.

    A checkpoint is written under a temporary name and renamed into place, so an entry that exists is whole
    (`committed` can demand more, e.g. a COMMIT marker written after every rank saved). Only names of this
    pattern are ever deleted."""

    def __init__(self, root: Path, unit: str = "step", suffix: str = ".safetensors", keep: int | None = 3,
                 committed: Callable[[Path], bool] | None = None):
        if keep is not None and keep < 1:
            from ..errors import ConfigError

            raise ConfigError(f"--keep-checkpoints {keep}: keep at least 1")
        self.root, self.unit, self.suffix, self.keep = Path(root), unit, suffix, keep
        self.committed = committed or (lambda p: True)
        self._re = re.compile(rf"^{re.escape(unit)}_(\d{{8}}){re.escape(suffix)}$")

    def path(self, n: int) -> Path:
        return self.root / f"{self.unit}_{n:08d}{self.suffix}"

    def entries(self) -> list[tuple[int, Path]]:
        if not self.root.is_dir():
            return []
        found = []
        for p in self.root.iterdir():
            m = self._re.match(p.name)
            if m and self.committed(p):
                found.append((int(m.group(1)), p))
        return sorted(found)

    def save_dir(self, n: int, write: Callable[[Path], None]) -> Path:
        """A directory checkpoint: `write(tmp_dir)` fills it, then it is fsynced and renamed into place."""
        final = self.path(n)
        tmp = self.root / f".{final.name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        write(tmp)
        fsync_tree(tmp)
        if final.exists():  # the same step saved again (a replay after resume): replace it
            shutil.rmtree(final)
        tmp.rename(final)
        fsync_dir(self.root)
        return final

    def load_latest(self, load: Callable[[Path], T]) -> tuple[int, T] | None:
        """The newest checkpoint that loads; a damaged newest one is skipped with a warning (falls back)."""
        for n, p in reversed(self.entries()):
            try:
                return n, load(p)
            except Exception as e:  # noqa: BLE001 - any failure to read it means: try the previous one
                log.warning("checkpoint %s cannot be loaded (%s: %s); falling back to the previous one",
                            p, type(e).__name__, str(e)[:200])
        return None

    def prune(self) -> list[Path]:
        """Delete all but the newest `keep` checkpoints; returns what was removed."""
        if self.keep is None:
            return []
        old = self.entries()[: -self.keep]
        for _, p in old:
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink(missing_ok=True)
        return [p for _, p in old]


def load_params(model, params) -> None:
    """Copy parameter tensors (a runner's state, a checkpoint's) into a module, e.g. the evaluation model."""
    import torch

    with torch.no_grad():
        for p, src in zip(model.parameters(), params):
            p.copy_(torch.as_tensor(src))


def run_loop(*, start: int, stop: int, step: Callable[[int], dict], evaluate: Callable[[int], dict] | None = None,
             eval_every: int = 1, checkpoint: Callable[[int], None] | None = None, ckpt_every: int = 1,
             metrics: MetricsLog | None = None, bar: StepBar | None = None,
             describe: Callable[[dict], str] = lambda r: "", on_record: Callable[[dict], None] | None = None,
             should_stop: Callable[[dict], bool] | None = None) -> dict | None:
    """Units start+1 … stop: run one, evaluate on the cadence, log the record, checkpoint on the cadence (and at
    the last unit or an early stop), report progress. Returns the last record."""
    rec = None
    for n in range(start + 1, stop + 1):
        rec = step(n)
        last = n == stop
        if evaluate is not None and (n % eval_every == 0 or last):
            rec.update(evaluate(n))
        if metrics is not None:
            metrics.append(rec)
        stop_now = bool(should_stop and should_stop(rec))
        if checkpoint is not None and (n % ckpt_every == 0 or last or stop_now):
            checkpoint(n)
        if bar is not None:
            bar.update(n, describe(rec))
        if on_record is not None:
            on_record(rec)
        if stop_now:
            break
    return rec
