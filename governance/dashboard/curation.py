"""What a proposal would do, decoded from its calldata, and each proposed leaf checked anew.

``decode_action`` turns one (target, calldata) of a proposal back into a function call: a
curation is ``ExperienceLedger.appendManyFromLog(curatedLogId, SourcedLeaf[])`` (as
``CurationProposal.calldata`` encodes it) or ``appendFromLog`` (one leaf); every action
(governance parameters, node slashing, ...) is also described in one line by the CLI's
``governance.proposals.ActionDecoder``, against the ABIs of the contracts the client knows.

``check_leaf`` verifies one proposed leaf without trusting anything the proposer wrote (not
the description, not the proposal document): it fetches the entry by the CID in the calldata
from the content store, recomputes its CID and RFC 9162 leaf hash from those bytes, reads the
root that the ExperienceLedger holds for the source log at the claimed size, and checks the
inclusion proof against that root with ``ledger.rfc9162.verify_inclusion``. The result is
``verified`` or the first reason it is not, in words a voter can act on.

``check_curated_leaves`` does the same for the curated library as it stands: each appended
entry re-hashed from the content store, and its inclusion proof, computed from the appended
leaves, verified against the root the contract computed on chain.

Entry bytes come from whoever wrote them to the content store: at most ``MAX_ENTRY_BYTES`` of
them are read, and they are parsed by ``ledger.json_input.parse_json`` (size and depth limits
checked before the decoder runs) before ``decode_entry`` sees them, so that an entry of 200 KB
of ``[[[[`` is a leaf that FAILED, not a dashboard that died.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from eth_abi import decode as abi_decode
from eth_abi.exceptions import DecodingError
from eth_utils import keccak, to_checksum_address
from web3.exceptions import Web3Exception

from governance.client import SourcedLeaf
from governance.dashboard.indexer import CuratedLeaf
from governance.proposals import ActionDecoder
from ledger.chain import ContractRevertError, LedgerContract, LogKind
from ledger.content import ContentStore
from ledger.entries import MAX_ENTRY_BYTES, decode_entry
from ledger.errors import EntryError, LedgerError, VerificationError
from ledger.json_input import JSONInputError, parse_json
from ledger.multiformats import CID, MultiformatError, raw_cid
from ledger.rfc9162 import inclusion_proof, verify_inclusion
from ledger.rfc9162 import leaf_hash as rfc9162_leaf_hash

_SOURCED_LEAF = "(uint256,uint64,uint64,bytes32,bytes,bytes32[])"
APPEND_MANY_SIGNATURE = f"appendManyFromLog(uint256,{_SOURCED_LEAF}[])"
APPEND_ONE_SIGNATURE = "appendFromLog(uint256,uint256,uint64,uint64,bytes32,bytes,bytes32[])"
APPEND_MANY_SELECTOR = keccak(text=APPEND_MANY_SIGNATURE)[:4]
APPEND_ONE_SELECTOR = keccak(text=APPEND_ONE_SIGNATURE)[:4]


@dataclass(frozen=True)
class ProposedAction:
    """One action of a proposal: ``contract.function(args)`` on ``target``."""

    target: str
    contract: str | None  # name of the known contract at ``target``; None: unknown
    function: str | None  # None: calldata that no known ABI decodes
    args: dict[str, Any]
    calldata: bytes
    summary: str  # one readable line (`ActionDecoder`)
    curated_log_id: int | None = None  # curation actions: the library they append to
    leaves: tuple[SourcedLeaf, ...] = ()  # curation actions: the proposed leaves

    @property
    def is_curation(self) -> bool:
        return self.curated_log_id is not None


def _cid_text(data: bytes) -> str:
    """The CID that ``data`` encodes, or its hex when it is not one (the check says so)."""
    try:
        return str(CID.from_bytes(data))
    except MultiformatError:
        return "0x" + data.hex()


def _leaf(source_log_id: int, source_size: int, index: int, leaf_hash: bytes, cid: bytes,
          proof: list[bytes]) -> SourcedLeaf:
    return SourcedLeaf(source_log_id, source_size, index, bytes(leaf_hash), _cid_text(bytes(cid)),
                       tuple(bytes(p) for p in proof))


def decode_action(target: str, calldata: bytes, ledger_address: str,
                  decoder: ActionDecoder) -> ProposedAction:
    """Decode one action: a curation into its leaves here, every action's function, arguments
    and one-line summary by ``decoder`` (the CLI's `ActionDecoder`, ``GovernanceClient.decoder``,
    so `gym gov show` and the dashboard describe a proposal in the same words)."""
    target = to_checksum_address(target)
    decoded = decoder.decode(target, calldata)
    selector, body = calldata[:4], calldata[4:]
    if target == to_checksum_address(ledger_address) and selector in (APPEND_MANY_SELECTOR,
                                                                      APPEND_ONE_SELECTOR):
        try:
            if selector == APPEND_MANY_SELECTOR:
                curated, raw = abi_decode(["uint256", f"{_SOURCED_LEAF}[]"], body)
                leaves = tuple(_leaf(*item) for item in raw)
                name = "appendManyFromLog"
            else:
                curated, *fields = abi_decode(["uint256", "uint256", "uint64", "uint64", "bytes32",
                                               "bytes", "bytes32[]"], body)
                leaves = (_leaf(*fields),)
                name = "appendFromLog"
        except (DecodingError, ValueError):
            pass  # malformed: shown undecoded below
        else:
            return ProposedAction(target, "ExperienceLedger", name,
                                 {"curatedLogId": curated, "leaves": len(leaves)}, calldata,
                                 decoded.summary, curated, leaves)
    shown = {k: ("0x" + v.hex() if isinstance(v, bytes) else v) for k, v in decoded.args.items()}
    return ProposedAction(target, decoded.contract, decoded.function, shown, calldata,
                          decoded.summary)


@dataclass(frozen=True)
class LeafCheck:
    """The dashboard's own verdict on one proposed leaf."""

    leaf: SourcedLeaf
    verified: bool
    reason: str  # why it does not verify; "" when it does
    source_name: str | None = None  # the source log's on-chain name
    anchored_root: bytes | None = None  # rootAt(source log, source size), read from the chain
    computed_leaf_hash: bytes | None = None  # from the fetched entry bytes
    entry_bytes: bytes | None = None
    entry: dict | None = None  # the entry's JSON object, for display
    curated: bool = False  # the curated library already holds this leaf

    @property
    def entry_json(self) -> str:
        return json.dumps(self.entry, indent=2, ensure_ascii=False) if self.entry else ""


