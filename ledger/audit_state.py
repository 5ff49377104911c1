"""Resumable audits: where a publisher log's replay stopped, so that the next one continues.

Between two entries, the whole state of a replay (``ledger.audit``) is small: the last
checkpoint passed (size, root), how far into the next batch it got, the RFC 9162 tree as the
roots of its perfect subtrees (at most 64 hashes), and the report so far (the checkpoints
checked and the discrepancies found). ``gym audit`` saves it as JSON at most once a second at
a chunk boundary (every 1,024 entries of a batch) and at each checkpoint, and ``--resume``
loads it. A state names the chain, the ledger contract and the log it belongs to; the replay
refuses one whose last checkpoint is not on chain any more (a reorg or another chain).

    {"type": "audit-state", "v": 1, "chain_id": 31337, "ledger": "0x…", "log_id": 3,
     "prev_size": 1000, "prev_root": "0x…", "position": 2048, "flagged_at": 0,
     "tree_size": 3048, "tree": ["0x…", …], "broken_at": null, "diverged_at": null,
     "leaves": 3048, "checkpoints": [<as in gym audit --json>], "discrepancies": [<same>],
     "receipts": 0}

``receipts`` counts the receipts the caller's entry hook had collected: their signatures are
checked over the whole log at the end, so a state with receipts is not resumed (the replay
starts over). The file is local, written by this machine, but read as any input: bounded in
size and depth, every field checked (``AuditStateError``).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ledger.errors import LedgerError
from ledger.json_input import JSONInputError, parse_json

STATE_TYPE = "audit-state"
STATE_VERSION = 1
MAX_STATE_BYTES = 64 * 1024 * 1024
_MAX_TREE = 64  # a tree of up to 2**64 leaves


class AuditStateError(LedgerError, ValueError):
    """A saved audit state that cannot be used (malformed, or for another log or chain)."""


@dataclass
class AuditState:
    chain_id: int
    ledger: str  # the ExperienceLedger address
    log_id: int
    prev_size: int = 0  # the last checkpoint fully replayed
    prev_root: str = "0x" + "00" * 32
    position: int = 0  # entries of the next checkpoint's batch already replayed
    flagged_at: int = 0  # discrepancies found before the checkpoint in progress
    tree_size: int = 0
    tree: list[str] = field(default_factory=list)  # roots of the perfect subtrees, left first
    broken_at: int | None = None
    diverged_at: int | None = None
    leaves: int = 0
    checkpoints: list[dict] = field(default_factory=list)
    discrepancies: list[dict] = field(default_factory=list)
    receipts: int = 0

    def belongs_to(self, chain_id: int, ledger: str, log_id: int) -> bool:
        return (self.chain_id, self.ledger.lower(), self.log_id) == (chain_id, ledger.lower(),
                                                                     log_id)


def encode_state(state: AuditState) -> bytes:
    return json.dumps({"type": STATE_TYPE, "v": STATE_VERSION, **asdict(state)},
                      separators=(",", ":")).encode()


def _int(obj: dict, name: str, *, optional: bool = False) -> int | None:
    value = obj.get(name)
    if value is None and optional:
        return None
    if type(value) is not int or value < 0:
        raise AuditStateError(f"audit state: {name} must be a non-negative integer, got "
                              f"{value!r}")
    return value


def _hash(value: object, name: str) -> str:
    if not (isinstance(value, str) and len(value) == 66 and value.startswith("0x")):
        raise AuditStateError(f"audit state: {name} must be a 0x-prefixed 32-byte hash")
    try:
        bytes.fromhex(value[2:])
    except ValueError:
        raise AuditStateError(f"audit state: {name} is not hex") from None
    return value


# The records ``gym audit --json`` writes (``ledger.audit.audit_report_json``): field -> types.
_SCALAR = (str, int, type(None))
_CHECKPOINT = {"size": (int,), "root": (str,), "tx_hash": (str,), "block_number": (int,),
               "batch_cid": (str, type(None)), "ok": (bool,)}
_DISCREPANCY = {"kind": (str,), "message": (str,), "checkpoint": (int, type(None)),
                "leaf": (int, type(None)), "entry_cid": (str, type(None)),
                "expected": _SCALAR, "computed": _SCALAR}


def _record(obj: dict, where: str, fields: dict[str, tuple[type, ...]]) -> None:
    if set(obj) != set(fields):
        raise AuditStateError(f"audit state: {where} must have exactly the fields "
                              f"{', '.join(sorted(fields))}")
    for name, types in fields.items():
        value = obj[name]
        if type(value) not in types or (type(value) is int and value < 0
                                         and name not in ("expected", "computed")):
            raise AuditStateError(f"audit state: {where}.{name} is {value!r}")


def decode_state(data: bytes) -> AuditState:
    try:
        obj = parse_json(data, max_bytes=MAX_STATE_BYTES, max_depth=4, what="audit state")
    except JSONInputError as exc:
        raise AuditStateError(f"audit state: {exc}") from None
    if not isinstance(obj, dict) or obj.get("type") != STATE_TYPE or obj.get("v") != STATE_VERSION:
        raise AuditStateError(f"not an {STATE_TYPE} v{STATE_VERSION} document")
    tree = obj.get("tree")
    if not isinstance(tree, list) or len(tree) > _MAX_TREE:
        raise AuditStateError(f"audit state: tree must be a list of at most {_MAX_TREE} hashes")
    for name in ("checkpoints", "discrepancies"):
        if not isinstance(obj.get(name), list) or not all(isinstance(x, dict)
                                                            for x in obj[name]):
            raise AuditStateError(f"audit state: {name} must be a list of objects")
    for number, checkpoint in enumerate(obj["checkpoints"]):
        _record(checkpoint, f"checkpoints[{number}]", _CHECKPOINT)
        _hash(checkpoint["root"], f"checkpoints[{number}].root")
    for number, discrepancy in enumerate(obj["discrepancies"]):
        _record(discrepancy, f"discrepancies[{number}]", _DISCREPANCY)
    ledger = obj.get("ledger")
    if not (isinstance(ledger, str) and len(ledger) == 42 and ledger.startswith("0x")):
        raise AuditStateError("audit state: ledger must be a 0x-prefixed address")
    state = AuditState(
        chain_id=_int(obj, "chain_id"), ledger=ledger, log_id=_int(obj, "log_id"),
        prev_size=_int(obj, "prev_size"), prev_root=_hash(obj.get("prev_root"), "prev_root"),
        position=_int(obj, "position"), flagged_at=_int(obj, "flagged_at"),
        tree_size=_int(obj, "tree_size"), tree=[_hash(h, "tree") for h in tree],
        broken_at=_int(obj, "broken_at", optional=True),
        diverged_at=_int(obj, "diverged_at", optional=True), leaves=_int(obj, "leaves"),
        checkpoints=obj["checkpoints"], discrepancies=obj["discrepancies"],
        receipts=_int(obj, "receipts"))
    if state.tree_size.bit_count() != len(state.tree):
        raise AuditStateError(f"audit state: a tree of {state.tree_size} leaves has "
                              f"{state.tree_size.bit_count()} subtree roots, not {len(state.tree)}")
    if state.flagged_at > len(state.discrepancies):
        raise AuditStateError("audit state: flagged_at is past the discrepancies it lists")
    return state


def load_state(path: Path) -> AuditState | None:
    """The state saved at ``path``, or None when there is none."""
    try:
        if path.stat().st_size > MAX_STATE_BYTES:
            raise AuditStateError(f"{path}: larger than {MAX_STATE_BYTES} bytes")
        return decode_state(path.read_bytes())
    except FileNotFoundError:
        return None


def save_state(path: Path, state: AuditState) -> None:
    """Write ``state`` to ``path`` atomically (a crash leaves the previous state)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_bytes(encode_state(state))
    os.replace(temporary, path)
