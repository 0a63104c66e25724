"""npuport keygen | sign: optional Ed25519 signatures on artifacts (the trust model is in README)."""

from __future__ import annotations


def register(sub) -> None:
    k = sub.add_parser("keygen", help="make an Ed25519 key pair for signing artifacts (PATH and PATH.pub)")
    k.add_argument("path", help="where to write the private key; the public key goes to PATH.pub")
    k.set_defaults(func=run_keygen)
    s = sub.add_parser("sign", help="sign every artifact under a `port` output (after its hash check)")
    s.add_argument("path", help="an artifact directory or a `port` output directory")
    s.add_argument("--key", required=True, help="the private key (from `npuport keygen`)")
    s.set_defaults(func=run_sign)


def run_keygen(args) -> int:
    from ..signing import keygen

    priv, pub = keygen(args.path)
    print(f"private key: {priv} (keep it secret) · public key: {pub} (give it to verify --key / serve --require-signature)")
    return 0


def run_sign(args) -> int:
    from ..artifact import find_artifacts
    from ..signing import _load_key, sign

    _load_key(args.key, private=True)  # a bad key fails before anything is written
    for art in find_artifacts(args.path):
        print(f"signed {sign(art, args.key)}")
    return 0
