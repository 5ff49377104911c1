"""A verifier's BLS secret key on disk: ``{"type": "gym-bls-key", "v": 1, "sk": "0x<64 hex>",
"pk1": [x, y]}``, written with mode 0600 and never overwritten (``create``), read back with its
``pk1`` checked against the secret (``load``). The key guards the verifier's stake: a copy
signs for it. Encrypted storage (as a node's ``--keystore``) is not implemented.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from committee.bls import BLSError, SecretKey, g1_to_json, hex_to_int

KEY_TYPE = "gym-bls-key"
MAX_KEY_FILE_BYTES = 4096


def create(path: Path) -> SecretKey:
    """A fresh key written to ``path`` (which must not exist; mode 0600)."""
    sk = SecretKey.generate()
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"type": KEY_TYPE, "v": 1, "sk": f"0x{sk.value:064x}", "pk1": g1_to_json(sk.pk1())}
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(document, out, indent=1)
    return sk


def load(path: Path) -> SecretKey:
    """The key in ``path``; ``BLSError`` naming the file when it is not one."""
    from ledger.json_input import JSONInputError, parse_json

    try:
        document = parse_json(path.read_bytes(), max_bytes=MAX_KEY_FILE_BYTES, max_depth=4,
                              what=str(path))
    except (OSError, JSONInputError) as exc:
        raise BLSError(f"cannot read the BLS key {path}: {exc}") from None
    if not isinstance(document, dict) or document.get("type") != KEY_TYPE or \
            document.get("v") != 1:
        raise BLSError(f"{path} is not a {KEY_TYPE} v1 file")
    sk = SecretKey(hex_to_int(document.get("sk"), f"{path}: sk") if document.get("sk") else 0)
    if document.get("pk1") != g1_to_json(sk.pk1()):
        raise BLSError(f"{path}: pk1 is not the public key of sk (a damaged file?)")
    return sk


def load_or_create(path: Path) -> tuple[SecretKey, bool]:
    """The key in ``path``, created first when the file does not exist; (key, created)."""
    if path.exists():
        return load(path), False
    return create(path), True
