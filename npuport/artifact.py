"""Artifacts: a directory of compiled files + `manifest.json` carrying provenance and proof.

Loading re-hashes every file listed in the manifest and refuses any mismatch, extra weight file or missing
file (ArtifactError). The manifest is written once, last, atomically and durably, so a half-written artifact
never loads.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import ArtifactError, IntegrityError
from .fsio import sha256_file  # noqa: F401  (artifact.sha256_file is public)
from .manifest import MANIFEST, SIGNATURE, Manifest


def list_files(directory: Path) -> dict[str, str]:
    """Every file below the artifact directory — dot-files and nested manifests included — except the top-level
    manifest and its signature, which describe the others."""

    files = {}
    for p in sorted(directory.rglob("*")):
        rel = p.relative_to(directory).as_posix()
        if (p.is_file() or p.is_symlink()) and rel not in (MANIFEST, SIGNATURE):
            files[rel] = sha256_file(p) if p.is_file() else "symlink:" + os.readlink(p)
    return files


def write_manifest(directory: Path, manifest: Manifest) -> Manifest:
    """Hash every file in the directory into the manifest, then write it (the last file of an artifact)."""
    manifest.files = list_files(directory)
    manifest.write(directory)
    return manifest


def read_manifest(directory: str | os.PathLike) -> Manifest:
    return Manifest.read(directory)


def check_files(directory: str | os.PathLike, manifest: Manifest | None = None) -> Manifest:
    """Re-hash every file; raise ArtifactError naming each file that is missing, changed or unexpected."""
    d = Path(directory)
    manifest = manifest or read_manifest(d)
    expected: dict[str, str] = manifest.files
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
        raise IntegrityError(f"artifact {d} failed its hash check: " + "; ".join(problems))
    return manifest


def check_source(manifest: Manifest, source_sha256: str) -> None:
    want = manifest.source.get("sha256")
    if want != source_sha256:
        raise IntegrityError(
            f"artifact was compiled from model {str(want)[:12]}…, but the model given hashes to {source_sha256[:12]}…"
        )


def load_session(directory: str | os.PathLike, *, verify_hashes: bool = True, threads: int | None = None):
    """(manifest, Session) for an artifact directory, after its hash check."""
    from .runtimes import get_runtime

    d = Path(directory)
    manifest = check_files(d) if verify_hashes else read_manifest(d)
    return manifest, get_runtime(manifest.runtime.name).open(d, manifest, threads)


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
