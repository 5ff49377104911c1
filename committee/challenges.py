"""Opening a committee challenge: ``inference_node.challenges.open_challenge`` (the receipt's
signer found in the NodeRegistry, the evidence stored, the node's signature checked on chain)
with ``VerifierCommittee.openChallenge`` in place of the registry's bond-less ``challenge``:
the challenger bonds ``challengeBond()`` and the committee, not governance, judges it. What
`gym verifier challenge` and a failed random audit (``committee.audits``) run.
"""

from __future__ import annotations

from typing import Any

from committee.client import VerifierCommittee
from inference_node.challenges import Challenge, ChallengedReceipt, open_challenge
from inference_node.receipts import ReceiptDomain


class CommitteeChallenger:
    """What ``open_challenge`` (and ``inference_node.forgery.catch_and_challenge``) asks of a
    registry: the operator from the NodeRegistry, the challenge itself from the committee
    (which opens the registry's in turn)."""

    def __init__(self, committee: VerifierCommittee, registry: Any) -> None:
        self.committee, self.registry = committee, registry

    def operator_of_signer(self, signer: str) -> str | None:
        return self.registry.operator_of_signer(signer)

    def challenge(self, operator: str, receipt_hash: bytes, signature: bytes,
                  evidence_cid: str) -> int:
        return self.committee.open_challenge(operator, receipt_hash, signature, evidence_cid)


def open_committee_challenge(challenged: ChallengedReceipt, reason: str, *,
                             committee: VerifierCommittee, registry: Any, content: Any,
                             domain: ReceiptDomain) -> Challenge:
    """Open a committee challenge against the node that signed ``challenged``; its ``id`` is
    the committee's challenge id. ``registry``: a ``NodeRegistry`` client (reads only);
    ``committee``: with the challenger's key (it pays the bond)."""
    return open_challenge(challenged, reason, registry=CommitteeChallenger(committee, registry),
                          content=content, domain=domain)


__all__ = ["CommitteeChallenger", "open_committee_challenge"]
