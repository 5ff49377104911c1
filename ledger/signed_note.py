"""C2SP signed notes (https://c2sp.org/signed-note), Ed25519: keys, signing, opening.

A note is UTF-8 text ending in a newline, then a blank line, then one signature line per
signer: ``— <key name> <base64(key ID || signature)>``. The key ID is the first four bytes of
``SHA-256(name || "\\n" || 0x01 || public key)`` (0x01: Ed25519), big-endian. Keys travel as
text:

- verifier key ``<name>+<key ID, 8 hex digits>+<base64(0x01 || 32-byte public key)>``;
- signer key ``PRIVATE+KEY+<name>+<key ID>+<base64(0x01 || 32-byte seed)>``.

This is the format witness tooling and the Go checksum database use (tests check it against
the vectors of Go's ``golang.org/x/mod/sumdb/note``). `sign_note` signs a text with one or more
signers (an existing signature by the same key is replaced); `open_note` parses a signed note,
verifies every signature whose key it is given and returns the text with the verified and the
unverified signatures. Anything malformed, an invalid signature by a known key, or a note
without any verified signature raises `NoteError`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import struct
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ledger.errors import LedgerError

ALG_ED25519 = 0x01
SIGNATURE_PREFIX = "\u2014 "  # an em dash and a space open every signature line
MAX_SIGNATURES = 100


class NoteError(LedgerError):
    """A malformed note or key, or a signature that does not verify."""


@dataclass(frozen=True)
class NoteSignature:
    name: str
    key_id: int
    base64: str  # base64(key ID || signature), as on the line

    def line(self) -> str:
        return f"{SIGNATURE_PREFIX}{self.name} {self.base64}\n"


@dataclass(frozen=True)
class OpenedNote:
    text: str
    verified: tuple[NoteSignature, ...]
    unverified: tuple[NoteSignature, ...]  # by keys the caller did not give


def key_id(name: str, public_key: bytes) -> int:
    """The four-byte key ID of an Ed25519 ``public_key`` named ``name``."""
    digest = hashlib.sha256(name.encode() + b"\n" + bytes([ALG_ED25519]) + public_key).digest()
    return struct.unpack(">I", digest[:4])[0]


def _check_name(name: str) -> None:
    if not name or "+" in name or any(c.isspace() for c in name) or not name.isprintable():
        raise NoteError(f"malformed key name {name!r}: non-empty, no spaces, no '+'")


def _key_bytes(text: str, what: str) -> bytes:
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise NoteError(f"malformed {what}: not base64") from None
    if len(raw) != 33 or raw[0] != ALG_ED25519:
        raise NoteError(f"malformed {what}: not an Ed25519 key (0x01 and 32 bytes)")
    return raw[1:]


def _parse_key_id(text: str, what: str) -> int:
    if len(text) != 8 or any(c not in "0123456789abcdef" for c in text):
        raise NoteError(f"malformed {what}: the key ID is 8 lowercase hex digits")
    return int(text, 16)


class NoteVerifier:
    """An Ed25519 verifier key (``name+keyid+base64``)."""

    def __init__(self, vkey: str) -> None:
        parts = vkey.split("+", 2)
        if len(parts) != 3:
            raise NoteError("malformed verifier key: want name+keyid+base64")
        name, hash_text, key_text = parts
        _check_name(name)
        self.name, self.key_id = name, _parse_key_id(hash_text, "verifier key")
        self.public_key = _key_bytes(key_text, "verifier key")
        if key_id(name, self.public_key) != self.key_id:
            raise NoteError("malformed verifier key: its key ID does not match its key")
        self._key = Ed25519PublicKey.from_public_bytes(self.public_key)
        self.vkey = vkey

    def verify(self, message: bytes, signature: bytes) -> bool:
        try:
            self._key.verify(signature, message)
        except InvalidSignature:
            return False
        return True


class NoteSigner:
    """An Ed25519 signer key (``PRIVATE+KEY+name+keyid+base64``); never printed."""

    def __init__(self, skey: str) -> None:
        parts = skey.split("+", 4)
        if len(parts) != 5 or parts[:2] != ["PRIVATE", "KEY"]:
            raise NoteError("malformed signer key: want PRIVATE+KEY+name+keyid+base64")
        name, hash_text, key_text = parts[2:]
        _check_name(name)
        self.name, self.key_id = name, _parse_key_id(hash_text, "signer key")
        self._private = Ed25519PrivateKey.from_private_bytes(_key_bytes(key_text, "signer key"))
        public = self._private.public_key().public_bytes_raw()
        if key_id(name, public) != self.key_id:
            raise NoteError("malformed signer key: its key ID does not match its key")
        self.vkey = (f"{name}+{self.key_id:08x}+"
                     + base64.b64encode(bytes([ALG_ED25519]) + public).decode())

    def __repr__(self) -> str:
        return f"NoteSigner({self.vkey})"

    def sign(self, message: bytes) -> bytes:
        return self._private.sign(message)


def generate_key(name: str) -> tuple[str, str]:
    """A new key pair ``(signer key, verifier key)`` named ``name``."""
    _check_name(name)
    seed = os.urandom(32)
    public = Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes_raw()
    ident = f"{name}+{key_id(name, public):08x}+"
    return ("PRIVATE+KEY+" + ident + base64.b64encode(bytes([ALG_ED25519]) + seed).decode(),
            ident + base64.b64encode(bytes([ALG_ED25519]) + public).decode())


def _check_text(text: str) -> None:
    if not text.endswith("\n") or len(text) < 2:
        raise NoteError("malformed note: the text must end with a newline")
    if "\n\n" in text:
        raise NoteError("malformed note: the text cannot hold a blank line")
    if any(c != "\n" and not c.isprintable() for c in text):
        raise NoteError("malformed note: control characters in the text")


def sign_note(text: str, *signers: NoteSigner,
              existing: tuple[NoteSignature, ...] = ()) -> str:
    """``text`` signed by ``signers``, after the ``existing`` signatures of other keys."""
    _check_text(text)
    message = text.encode()
    new = [NoteSignature(s.name, s.key_id, base64.b64encode(
        struct.pack(">I", s.key_id) + s.sign(message)).decode()) for s in signers]
    ours = {(s.name, s.key_id) for s in new}
    kept = [s for s in existing if (s.name, s.key_id) not in ours]
    return text + "\n" + "".join(s.line() for s in kept + new)


def open_note(note: str | bytes, *verifiers: NoteVerifier) -> OpenedNote:
    """Parse ``note`` and verify each signature by a key in ``verifiers``."""
    if isinstance(note, bytes):
        try:
            note = note.decode("utf-8")
        except UnicodeDecodeError:
            raise NoteError("malformed note: not UTF-8") from None
    split = note.rfind("\n\n")
    if split < 0 or not note.endswith("\n"):
        raise NoteError("malformed note: no signature block")
    text, block = note[:split + 1], note[split + 2:]
    _check_text(text)
    lines = block.split("\n")[:-1]
    if not lines or len(lines) > MAX_SIGNATURES:
        raise NoteError(f"malformed note: 1 to {MAX_SIGNATURES} signature lines")
    known = {}
    for verifier in verifiers:
        slot = (verifier.name, verifier.key_id)
        known[slot] = None if slot in known else verifier  # None: ambiguous
    message = text.encode()
    verified: list[NoteSignature] = []
    unverified: list[NoteSignature] = []
    for line in lines:
        if not line.startswith(SIGNATURE_PREFIX):
            raise NoteError(f"malformed note: {line!r} is not a signature line")
        fields = line[len(SIGNATURE_PREFIX):].split(" ")
        if len(fields) != 2:
            raise NoteError(f"malformed note: {line!r} is not a signature line")
        name, encoded = fields
        _check_name(name)
        try:
            raw = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise NoteError(f"malformed note: the signature of {name} is not base64") from None
        if len(raw) < 5:
            raise NoteError(f"malformed note: the signature of {name} is too short")
        signature = NoteSignature(name, struct.unpack(">I", raw[:4])[0], encoded)
        slot = (name, signature.key_id)
        if slot in known and known[slot] is None:
            raise NoteError(f"ambiguous key {name}+{signature.key_id:08x}")
        verifier = known.get(slot)
        if verifier is None:
            if signature not in unverified:
                unverified.append(signature)
        elif not verifier.verify(message, raw[4:]):
            raise NoteError(f"invalid signature for key {name}+{signature.key_id:08x}")
        elif signature not in verified:
            verified.append(signature)
    if not verified:
        raise NoteError("note has no verifiable signatures")
    return OpenedNote(text, tuple(verified), tuple(unverified))
