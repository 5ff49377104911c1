"""The ledger: entry formats, RFC 9162 Merkle logs, their SQL index, and a content store
whose CIDs are identical to Kubo's.

Depends on nothing else in this repository. Verifiers are pure functions over bytes and
ints and raise ``VerificationError`` subclasses. The chain side lives in modules of its own,
imported on demand because web3 is slow to import: ``ledger.chain`` (``LedgerContract``,
the ExperienceLedger client), ``ledger.publish`` (append and anchor), ``ledger.audit``
(replay a log from chain events and the content store).

>>> from ledger import ExperienceEntry, Provenance, encode_entry, entry_cid, leaf_hash
>>> from ledger import inclusion_proof, merkle_root, verify_inclusion
>>> entries = [encode_entry(ExperienceEntry(
...     text=f"Rule {i}: restate the question before answering.", domain="math", op="add",
...     provenance=Provenance(method="tfgrpo", base_model="SmolLM2-135M-Instruct", step=i)))
...     for i in range(3)]
>>> hashes = [leaf_hash(e) for e in entries]
>>> verify_inclusion(hashes[1], 1, 3, inclusion_proof(hashes, 1), merkle_root(hashes))
>>> entry_cid(entries[0]).startswith("bafkrei")
True
"""

import sys as _sys

# py_ecc (imported by web3 and eth-account) sets the interpreter's recursion limit to 100,000
# on import, which lets C code such as the JSON decoder recurse past the C stack: deeply
# nested input then kills the process with SIGSEGV instead of raising RecursionError. Import
# it once here, before anything else can, and put the limit back (ledger.json_input).
_limit = _sys.getrecursionlimit() if "py_ecc" not in _sys.modules else 1000
import py_ecc  # noqa: F401

_sys.setrecursionlimit(min(_limit, 10_000))
del _limit

from ledger.blockstore import LocalBlockStore
from ledger.car import CarError, read_car, write_car
from ledger.content import ContentStore, open_content_store
from ledger.entries import (
    MAX_ENTRY_BYTES,
    AdapterEntry,
    Entry,
    ExperienceEntry,
    Provenance,
    ReceiptEntry,
    RunEntry,
    decode_entry,
    encode_entry,
    entry_cid,
    entry_leaf_hash,
    fold_library,
)
from ledger.errors import (
    ConsistencyProofError,
    ContentIntegrityError,
    EntryError,
    InclusionProofError,
    LedgerError,
    NotFoundError,
    VerificationError,
)
from ledger.logstore import Checkpoint, Leaf, LogInfo, LogStore
from ledger.multiformats import CID, raw_cid, verify_block
from ledger.proofs import proof_document, verify_proof_document
from ledger.rfc9162 import (
    EMPTY_ROOT,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    node_hash,
    root_from_inclusion_proof,
    roots_from_consistency_proof,
    verify_consistency,
    verify_inclusion,
)
from ledger.rfc9162 import root as merkle_root
from ledger.unixfs import file_cid

__all__ = [
    "CID",
    "EMPTY_ROOT",
    "MAX_ENTRY_BYTES",
    "AdapterEntry",
    "CarError",
    "Checkpoint",
    "ConsistencyProofError",
    "ContentIntegrityError",
    "ContentStore",
    "Entry",
    "EntryError",
    "ExperienceEntry",
    "InclusionProofError",
    "Leaf",
    "LedgerError",
    "LocalBlockStore",
    "LogInfo",
    "LogStore",
    "NotFoundError",
    "Provenance",
    "ReceiptEntry",
    "RunEntry",
    "VerificationError",
    "consistency_proof",
    "decode_entry",
    "encode_entry",
    "entry_cid",
    "entry_leaf_hash",
    "file_cid",
    "fold_library",
    "inclusion_proof",
    "leaf_hash",
    "merkle_root",
    "node_hash",
    "open_content_store",
    "proof_document",
    "raw_cid",
    "read_car",
    "root_from_inclusion_proof",
    "roots_from_consistency_proof",
    "verify_block",
    "verify_consistency",
    "verify_inclusion",
    "verify_proof_document",
    "write_car",
]
