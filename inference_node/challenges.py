"""Challenging a receipt: what `gym node challenge` runs.

A challenge names the node that signed a receipt before the NodeRegistry, with evidence that
governance judges (`gym gov propose-slash`). ``challenged_receipt`` reads the receipt from a
bundle (``inference_node.receipts.bundle_json``) and recovers its signer; ``open_challenge``
checks that the receipt is signed for this deployment, finds the signer's operator, stores the
evidence in the content store and calls ``challenge(operator, receiptHash, signature,
evidenceCid)``: the receipt's EIP-712 digest and the node's signature over it, which the
contract checks.

Evidence (``challenge_evidence``) is RFC 8785 JSON, pinned::

    {"type": "challenge-evidence", "v": 1, "reason": <why the receipt is wrong>,
     "receipt_hash": "0x<EIP-712 digest>", "bundle": <the whole bundle>}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import rfc8785

from inference_node.errors import NodeError
from inference_node.receipts import (
    ReceiptDomain,
    parse_receipt,
    receipt_hash,
    verify_receipt_signature,
)
from ledger.entries import ReceiptEntry


@dataclass(frozen=True)
class ChallengedReceipt:
    """A bundle's receipt, its domain and its signer (the signature checked)."""

    bundle: dict
    receipt: ReceiptEntry
    domain: ReceiptDomain
    signer: str


@dataclass(frozen=True)
class Challenge:
    """A challenge opened in the NodeRegistry."""

    id: int
    operator: str
    receipt_hash: bytes
    evidence_cid: str


def challenged_receipt(bundle: object, what: str = "the bundle") -> ChallengedReceipt:
    """The receipt of ``bundle`` with its signer; ``NodeError`` when it is not a bundle,
    ``ReceiptError`` when the receipt or its signature does not check out."""
    if not isinstance(bundle, dict):
        raise NodeError(f"{what} is not a receipt bundle")
    receipt = parse_receipt(bundle.get("receipt"))
    domain = ReceiptDomain.from_json(bundle.get("domain"))
    return ChallengedReceipt(bundle, receipt, domain, verify_receipt_signature(receipt, domain))


def challenge_evidence(reason: str, digest: bytes, bundle: dict) -> bytes:
    """The evidence document's bytes (module docstring)."""
    return rfc8785.dumps({"type": "challenge-evidence", "v": 1, "reason": reason,
                          "receipt_hash": "0x" + digest.hex(), "bundle": bundle})


def open_challenge(challenged: ChallengedReceipt, reason: str, *, registry: Any,
                   content: Any, domain: ReceiptDomain) -> Challenge:
    """Open a challenge in ``registry`` (a ``NodeRegistry`` client with the challenger's key)
    against the node that signed ``challenged``, its evidence stored in ``content``.
    ``domain``: this deployment's; ``NodeError`` when the receipt is signed for another, or no
    registered node signs with its key."""
    if challenged.domain != domain:
        raise NodeError(f"the receipt is signed for chain {challenged.domain.chain_id} contract "
                        f"{challenged.domain.verifying_contract}, not this deployment's")
    operator = registry.operator_of_signer(challenged.signer)
    if operator is None:
        raise NodeError(f"no node in the NodeRegistry signs with {challenged.signer}: nothing "
                        "to challenge")
    digest = receipt_hash(challenged.receipt, challenged.domain)
    evidence_cid = content.add_file(challenge_evidence(reason, digest, challenged.bundle),
                                    pin=True)
    challenge_id = registry.challenge(operator, digest,
                                      bytes.fromhex(challenged.receipt.signature[2:]),
                                      evidence_cid)
    return Challenge(challenge_id, operator, digest, evidence_cid)
