"""Inclusion proof documents: one leaf's proof, self-contained, checkable offline.

``gym ledger proof`` writes them and ``gym verify proof`` checks them.

The document is the JSON object::

    {"type": "inclusion-proof", "v": 1, "log": <name>, "log_id": <chain id or null>,
     "index": i, "size": n, "leaf_hash": "0x..", "entry_cid": "bafkrei..",
     "audit_path": ["0x..", ...], "root": "0x..",
     "anchor": {"chain_id", "contract", "tx_hash", "block_number", "batch_cid"} or null,
     "entry": <the entry's JSON object>}            # optional

``verify_proof_document`` checks the audit path from the leaf hash to the root, and when
``entry`` is present that its canonical bytes have that CID and that leaf hash and form a
valid entry. Without ``entry`` the document's ``entry_cid`` is a claim: nothing in the audit
path binds it to the leaf (the leaf hash is of the entry's bytes, not of its CID), so
``VerifiedProof.entry_checked`` is False until ``verify_proof_entry`` checks bytes obtained
elsewhere (a file, the content store). Whether the root is really anchored is a question for
the chain (``rootAt``).

An audit path does not pin the tree size by itself (the same path can prove a leaf at a
neighbouring size); ``check_anchored_root`` settles it against ``rootAt`` on chain.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import rfc8785

from ledger.entries import MAX_ENTRY_BYTES, MAX_ENTRY_DEPTH, decode_entry, entry_cid
from ledger.errors import EntryError, LedgerError, VerificationError
from ledger.json_input import JSONInputError, parse_json
from ledger.multiformats import CID, RAW, SHA2_256, MultiformatError
from ledger.rfc9162 import verify_inclusion

if TYPE_CHECKING:
    from ledger.chain import LedgerContract
    from ledger.content import ContentStore
    from ledger.logstore import LogStore
    from ledger.published import PublishedLog


def _hex(value: bytes) -> str:
    return "0x" + value.hex()


PROOF_TYPE = "inclusion-proof"
PROOF_VERSION = 1
# A document holds one entry (<= 256 KiB canonical, more when pretty-printed) and an audit
# path of at most 64 hashes; the entry nests at most MAX_ENTRY_DEPTH levels below it.
MAX_PROOF_BYTES = 4 * MAX_ENTRY_BYTES + 64 * 1024
MAX_PROOF_DEPTH = MAX_ENTRY_DEPTH + 2


class ProofDocumentError(VerificationError):
    """An inclusion proof document is malformed or does not check out."""


@dataclass(frozen=True)
class VerifiedProof:
    log: str
    log_id: int | None
    index: int
    size: int
    root: bytes
    leaf_hash: bytes
    entry_cid: str  # as the document states it; bound to the leaf only if entry_checked
    entry_checked: bool  # entry bytes were checked against this CID and the leaf hash
    anchor: dict | None


def proof_document(store: LogStore, content: ContentStore | None, name: str, index: int,
                   size: int | None = None, *, chain_id: int | None = None,
                   contract_address: str | None = None) -> dict:
    """The inclusion proof of leaf ``index`` of log ``name`` at ``size`` as a JSON object.

    ``size`` defaults to the last anchored checkpoint that holds the leaf, else the current
    size. ``anchor`` is filled when ``size`` is an anchored checkpoint; ``entry`` when
    ``content`` holds the entry.
    """
    log = store.get_log(name)
    anchored = {cp.size: cp for cp in store.checkpoints(name)}
    if size is None:
        size = next((s for s in sorted(anchored) if s > index), log.size)
    leaf = store.leaf(name, index)
    doc: dict[str, Any] = {
        "type": PROOF_TYPE, "v": PROOF_VERSION, "log": name, "log_id": log.chain_log_id,
        "index": index, "size": size, "leaf_hash": _hex(leaf.leaf_hash), "entry_cid": leaf.cid,
        "audit_path": [_hex(h) for h in store.inclusion_proof(name, index, size)],
        "root": _hex(store.root(name, size)), "anchor": None,
    }
    if size in anchored and anchored[size].tx_hash:
        cp = anchored[size]
        doc["anchor"] = {"chain_id": chain_id, "contract": contract_address,
                         "tx_hash": cp.tx_hash, "block_number": cp.block_number,
                         "batch_cid": cp.batch_cid}
    if content is not None and content.has(leaf.cid):
        doc["entry"] = parse_json(content.cat(leaf.cid), max_bytes=MAX_ENTRY_BYTES,
                                  max_depth=MAX_ENTRY_DEPTH, what=f"entry {leaf.cid}")
    return doc


def published_proof_document(published: PublishedLog, content: ContentStore | None,
                             index: int, size: int | None = None, *, chain_id: int | None,
                             contract_address: str | None) -> dict:
    """``proof_document`` for a log this host's store does not hold, from its replay
    (``ledger.published``): ``size`` defaults to the first anchored checkpoint that holds the
    leaf and must be an anchored checkpoint; ``entry`` when ``content`` is given."""
    anchored = {cp.size: cp for cp in published.checkpoints}
    if size is None:
        size = next((s for s in sorted(anchored) if s > index), None)
    if size not in anchored or not 0 <= index < size:
        raise LedgerError(f"log {published.name!r} (on-chain log {published.log_id}) has no "
                          f"anchored checkpoint holding leaf {index}"
                          + (f" at size {size}" if size is not None else "")
                          + f": its checkpoints are {sorted(anchored) or 'none'}")
    cp, cid = anchored[size], published.entry_cids[index]
    doc: dict[str, Any] = {
        "type": PROOF_TYPE, "v": PROOF_VERSION, "log": published.name,
        "log_id": published.log_id, "index": index, "size": size,
        "leaf_hash": _hex(published.leaf_hashes[index]), "entry_cid": cid,
        "audit_path": [_hex(h) for h in published.proof(index, size)],
        "root": _hex(published.root_at(size)),
        "anchor": {"chain_id": chain_id, "contract": contract_address, "tx_hash": cp.tx_hash,
                   "block_number": cp.block_number, "batch_cid": cp.batch_cid},
    }
    if content is not None:
        doc["entry"] = parse_json(content.cat(cid), max_bytes=MAX_ENTRY_BYTES,
                                  max_depth=MAX_ENTRY_DEPTH, what=f"entry {cid}")
    return doc


def proof_from_options(store: LogStore, content: ContentStore | None, *, log: str | None,
                       index: int | None, proof_file: Path | None,
                       names: tuple[str, str, str] = ("--log", "--index", "--proof")
                       ) -> dict | None:
    """The proof document a command's options ask for: leaf ``index`` of the local ``log``, or
    the document in ``proof_file`` (unchecked here), or None. ``names``: the three options as
    the command spells them, for the ``LedgerError`` on a wrong combination or a bad file."""
    log_opt, index_opt, proof_opt = names
    if (log is None) != (index is None):
        raise LedgerError(f"{log_opt} and {index_opt} go together")
    if log is not None and proof_file is not None:
        raise LedgerError(f"give either {log_opt}/{index_opt} or {proof_opt}, not both")
    if log is not None:
        return proof_document(store, content, log, index)
    if proof_file is None:
        return None
    try:
        return read_proof_file(proof_file)
    except LedgerError as exc:
        raise LedgerError(f"not a readable JSON proof document: {exc}") from None


def read_proof_file(path: Path) -> Any:
    """The JSON value in proof document file ``path`` (not yet verified): ``LedgerError``
    when it cannot be read or is not JSON within ``MAX_PROOF_BYTES`` and ``MAX_PROOF_DEPTH``."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_PROOF_BYTES + 1)  # never more than the limit into memory
    except OSError as exc:
        raise LedgerError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_PROOF_BYTES:
        raise LedgerError(f"{path}: a proof document is at most {MAX_PROOF_BYTES} bytes")
    try:
        return parse_json(data, max_bytes=MAX_PROOF_BYTES, max_depth=MAX_PROOF_DEPTH,
                          what="proof document")
    except JSONInputError as exc:
        raise LedgerError(f"{path}: {exc}") from None


