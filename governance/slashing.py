"""Slashing proposals from the chain: read the NodeRegistry, then plan with ``plan_slash``.

``build_slash`` checks, before anything is sent, what ``NodeRegistry.slash`` would refuse
when the DAO timelock executes it: a registry governed by another address, a receipt signer
named instead of its operator, an amount the stake cannot cover, no open challenge (or more
than one) against the node, a receipt already slashed (``NodeRegistry`` slashes one receipt at
most once); ``governance.proposals.plan_slash`` checks the rest and writes the proposal. The registry is read through ``inference_node.registry.NodeRegistry``, whose
``ChainError`` the client turns into the governance package's errors.
"""

from __future__ import annotations

from eth_utils import to_checksum_address

from governance.errors import GovernanceError, SlashError
from governance.proposals import SlashProposal, check_slash_amount, plan_slash
from inference_node.registry import ChallengeStatus, NodeRegistry


def checksum_address(text: str, what: str) -> str:
    """``text`` as a checksummed address; ``GovernanceError`` naming ``what`` when it is not one."""
    try:
        return to_checksum_address(text.strip())
    except (ValueError, TypeError):
        raise GovernanceError(f"the {what} is an address (0x and 40 hex digits), not "
                              f"{text!r}") from None


def build_slash(registry: NodeRegistry, timelock_address: str, operator: str, amount: int,
                reason: str, *, challenge_id: int | None = None,
                beneficiary: str | None = None) -> SlashProposal:
    """A proposal that slashes ``amount`` (token base units) of node ``operator``'s stake, for
    the DAO whose timelock (and the registry's governance) is ``timelock_address``.

    ``challenge_id`` defaults to the one open challenge against the node. ``beneficiary``
    receives the slashed GYM: an address, ``"challenger"`` (whoever opened the challenge),
    or by default the DAO timelock (the treasury). Raises ``SlashError`` before anything is
    sent for what ``NodeRegistry.slash`` would refuse when the timelock executes it.
    """
    governance = registry.governance()
    min_stake = registry.min_stake()
    if governance != timelock_address:
        raise SlashError(f"the NodeRegistry at {registry.address} is governed by {governance}, "
                         f"not by this DAO's timelock {timelock_address}: a proposal "
                         "could never slash there")
    node = registry.node_record(checksum_address(operator, "node"))
    if not node.exists:
        operator_of = registry.operator_of_signer(node.operator)
        if operator_of is not None:
            raise SlashError(f"{node.operator} is the receipt signer of node {operator_of}, "
                             "not an operator: name the operator address")
    check_slash_amount(node, amount)
    if challenge_id is None:
        against = registry.challenges_against(node.operator)
        open_ = [c for c in against if c.status == ChallengeStatus.OPEN]
        if not open_:
            upheld = [f"#{c.challenge_id}" for c in against
                      if c.status == ChallengeStatus.UPHELD
                      and not registry.slashed_for(node.operator, c.receipt_hash)]
            raise SlashError(
                f"no open challenge against node {node.operator}: slashing answers a "
                "challenge (anyone opens one against a receipt the node signed: `gym node "
                "challenge BUNDLE --reason ...`)" + (f"; upheld ones: {', '.join(upheld)}, name "
                                                "one with --challenge ID" if upheld else ""))
        if len(open_) > 1:
            raise SlashError(f"{len(open_)} challenges against node {node.operator} are open "
                             f"({', '.join(f'#{c.challenge_id}' for c in open_)}): pick one "
                             "with --challenge ID")
        found = open_[0]
    else:
        found = registry.challenge_of(challenge_id)
    if found.status != ChallengeStatus.NONE:
        slashed = registry.slashed_for(found.operator, found.receipt_hash)
        if slashed:
            raise SlashError(f"receipt 0x{found.receipt_hash.hex()} of node {found.operator} was "
                             f"already slashed (challenge #{slashed}): one receipt is slashed "
                             "at most once")
    if beneficiary is None:
        paid_to, label = timelock_address, "the DAO timelock, its treasury"
    elif beneficiary.strip().lower() == "challenger":
        paid_to, label = found.challenger, f"the challenger of #{found.challenge_id}"
    else:
        paid_to, label = checksum_address(beneficiary, "beneficiary"), ""
    return plan_slash(node, found, amount, reason, registry_address=registry.address,
                      beneficiary=paid_to, beneficiary_label=label, min_stake=min_stake)
