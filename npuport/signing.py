"""Optional artifact signing (Ed25519, through the `cryptography` package).

Trust model: `manifest.json` lists the sha256 of every file, so loading detects corruption and accidental edits.
It does not stop a hostile writer, who can change a file *and* the manifest. A signature does: `npuport sign`
signs the manifest's bytes with a private key (the manifest covers every file through its hashes), writes
`manifest.sig` beside it, and `verify --key` / `serve --require-signature` check it against the public key.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

from .errors import ConfigError, IntegrityError
from .fsio import atomic_write
from .manifest import MANIFEST, SIGNATURE


def _crypto():
    try:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
    except ImportError as e:
        raise ConfigError(f"signing needs the cryptography package ({e}); install with: pip install cryptography") from e
    return serialization, Ed25519PrivateKey, Ed25519PublicKey, InvalidSignature


def keygen(path: str | os.PathLike) -> tuple[Path, Path]:
    """Write a new private key (PEM, mode 0600) to PATH and its public key to PATH.pub; never overwrites."""
    serialization, Priv, _, _ = _crypto()
    priv_path, pub_path = Path(path), Path(f"{path}.pub")
    for p in (priv_path, pub_path):
        if p.exists():
            raise ConfigError(f"{p} exists; keys are never overwritten (choose another path)")
    key = Priv.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    pub = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    atomic_write(priv_path, pem)
    os.chmod(priv_path, 0o600)
    atomic_write(pub_path, pub)
    return priv_path, pub_path


def _load_key(path: str | os.PathLike, private: bool):
    serialization, Priv, Pub, _ = _crypto()
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"key file {p} does not exist (make one with `npuport keygen PATH`)")
    data = p.read_bytes()
    try:
        key = (serialization.load_pem_private_key(data, password=None) if private
               else serialization.load_pem_public_key(data))
    except (ValueError, TypeError) as e:
        kind = "private" if private else "public"
        raise ConfigError(f"{p} is not a PEM {kind} key ({e})") from None
    if not isinstance(key, Priv if private else Pub):
        raise ConfigError(f"{p} is not an Ed25519 key")
    return key


def sign(artifact: str | os.PathLike, key_path: str | os.PathLike) -> Path:
    """Sign one artifact's manifest; the files must pass their hash check first (a bad artifact is never signed)."""
    from .artifact import check_files

    d = Path(artifact)
    check_files(d)
    key = _load_key(key_path, private=True)
    sig = key.sign((d / MANIFEST).read_bytes())
    atomic_write(d / SIGNATURE, base64.b64encode(sig) + b"\n")
    return d / SIGNATURE


def check_signature(artifact: str | os.PathLike, pub_path: str | os.PathLike) -> None:
    _, _, _, InvalidSignature = _crypto()
    d = Path(artifact)
    key = _load_key(pub_path, private=False)
    sig_file = d / SIGNATURE
    if not sig_file.is_file():
        raise IntegrityError(f"{d} is not signed ({SIGNATURE} missing); sign it with `npuport sign {d} --key KEY`")
    try:
        key.verify(base64.b64decode(sig_file.read_bytes().strip(), validate=True), (d / MANIFEST).read_bytes())
    except (InvalidSignature, ValueError):
        raise IntegrityError(f"{d}: the signature does not match its manifest under {pub_path} (changed after signing, "
                             "or signed with another key)") from None
