"""The content service's peer identity, for the Kubo RPC's ``id``: an Ed25519 key kept beside
the store (``<store>/identity.key``, made on first use, mode 0600), its libp2p peer ID and
public key as Kubo prints them.

libp2p peer IDs (https://github.com/libp2p/specs/blob/master/peer-ids/peer-ids.md): the public
key as the ``PublicKey`` protobuf (``Type`` = 1, Ed25519; ``Data`` = the 32 key bytes), and
the peer ID is that protobuf's identity multihash (it is under 42 bytes) in base58btc, so an
Ed25519 peer ID reads ``12D3KooW…``. The service runs no libp2p host, so the key signs
nothing: it only gives the node a stable name across restarts.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ledger.multiformats import b58encode

IDENTITY_FILE = "identity.key"
_ED25519_PUBLIC_KEY_PREFIX = b"\x08\x01\x12\x20"  # PublicKey{Type: Ed25519, Data: 32 bytes}


@dataclass(frozen=True)
class PeerIdentity:
    peer_id: str  # base58btc identity multihash, 12D3KooW…
    public_key: str  # base64 (padded) of the PublicKey protobuf, CAESI…


def identity_of(public_key: bytes) -> PeerIdentity:
    """The peer ID and ``PublicKey`` field of an Ed25519 ``public_key`` (32 bytes)."""
    if len(public_key) != 32:
        raise ValueError("an Ed25519 public key is 32 bytes")
    protobuf = _ED25519_PUBLIC_KEY_PREFIX + public_key
    multihash = b"\x00" + bytes((len(protobuf),)) + protobuf  # identity hash
    return PeerIdentity(b58encode(multihash), base64.b64encode(protobuf).decode("ascii"))


def load_identity(store_root: str | os.PathLike) -> PeerIdentity:
    """The store's identity, its key made on first use (a damaged key file is an error)."""
    path = Path(store_root) / IDENTITY_FILE
    if not path.exists():
        raw = Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
            serialization.NoEncryption())
        fd = os.open(path.with_suffix(".tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(raw)
        try:
            os.link(path.with_suffix(".tmp"), path)  # the first writer wins a race
        except FileExistsError:
            pass
        path.with_suffix(".tmp").unlink(missing_ok=True)
    raw = path.read_bytes()
    if len(raw) != 32:
        raise ValueError(f"{path}: not an Ed25519 private key (32 bytes)")
    public = Ed25519PrivateKey.from_private_bytes(raw).public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return identity_of(public)
