"""The Committee page's data: the VerifierCommittee's verifiers and its latest challenges, read
from the chain through ``committee.client`` (the one client of that contract), read-only.

Bounded: at most ``MAX_VERIFIERS`` slots (the contract has 128) and the latest
``MAX_CHALLENGES`` challenges; the events that say what a settlement and a finalization did
(``ChallengeSettled``: verdict reason, signer stake; ``ChallengeFinalized``: node slashed,
paid to the challenger, reward share; ``SettlementReversed``: slashed from the signers) are
read only for those challenges (their ids as topic filters). Amounts are decimal strings of
token base units in JSON, exact in JavaScript.
"""

from __future__ import annotations

from typing import Any

from committee.client import (
    SLOT_ACTIVE,
    SLOT_FREE,
    SLOT_UNBONDING,
    ChallengeState,
    CommitteeChallenge,
    VerifierCommittee,
)
from governance.appeals import verdict_label
from governance.client import GovernanceClient
from governance.dashboard.errors import NoCommitteeError

MAX_VERIFIERS = 128
MAX_CHALLENGES = 200
SLOT_STATES = {SLOT_FREE: "free", SLOT_ACTIVE: "active", SLOT_UNBONDING: "unbonding"}


def committee_of(client: GovernanceClient) -> VerifierCommittee:
    if client.committee is None:
        raise NoCommitteeError("this deployment has no VerifierCommittee (run `gym devnet up "
                               "--redeploy`)")
    return client.committee


def _reason(raw: bytes) -> str:
    from committee.messages import reason_text

    try:
        return reason_text(bytes(raw))
    except ValueError:
        return "0x" + bytes(raw).hex()


def _by_id(committee: VerifierCommittee, event: str, ids: list[int]) -> dict[int, Any]:
    if not ids:
        return {}
    return {args["challengeId"]: args
            for _, args in committee.events(event, challengeId=ids)}


def _challenge_json(c: CommitteeChallenge, window: int, settled: Any, finalized: Any,
                    reversed_: Any) -> dict:
    data = {
        "id": c.challenge_id, "operator": c.operator, "challenger": c.challenger,
        "status": c.status.label, "verdict": verdict_label(c.verdict) if c.verdict else None,
        "reason": _reason(settled["reason"]) if settled is not None else None,
        "signers": c.signers, "signers_count": len(c.signers), "bond": str(c.bond),
        "registry_challenge_id": c.registry_challenge_id,
        "receipt_hash": "0x" + c.receipt_hash.hex(),
        "settled_at": c.settled_at or None,
        "appeal_window_end": c.settled_at + window if c.settled_at else None,
        "finalized": None, "reversed": None,
    }
    if settled is not None:
        data["signer_stake"] = str(settled["signerStake"])
        data["active_stake"] = str(settled["activeStake"])
    if finalized is not None:
        data["finalized"] = {
            "upheld": finalized["upheld"], "node_slashed": str(finalized["nodeSlashed"]),
            "to_challenger": str(finalized["toChallenger"]),
            "reward_share": str(finalized["rewardShare"]),
            "to_governance": str(finalized["toGovernance"])}
    if reversed_ is not None:
        data["reversed"] = {"slashed": str(reversed_["slashed"])}
    return data


def committee_json(client: GovernanceClient, limit: int = MAX_CHALLENGES) -> dict:
    """The committee as the page and ``GET /api/committee`` show it: parameters, verifiers,
    and the latest ``limit`` (at most ``MAX_CHALLENGES``) challenges, newest first."""
    committee = committee_of(client)
    limit = max(0, min(limit, MAX_CHALLENGES))
    with client.rpc_errors():
        window = committee.appeal_window()
        count = committee.challenge_count()
        slot_count = min(committee.value("slotCount"), MAX_VERIFIERS)
        slots = [committee.slot(i) for i in range(slot_count)]
        ids = list(range(count, max(count - limit, 0), -1))
        challenges = [committee.challenge(i) for i in ids]
        touched = [c.challenge_id for c in challenges if c.settled_at]
        settled = _by_id(committee, "ChallengeSettled", touched)
        done = [c.challenge_id for c in challenges if c.status == ChallengeState.FINALIZED]
        finalized = _by_id(committee, "ChallengeFinalized", done)
        undone = [c.challenge_id for c in challenges
                  if c.status in (ChallengeState.REVERSED, ChallengeState.FINALIZED)]
        reversed_ = _by_id(committee, "SettlementReversed", undone)
        params = {"appeal_window": window, "max_appeal_window": committee.value("MAX_APPEAL_WINDOW"),
                  "min_verifier_stake": str(committee.min_stake()),
                  "challenge_bond": str(committee.challenge_bond()),
                  "verifier_slash": str(committee.value("verifierSlash")),
                  "active_stake": str(committee.active_stake()),
                  "governance": committee.value("governance")}
    return {
        "address": committee.address, **params,
        "verifiers": [{"index": s.index, "address": s.verifier, "stake": str(s.stake),
                       "state": SLOT_STATES.get(s.state, str(s.state)),
                       "unbonding_ends": s.unbonding_ends or None} for s in slots],
        "challenge_count": count, "shown": len(challenges),
        "challenges": [_challenge_json(c, window, settled.get(c.challenge_id),
                                       finalized.get(c.challenge_id),
                                       reversed_.get(c.challenge_id)) for c in challenges],
    }
