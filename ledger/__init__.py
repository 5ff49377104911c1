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

# py_ecc (imported by web3) raises the recursion limit on import; the guard puts it back
# (ledger.recursion_guard) without importing py_ecc, or web3, before a command needs them.
from ledger import recursion_guard as _recursion_guard

_recursion_guard.install()

# eth-account imports eth-keyfile, which computes BLS12-381 tables on import (~0.9 s); the
# stand-ins import it when a keystore is first read or written (ledger.deferred_keyfile).
from ledger import deferred_keyfile as _deferred_keyfile

_deferred_keyfile.install()

from ledger.lazy_exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "ledger.blockstore": ["LocalBlockStore"],
    "ledger.car": ["CarError", "read_car", "write_car"],
    "ledger.content": ["ContentStore", "open_content_store"],
    "ledger.entries": ["MAX_ENTRY_BYTES", "AdapterEntry", "Entry", "ExperienceEntry", "Provenance",
        "ReceiptEntry", "RunEntry", "decode_entry", "encode_entry", "entry_cid", "entry_leaf_hash",
        "fold_library"],
    "ledger.errors": ["ConsistencyProofError", "ContentIntegrityError", "EntryError",
        "InclusionProofError", "LedgerError", "NotFoundError", "VerificationError"],
    "ledger.logstore": ["Checkpoint", "Leaf", "LogInfo", "LogStore"],
    "ledger.merkle_distribution": ["MerkleDistributionError", "RewardTree",
        "verify_proof as verify_reward_proof"],
    "ledger.multiformats": ["CID", "raw_cid", "verify_block"],
    "ledger.proofs": ["proof_document", "verify_proof_document"],
    "ledger.rfc9162": ["EMPTY_ROOT", "consistency_proof", "inclusion_proof", "leaf_hash",
        "node_hash", "root_from_inclusion_proof", "roots_from_consistency_proof",
        "verify_consistency", "verify_inclusion", "root as merkle_root"],
    "ledger.unixfs": ["file_cid"],
})