def check_leaf(ledger: LedgerContract, content: ContentStore, curated_log_id: int,
               leaf: SourcedLeaf) -> LeafCheck:
    """Verify ``leaf`` against the chain and the content store (see the module docstring)."""
    found: dict[str, Any] = {}

    def failed(reason: str) -> LeafCheck:
        return LeafCheck(leaf, False, reason, **found)

    try:
        found["curated"] = ledger.is_curated(curated_log_id, leaf.leaf_hash)
        if not 1 <= leaf.source_log_id <= ledger.log_count():
            return failed(f"unknown log {leaf.source_log_id}: no log with this id exists on chain")
        info = ledger.log_info(leaf.source_log_id)
        found["source_name"] = info.name
        if info.kind != LogKind.PUBLISHER:
            return failed(f"log {leaf.source_log_id} ({info.name!r}) is a curated log: leaves are "
                          "curated only from publisher logs")
        try:
            root = ledger.root_at(leaf.source_log_id, leaf.source_size)
        except ContractRevertError as exc:
            return failed(f"log {leaf.source_log_id} ({info.name!r}) has no anchored checkpoint of "
                          f"size {leaf.source_size} ({exc.name})")
        found["anchored_root"] = root
    except (LedgerError, Web3Exception, OSError) as exc:
        return failed(f"cannot read the source log from the chain: {exc}")
    try:
        cid = CID.parse(leaf.entry_cid)
    except MultiformatError:
        return failed(f"the entry CID in the calldata is not a CID ({leaf.entry_cid[:80]})")
    try:
        data = read_entry(content, cid)
    except LedgerError as exc:
        return failed(f"entry {cid} cannot be read from the content store ({exc})")
    found["entry_bytes"] = data
    try:
        parsed, unreadable = parse_json(data, max_bytes=MAX_ENTRY_BYTES, what=f"entry {cid}"), None
    except JSONInputError as exc:
        parsed, unreadable = None, exc
    if isinstance(parsed, dict):
        found["entry"] = parsed
    if raw_cid(data) != str(cid.to_v1()):  # entries are raw CIDv1 (DESIGN.md "Entries")
        return failed(f"the bytes fetched for {cid} are not the entry it names (their CID is "
                      f"{raw_cid(data)})")
    computed = rfc9162_leaf_hash(data)
    found["computed_leaf_hash"] = computed
    if computed != leaf.leaf_hash:
        return failed(f"the leaf hash in the calldata (0x{leaf.leaf_hash.hex()}) is not the hash "
                      f"of entry {cid} (0x{computed.hex()})")
    try:
        verify_inclusion(computed, leaf.leaf_index, leaf.source_size, list(leaf.inclusion_proof),
                         root)
    except VerificationError as exc:
        detail = f" (expected root {exc.expected}, proof leads to {exc.computed})" \
            if exc.expected else ""
        return failed(f"the inclusion proof of leaf {leaf.leaf_index} does not verify against the "
                      f"root anchored for log {leaf.source_log_id} at size {leaf.source_size}: "
                      f"{exc}{detail}")
    if unreadable is not None:
        return failed(f"entry {cid} is in the log but is not a valid entry ({unreadable})")
    try:
        decode_entry(data)
    except EntryError as exc:
        return failed(f"entry {cid} is in the log but is not a valid entry ({exc})")
    return LeafCheck(leaf, True, "", **found)


