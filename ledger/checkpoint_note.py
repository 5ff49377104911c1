"""A log checkpoint as a C2SP tlog-checkpoint note (https://c2sp.org/tlog-checkpoint).

The note text is three lines, optionally followed by extension lines:

    <origin>
    <tree size, decimal>
    <root hash, standard base64>

signed as a C2SP signed note (``ledger.signed_note``), so witness tooling can cosign and
compare the checkpoints a publisher anchors. The origin names the log uniquely and carries no
spaces or ``+``; `default_origin` derives it from where the checkpoint is anchored:
``gym-ledger/<chain id>/<ExperienceLedger address>/<on-chain log id>``, or
``gym-ledger/local/<log name>`` for a log not on chain. The root is the RFC 9162 root the
ledger anchors (``rootAt`` on chain), so a note and the chain must agree.

`encode_checkpoint` renders the text, `decode_checkpoint` parses it back (strictly: one way to
write each number), and `verify_checkpoint_note` opens a signed note with the given verifier
keys and returns the checkpoint it signs.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from ledger.signed_note import NoteError, NoteVerifier, OpenedNote, open_note

ORIGIN_PREFIX = "gym-ledger"


@dataclass(frozen=True)
class CheckpointNote:
    origin: str
    size: int
    root: bytes  # 32 bytes
    extensions: tuple[str, ...] = ()


def default_origin(log_name: str, chain_id: int | None = None, contract: str | None = None,
                   log_id: int | None = None) -> str:
    """The origin of a log's checkpoints: its on-chain identity when it has one."""
    if chain_id is not None and contract is not None and log_id is not None:
        return f"{ORIGIN_PREFIX}/{chain_id}/{contract.lower()}/{log_id}"
    return f"{ORIGIN_PREFIX}/local/{log_name}"


def _check_origin(origin: str) -> None:
    if not origin or "+" in origin or any(c.isspace() for c in origin) \
            or not origin.isprintable():
        raise NoteError(f"malformed checkpoint origin {origin!r}: no spaces, no '+'")


def encode_checkpoint(checkpoint: CheckpointNote) -> str:
    """The note text of ``checkpoint`` (to be signed with ``ledger.signed_note.sign_note``)."""
    _check_origin(checkpoint.origin)
    if checkpoint.size < 0 or len(checkpoint.root) != 32:
        raise NoteError("a checkpoint has a size >= 0 and a 32-byte root")
    for line in checkpoint.extensions:
        if not line or "\n" in line or not line.isprintable():
            raise NoteError(f"malformed checkpoint extension line {line!r}")
    lines = [checkpoint.origin, str(checkpoint.size),
             base64.b64encode(checkpoint.root).decode(), *checkpoint.extensions]
    return "\n".join(lines) + "\n"


def decode_checkpoint(text: str) -> CheckpointNote:
    """The checkpoint in a note's text; ``NoteError`` when it is not one."""
    lines = text.split("\n")
    if len(lines) < 4 or lines[-1] != "":
        raise NoteError("malformed checkpoint: origin, size and root lines, each ending in "
                        "a newline")
    origin, size_text, root_text, *extensions = lines[:-1]
    _check_origin(origin)
    if not size_text.isdigit() or not size_text.isascii() \
            or (size_text.startswith("0") and size_text != "0"):
        raise NoteError(f"malformed checkpoint: tree size {size_text!r} is not a decimal number")
    try:
        root = base64.b64decode(root_text, validate=True)
    except (binascii.Error, ValueError):
        raise NoteError("malformed checkpoint: the root hash is not base64") from None
    if len(root) != 32 or base64.b64encode(root).decode() != root_text:
        raise NoteError("malformed checkpoint: the root hash is not 32 bytes in base64")
    if any(not line for line in extensions):
        raise NoteError("malformed checkpoint: an empty extension line")
    return CheckpointNote(origin, int(size_text), root, tuple(extensions))


def verify_checkpoint_note(note: str | bytes, *verifiers: NoteVerifier
                           ) -> tuple[CheckpointNote, OpenedNote]:
    """Open a signed checkpoint note with ``verifiers`` (at least one must have signed it)."""
    opened = open_note(note, *verifiers)
    return decode_checkpoint(opened.text), opened
