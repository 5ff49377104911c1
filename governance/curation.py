"""Curation proposals: leaves of a local publisher log, proven against its anchored checkpoint.

A curation proposal is one action: ``ExperienceLedger.appendManyFromLog(curatedLogId,
leaves)`` on the curated library the timelock owns. ``build_curation`` makes it from a local
publisher log (``ledger.LogStore``): it takes the log's last anchored checkpoint covering the
requested indices, checks that the chain holds that checkpoint's root, fetches every entry
from the content store, computes each RFC 9162 inclusion proof against the checkpoint and
verifies it locally (the ledger verifies it again on-chain when the timelock executes). The
entry bodies go into one JSON document on the content store, whose CID the proposal's
description names beside a human summary, so voters read what they vote on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from eth_abi import encode as abi_encode
from eth_utils import keccak

from governance.errors import CurationError
from governance.reverts import governance_error
from ledger.chain import LedgerContract, LogKind
from ledger.entries import MAX_ENTRY_BYTES, EntryError
from ledger.errors import LedgerError, NotFoundError, VerificationError
from ledger.evm import ChainError
from ledger.json_input import JSONInputError, parse_json
from ledger.multiformats import CID
from ledger.publish import PublishError, check_chain_binding
from ledger.rfc9162 import verify_inclusion

if TYPE_CHECKING:
    from ledger.content import ContentStore
    from ledger.logstore import LogStore

DOCUMENT_TYPE = "curation-proposal"
_DOCUMENT_LINE = re.compile(r"^Proposal document: ipfs://(\S+)$", re.MULTILINE)
_APPEND_MANY = "appendManyFromLog(uint256,(uint256,uint64,uint64,bytes32,bytes,bytes32[])[])"
_APPEND_MANY_TYPES = ["uint256", "(uint256,uint64,uint64,bytes32,bytes,bytes32[])[]"]


@dataclass(frozen=True)
class SourcedLeaf:
    """IExperienceLedger.SourcedLeaf: leaf ``leaf_index`` of publisher log ``source_log_id``
    at its anchored checkpoint ``source_size``, with its audit path."""

    source_log_id: int
    source_size: int
    leaf_index: int
    leaf_hash: bytes
    entry_cid: str
    inclusion_proof: tuple[bytes, ...]

    def as_abi(self) -> tuple:
        return (self.source_log_id, self.source_size, self.leaf_index, self.leaf_hash,
                CID.parse(self.entry_cid).to_bytes(), list(self.inclusion_proof))


@dataclass(frozen=True)
class CurationProposal:
    """What ``propose`` sends: one ``appendManyFromLog`` call on the curated library."""

    ledger_address: str
    curated_log_id: int
    leaves: tuple[SourcedLeaf, ...]
    description: str
    document_cid: str  # the JSON document with the entry bodies, on the content store
    source_log: str  # local name of the publisher log

    @property
    def calldata(self) -> bytes:
        selector = keccak(text=_APPEND_MANY)[:4]
        return selector + abi_encode(_APPEND_MANY_TYPES,
                                     [self.curated_log_id, [leaf.as_abi() for leaf in self.leaves]])

    @property
    def actions(self) -> tuple[list[str], list[int], list[bytes]]:
        """(targets, values, calldatas) as the governor takes them."""
        return [self.ledger_address], [0], [self.calldata]


def document_cid_of(description: str) -> str | None:
    """The CID of the proposal document that a curation proposal's description names."""
    found = _DOCUMENT_LINE.search(description)
    return found.group(1) if found else None


def _entry_summary(index: int, cid: str, obj: dict) -> str:
    kind = obj.get("type", "?")
    if kind == "experience":
        text = obj.get("text", "")
        text = text if len(text) <= 120 else text[:117] + "..."
        return f"- leaf {index}: experience {obj.get('op')} [{obj.get('domain')}] {text!r} ({cid})"
    return f"- leaf {index}: {kind} entry ({cid})"


