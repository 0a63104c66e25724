"""Artifacts: a directory of compiled files + `manifest.json` carrying provenance and proof.

Loading re-hashes every file listed in the manifest and refuses any mismatch, extra weight file or missing
file (ArtifactError). The manifest is written last and atomically, so a half-written artifact never loads.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import platform
from pathlib import Path
from typing import Any

from . import __version__
from .errors import ArtifactError

MANIFEST = "manifest.json"
FORMAT = "npuport-artifact/1"


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False, default=_json_default) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _json_default(o):
    if hasattr(o, "to_json"):
        return o.to_json()
    if isinstance(o, (set, tuple)):
        return list(o)
    if isinstance(o, Path):
        return str(o)
    return str(o)


def list_files(directory: Path) -> dict[str, str]:
    files = {}
    for p in sorted(directory.rglob("*")):
        if p.is_file() and p.name != MANIFEST and not p.name.startswith("."):
            files[p.relative_to(directory).as_posix()] = sha256_file(p)
    return files


def cpu_flags() -> list[str]:
    """The vector ISA flags that decide what fp32/bf16/int8 can do here (from /proc/cpuinfo)."""
    wanted = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_bf16", "amx_int8")
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                have = set(line.split(":", 1)[1].split())
                return [f for f in wanted if f in have]
    except OSError:
        pass
    return []


def machine() -> dict:
    import torch

    return {
        "cpu_flags": cpu_flags(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
    }


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def write_manifest(directory: Path, manifest: dict) -> dict:
    manifest = {"format": FORMAT, "npuport_version": __version__, **manifest}
    manifest.setdefault("created", _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    manifest["files"] = list_files(directory)
    write_json_atomic(directory / MANIFEST, manifest)
    return manifest


def read_manifest(directory: str | os.PathLike) -> dict:
    d = Path(directory)
    path = d / MANIFEST
    if not d.is_dir():
        raise ArtifactError(f"artifact directory {str(d)!r} does not exist")
    if not path.is_file():
        raise ArtifactError(f"{path} is missing: not an npuport artifact (run `npuport port` to make one)")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ArtifactError(f"{path} is not valid JSON: {e}") from None
    if manifest.get("format") != FORMAT:
        raise ArtifactError(f"{path}: format {manifest.get('format')!r} is not {FORMAT!r}")
    for key in ("backend", "precision", "device", "shapes", "files", "source"):
        if key not in manifest:
            raise ArtifactError(f"{path} lacks the field {key!r}")
    return manifest


def check_files(directory: str | os.PathLike, manifest: dict | None = None) -> dict:
    """Re-hash every file; raise ArtifactError naming each file that is missing, changed or unexpected."""
    d = Path(directory)
    manifest = manifest or read_manifest(d)
    expected: dict[str, str] = manifest["files"]
    actual = list_files(d)
    problems = []
    for name, digest in expected.items():
        if name not in actual:
            problems.append(f"{name} missing")
        elif actual[name] != digest:
            problems.append(f"{name} changed (sha256 {actual[name][:12]}… != manifest {digest[:12]}…)")
    for name in actual.keys() - expected.keys():
        problems.append(f"{name} not in manifest")
    if problems:
        raise ArtifactError(f"artifact {d} failed its hash check: " + "; ".join(problems))
    return manifest


def check_source(manifest: dict, source_sha256: str) -> None:
    want = manifest["source"].get("sha256")
    if want != source_sha256:
        raise ArtifactError(
            f"artifact was compiled from model {str(want)[:12]}…, but the model given hashes to {source_sha256[:12]}…"
        )


def load_session(directory: str | os.PathLike, *, verify_hashes: bool = True):
    """(manifest, Session) for an artifact directory, after its hash check."""
    from .backends import get_backend

    d = Path(directory)
    manifest = check_files(d) if verify_hashes else read_manifest(d)
    backend = get_backend(manifest["backend"]["name"])
    return manifest, backend.load(d, manifest)


def find_artifacts(root: str | os.PathLike) -> list[Path]:
    """Artifact directories directly under `root` (or `root` itself when it is one)."""
    r = Path(root)
    if (r / MANIFEST).is_file():
        return [r]
    if not r.is_dir():
        raise ArtifactError(f"{str(r)!r} does not exist")
    found = sorted(p.parent for p in r.glob(f"*/{MANIFEST}"))
    if not found:
        raise ArtifactError(f"no artifacts under {r} (expected */{MANIFEST}; run `npuport port -o {r}`)")
    return found