def read_entry(content: ContentStore, cid: CID | str) -> bytes:
    """The bytes stored under ``cid``, or ``EntryError`` past ``MAX_ENTRY_BYTES`` (a CID can
    name a file of any size: no more than one entry's worth is read)."""
    data = bytearray()
    for chunk in content.cat_iter(str(cid)):
        data += chunk
        if len(data) > MAX_ENTRY_BYTES:
            raise EntryError(f"{cid} holds more than {MAX_ENTRY_BYTES} bytes, the limit of an "
                             "entry")
    return bytes(data)


@dataclass(frozen=True)
class CuratedLeafCheck:
    """The dashboard's verdict on one leaf of the curated library."""

    leaf: CuratedLeaf
    verified: bool
    reason: str
    entry: dict | None = None
    proof_length: int | None = None


def check_curated_leaves(content: ContentStore, leaves: list[CuratedLeaf], size: int,
                         root: bytes) -> list[CuratedLeafCheck]:
    """Check every appended leaf against the on-chain checkpoint (``size``, ``root``)."""
    hashes = [leaf.leaf_hash for leaf in leaves]
    return [_check_curated_leaf(content, leaf, hashes, size, root) for leaf in leaves]


def _check_curated_leaf(content: ContentStore, leaf: CuratedLeaf, hashes: list[bytes],
                        size: int, root: bytes) -> CuratedLeafCheck:
    if len(hashes) != size:
        return CuratedLeafCheck(leaf, False, f"{len(hashes)} leaves were appended by events, "
                                f"the contract says {size}")
    if leaf.entry_cid is None:
        return CuratedLeafCheck(leaf, False, "the event's entry CID is not a CID")
    try:
        data = read_entry(content, leaf.entry_cid)
    except EntryError as exc:
        return CuratedLeafCheck(leaf, False, str(exc))
    except LedgerError as exc:
        return CuratedLeafCheck(leaf, False, f"entry {leaf.entry_cid} is not in the content "
                                f"store ({exc})")
    try:
        parse_json(data, max_bytes=MAX_ENTRY_BYTES, what="the entry")
        entry = decode_entry(data).model_dump(mode="json", exclude_none=True)
    except (JSONInputError, EntryError) as exc:
        return CuratedLeafCheck(leaf, False, f"not a valid entry ({exc})")
    if rfc9162_leaf_hash(data) != leaf.leaf_hash:
        return CuratedLeafCheck(leaf, False, "the entry bytes do not hash to the appended leaf",
                                entry)
    proof = inclusion_proof(hashes, leaf.index)
    try:  # against the root the contract computed, not one recomputed here
        verify_inclusion(leaf.leaf_hash, leaf.index, size, proof, root)
    except VerificationError as exc:
        return CuratedLeafCheck(leaf, False, f"not included under the on-chain root ({exc})",
                                entry)
    return CuratedLeafCheck(leaf, True, "", entry, len(proof))