def build_curation(ledger: LedgerContract, curated_log_id: int, store: LogStore,
                   content: ContentStore, log_name: str, indices: Sequence[int],
                   description: str = "", evidence: Sequence[str] = ()) -> CurationProposal:
    """A proposal to curate leaves ``indices`` of publisher log ``log_name`` into curated log
    ``curated_log_id`` of ``ledger``, from the local log store (the publisher's own host, or
    any host that holds a copy). Where the store does not hold the log, see
    ``build_curation_from_chain``: the chain and the content endpoint suffice.

    Raises ``CurationError`` for an unknown or unpublished log, an index beyond the last
    anchored checkpoint, a checkpoint the chain does not hold, an entry the content store
    lacks, a proof that does not verify, or a leaf already curated; ``EvidenceError`` for an
    ``evidence`` CID that is not an evaluation of the library these leaves add
    (``governance.evidence``).
    """
    _check_indices(indices)
    try:
        log = store.get_log(log_name)
    except NotFoundError:
        known = ", ".join(info.name for info in store.list_logs()) or "none"
        raise CurationError(f"unknown log {log_name!r} (logs here: {known}); see "
                            "`gym ledger list`") from None
    try:  # a log created before a chain reset names another chain's log id
        chain_log_id = check_chain_binding(store, ledger, log_name)
    except PublishError as exc:
        raise CurationError(str(exc)) from None
    checkpoints = store.checkpoints(log_name)
    anchored = checkpoints[-1].size if checkpoints else 0
    missing = [i for i in indices if not 0 <= i < log.size]
    if missing:
        raise CurationError(f"log {log_name!r} has no leaf {missing[0]}: it has "
                            f"{_leaves(log.size)}")
    unanchored = [i for i in indices if i >= anchored]
    if unanchored:
        raise CurationError(
            f"leaf {unanchored[0]} of log {log_name!r} is not anchored yet: the log has "
            f"{_leaves(log.size)}, its last anchored checkpoint covers {_leaves(anchored)}; run "
            f"`gym ledger publish {log_name}` to anchor the rest")
    checkpoint = checkpoints[-1]
    try:
        info = ledger.log_info(chain_log_id)
        chain_root = ledger.root_at(chain_log_id, checkpoint.size)
    except LedgerError as exc:
        raise CurationError(f"cannot read log {log_name!r} from the chain: {exc}") from None
    if info.kind != LogKind.PUBLISHER:
        raise CurationError(f"log {log_name!r} is on-chain log {chain_log_id}, a "
                            "curated log: only publisher logs can be curated from")
    if chain_root != checkpoint.root:
        raise CurationError(
            f"the chain does not hold checkpoint {checkpoint.size} of log {log_name!r} as "
            f"recorded here (chain root 0x{chain_root.hex()}, local 0x{checkpoint.root.hex()}); "
            f"check with `gym audit {log_name}`")

    picked = []
    for index in indices:
        leaf = store.leaf(log_name, index)
        try:
            data = content.cat(leaf.cid)
        except LedgerError as exc:
            raise CurationError(f"leaf {index} of {log_name!r}: entry {leaf.cid} cannot be "
                                f"read from the content store ({exc})") from None
        picked.append(_Picked(index, leaf.cid, leaf.leaf_hash, data,
                              tuple(store.inclusion_proof(log_name, index, checkpoint.size))))
    return _proposal(ledger, curated_log_id, content, log_name, chain_log_id, checkpoint.size,
                     checkpoint.root, picked, description, evidence)


def build_curation_from_chain(ledger: LedgerContract, curated_log_id: int,
                              content: ContentStore, log_id: int, indices: Sequence[int],
                              description: str = "", *, from_block: int = 0,
                              progress: Callable[[int, int], None] | None = None,
                              evidence: Sequence[str] = ()) -> CurationProposal:
    """``build_curation`` for a token holder on any host: publisher log ``log_id`` replayed
    from the chain's events and the content endpoint (``ledger.audit.audit_log``, every entry
    re-hashed and the anchored roots recomputed), up to its last anchored checkpoint; the
    inclusion proofs are computed from the replayed leaves (``ledger.published``). Raises ``CurationError`` as
    ``build_curation`` does, and for a log that does not replay cleanly (naming its first
    discrepancy)."""
    from ledger.published import read_published_log

    _check_indices(indices)
    try:
        info = ledger.log_info(log_id)
    except LedgerError as exc:
        raise CurationError(f"cannot read log {log_id} from the chain: {exc}") from None
    if info.kind != LogKind.PUBLISHER:
        raise CurationError(f"on-chain log {log_id} ({info.name!r}) is a curated log: only "
                            "publisher logs can be curated from")
    missing = [i for i in indices if not 0 <= i < info.size]
    if missing:
        raise CurationError(f"log {info.name!r} (on-chain log {log_id}) has no anchored leaf "
                            f"{missing[0]}: its last checkpoint covers {_leaves(info.size)}")
    wanted, entries = set(indices), {}

    def keep(index: int, cid: str, data: bytes) -> None:
        if index in wanted:
            entries[index] = (cid, data)

    try:
        published = read_published_log(ledger, content, log_id, from_block=from_block,
                                       keep=keep, progress=progress)
    except LedgerError as exc:
        raise CurationError(str(exc)) from None
    picked = [_Picked(i, entries[i][0], published.leaf_hashes[i], entries[i][1],
                      tuple(published.proof(i))) for i in indices]
    return _proposal(ledger, curated_log_id, content, info.name, log_id, info.size, info.root,
                     picked, description, evidence)


