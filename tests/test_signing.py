"""Trust model (P8 #20): the manifest detects corruption; a hostile writer who rewrites a file *and* the manifest
passes the hash check — only a signature stops that. Dot-files and nested manifests are hashed like any file."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from npuport.artifact import check_files, load_session
from npuport.cli import main
from npuport.errors import IntegrityError


@pytest.fixture
def art(artifacts, tmp_path):
    d = tmp_path / "a"
    shutil.copytree(artifacts / "onnxruntime-fp32", d)
    return d


def forge(d, name="model.onnx.data"):
    """What a hostile writer does: change a file and rewrite its hash in the manifest."""
    data = d / name
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))
    m = json.loads((d / "manifest.json").read_text())
    m["files"][name] = hashlib.sha256(bytes(raw)).hexdigest()
    (d / "manifest.json").write_text(json.dumps(m))


def test_forged_manifest_passes_hashes_but_not_the_signature(art, tmp_path, capsys):
    key = tmp_path / "k"
    assert main(["keygen", str(key)]) == 0
    assert oct((tmp_path / "k").stat().st_mode & 0o777) == "0o600"
    assert main(["keygen", str(key)]) == 2  # never overwrites a key
    assert main(["sign", str(art), "--key", str(key)]) == 0
    assert main(["-q", "verify", str(art), "--key", f"{key}.pub"]) == 0
    forge(art)
    check_files(art)  # the hash check alone is fooled: it detects corruption, not a hostile writer
    capsys.readouterr()
    assert main(["-q", "verify", str(art), "--key", f"{key}.pub"]) == 1
    assert "signature does not match" in capsys.readouterr().err


def test_unsigned_and_wrong_key(art, tmp_path, capsys):
    for name in ("k1", "k2"):
        assert main(["keygen", str(tmp_path / name)]) == 0
    assert main(["-q", "verify", str(art), "--key", str(tmp_path / "k1.pub")]) == 1
    assert "not signed" in capsys.readouterr().err
    assert main(["sign", str(art), "--key", str(tmp_path / "k1")]) == 0
    assert main(["-q", "verify", str(art), "--key", str(tmp_path / "k2.pub")]) == 1
    assert main(["sign", str(art), "--key", str(tmp_path / "k1.pub")]) == 2  # a public key cannot sign


def test_serve_requires_signature(art, tmp_path):
    from npuport.serve.engine import Engine

    key = tmp_path / "k"
    main(["keygen", str(key)])
    with pytest.raises(IntegrityError, match="not signed"):
        Engine(str(art), require_signature=f"{key}.pub")
    main(["sign", str(art), "--key", str(key)])
    assert Engine(str(art), require_signature=f"{key}.pub").manifest.runtime.name == "onnxruntime"


def test_dot_files_and_nested_manifests_are_hashed(art):
    (art / ".hidden").write_text("planted")
    with pytest.raises(IntegrityError, match=r"\.hidden not in manifest"):
        load_session(art)
    (art / ".hidden").unlink()
    (art / "tokenizer" / "manifest.json").write_text("{}")
    with pytest.raises(IntegrityError, match="tokenizer/manifest.json not in manifest"):
        load_session(art)