def _field(doc: dict, key: str, kind: type | tuple[type, ...]) -> Any:
    if key not in doc:
        raise ProofDocumentError(f"proof document lacks {key!r}")
    value = doc[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ProofDocumentError(f"proof document field {key!r} has the wrong type "
                                 f"({type(value).__name__})")
    return value


def _hash_field(value: Any, where: str) -> bytes:
    if not isinstance(value, str) or not value.startswith("0x") or len(value) != 66:
        raise ProofDocumentError(f"{where} must be '0x' and 64 hex digits, got {value!r}")
    try:
        return bytes.fromhex(value[2:])
    except ValueError:
        raise ProofDocumentError(f"{where} must be '0x' and 64 hex digits, got {value!r}") from None


def verify_proof_document(doc: Any) -> VerifiedProof:
    """Check an inclusion proof document offline; ``ProofDocumentError`` or
    ``InclusionProofError`` (both ``VerificationError``) say what is wrong."""
    if not isinstance(doc, dict):
        raise ProofDocumentError(f"a proof document is a JSON object, got {type(doc).__name__}")
    if doc.get("type") != PROOF_TYPE or doc.get("v") != PROOF_VERSION:
        raise ProofDocumentError(f"not an inclusion proof v{PROOF_VERSION} document (type "
                                 f"{doc.get('type')!r}, v {doc.get('v')!r})")
    log = _field(doc, "log", str)
    log_id = doc.get("log_id")
    if log_id is not None and (type(log_id) is not int or log_id < 1):
        raise ProofDocumentError(f"log_id must be a positive integer or null, got {log_id!r}")
    index, size = _field(doc, "index", int), _field(doc, "size", int)
    leaf = _hash_field(_field(doc, "leaf_hash", str), "leaf_hash")
    root = _hash_field(_field(doc, "root", str), "root")
    path = [_hash_field(h, f"audit_path[{i}]")
            for i, h in enumerate(_field(doc, "audit_path", list))]
    cid = _field(doc, "entry_cid", str)
    try:
        parsed = CID.parse(cid)
    except MultiformatError as exc:
        raise ProofDocumentError(f"entry_cid is not a CID ({exc})") from None
    if (parsed.version, parsed.codec, parsed.hash_code) != (1, RAW, SHA2_256) or str(parsed) != cid:
        raise ProofDocumentError(f"entry_cid {cid!r} is not an entry CID (raw sha2-256 CIDv1 "
                                 "in lowercase base32, bafkrei...)")
    verify_inclusion(leaf, index, size, path, root)
    anchor = doc.get("anchor")
    if anchor is not None and not isinstance(anchor, dict):
        raise ProofDocumentError("anchor must be an object or null")
    proof = VerifiedProof(log, log_id, index, size, root, leaf, cid, False, anchor)
    if "entry" in doc:
        try:
            data = rfc8785.dumps(doc["entry"])
        except rfc8785.CanonicalizationError as exc:
            raise ProofDocumentError(f"entry is not RFC 8785 JSON: {exc}") from None
        proof = verify_proof_entry(proof, data)
    return proof


def verify_proof_entry(proof: VerifiedProof, data: bytes) -> VerifiedProof:
    """``proof`` with ``entry_checked`` set, after checking that entry bytes ``data`` are its
    leaf: their CID is the document's ``entry_cid``, their RFC 9162 leaf hash the proven leaf
    hash, and they are a valid entry. ``ProofDocumentError`` (expected and computed values)
    otherwise."""
    computed_cid = entry_cid(data)
    if computed_cid != proof.entry_cid:
        raise ProofDocumentError("the entry does not have the entry CID",
                                 expected=proof.entry_cid, computed=computed_cid)
    computed_leaf = hashlib.sha256(b"\x00" + data).digest()
    if computed_leaf != proof.leaf_hash:
        raise ProofDocumentError(f"the entry {computed_cid} does not hash to the leaf hash: the "
                                 "document names a CID that is not this leaf's",
                                 expected=_hex(proof.leaf_hash), computed=_hex(computed_leaf))
    try:
        decode_entry(data)
    except EntryError as exc:
        raise ProofDocumentError(f"the entry is not a valid entry: {exc}") from None
    return dataclasses.replace(proof, entry_checked=True)


def check_anchored_root(contract: LedgerContract, proof: VerifiedProof) -> None:
    """Check on chain that ``proof.root`` is the anchored root of its log at its size."""
    if proof.log_id is None:
        raise LedgerError("the proof names no on-chain log id: its log was never published")
    anchored = contract.root_at(proof.log_id, proof.size)
    if anchored != proof.root:
        raise ProofDocumentError(f"log {proof.log_id} is anchored at size {proof.size} with "
                                 "another root", expected=_hex(anchored),
                                 computed=_hex(proof.root))