def _check_indices(indices: Sequence[int]) -> None:
    if not indices:
        raise CurationError("name at least one leaf index to curate")
    if len(set(indices)) != len(indices):
        raise CurationError(f"leaf indices repeat: {list(indices)}")


def _leaves(n: int) -> str:
    return f"{n} leaves (0-{n - 1})" if n > 1 else "1 leaf (0)" if n else "no leaves"


@dataclass(frozen=True)
class _Picked:
    """A leaf to curate: its index, entry CID and leaf hash, the entry's bytes, its proof."""

    index: int
    cid: str
    leaf_hash: bytes
    data: bytes
    proof: tuple[bytes, ...]


def _proposal(ledger: LedgerContract, curated_log_id: int, content: ContentStore,
              log_name: str, chain_log_id: int, size: int, root: bytes,
              picked: Sequence[_Picked], description: str, evidence: Sequence[str] = ()
              ) -> CurationProposal:
    """The proposal for ``picked`` leaves of log ``chain_log_id`` at its checkpoint
    ``(size, root)``: each proof checked, each leaf not yet curated, each ``evidence`` an
    evaluation of what the leaves add, the document stored."""
    from governance.evidence import (
        MAX_EVIDENCE,
        EvidenceError,
        added_experiences,
        check_subject,
        description_lines,
        read_evaluation,
    )

    if len(evidence) > MAX_EVIDENCE or len(set(evidence)) != len(evidence):
        raise EvidenceError("malformed", f"name at most {MAX_EVIDENCE} evaluations, each once")
    try:
        experiences = added_experiences([(leaf.cid, leaf.data) for leaf in picked])
    except (EntryError, ValueError) as exc:
        raise CurationError(f"the leaves do not fold into a library: {exc}") from None
    evaluations = []
    for cid in evidence:
        entry = read_evaluation(content, cid)
        check_subject(entry, cid, chain_log_id, experiences)
        evaluations.append((cid, entry))
    leaves, bodies, lines = [], [], []
    for leaf in picked:
        index = leaf.index
        try:
            verify_inclusion(leaf.leaf_hash, index, size, list(leaf.proof), root)
        except VerificationError as exc:
            raise CurationError(f"leaf {index} of {log_name!r}: its inclusion proof does not "
                                f"verify against the anchored root ({exc})") from None
        try:
            curated = ledger.is_curated(curated_log_id, leaf.leaf_hash)
        except ChainError as exc:
            raise governance_error(exc) from None
        if curated:
            raise CurationError(f"leaf {index} of {log_name!r} ({leaf.cid}) is already in "
                                "the curated library")
        try:
            body = parse_json(leaf.data, max_bytes=MAX_ENTRY_BYTES, what=f"entry {leaf.cid}")
        except JSONInputError as exc:
            raise CurationError(f"leaf {index} of {log_name!r}: {exc}") from None
        if not isinstance(body, dict):
            raise CurationError(f"leaf {index} of {log_name!r}: entry {leaf.cid} is not a "
                                "JSON object")
        leaves.append(SourcedLeaf(chain_log_id, size, index, leaf.leaf_hash, leaf.cid,
                                  leaf.proof))
        bodies.append({"index": index, "cid": leaf.cid, "leaf_hash": "0x" + leaf.leaf_hash.hex(),
                       "entry": body})
        lines.append(_entry_summary(index, leaf.cid, body))

    document = {
        "type": DOCUMENT_TYPE, "v": 1,
        "curated_log_id": curated_log_id,
        "source": {"log": log_name, "log_id": chain_log_id, "size": size,
                   "root": "0x" + root.hex()},
        "entries": bodies,
        **({"evidence": list(evidence)} if evidence else {}),
    }
    document_cid = content.add_file(json.dumps(document, sort_keys=True, indent=1).encode(),
                                    pin=True)
    n = len(leaves)
    text = "\n".join([
        f"# Curate {n} entr{'y' if n == 1 else 'ies'} from {log_name}",
        "",
        *([description.strip(), ""] if description.strip() else []),
        (f"Source: publisher log {log_name} (on-chain log {chain_log_id}), anchored "
         f"checkpoint of size {size}, root 0x{root.hex()}"),
        f"Target: curated library (on-chain log {curated_log_id})",
        "Entries:",
        *lines,
        "",
        *((description_lines(evaluations) + [""]) if evaluations else
          ["Evidence: none (no evaluation of these entries was named)", ""]),
        f"Proposal document: ipfs://{document_cid}",
    ])
    return CurationProposal(ledger.address, curated_log_id, tuple(leaves), text,
                            document_cid, log_name)
