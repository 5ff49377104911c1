"""Votes from the page: EIP-712 ballots the voter's wallet signs, relayed by the server.

The page asks for the typed data (``ballot_for_wallet``), has the wallet sign it with
``eth_signTypedData_v4`` and posts the signature back; ``relay_ballot`` submits it, the
relayer paying the gas. The relayer decides nothing: the governor recovers the voter from the
signature, so a relayer can only deliver a ballot or drop it.

A vote without a reason is OpenZeppelin 5's ``Ballot(proposalId, support, voter, nonce)``,
exactly ``GovernanceClient.ballot_typed_data``, relayed with ``castVoteBySig``. A reason must
be signed too, or the relayer could change it: the governor's ``ExtendedBallot(proposalId,
support, voter, nonce, reason, params)`` covers it, relayed with
``castVoteWithReasonAndParamsBySig`` (empty params, so the governor still emits ``VoteCast``).

Before relaying, ``check_voting_power`` refuses a ballot the governor would take but that
would weigh nothing (a voter with no votes at the snapshot: ``VotingPowerError``) or that the
proposal's state refuses (``ProposalStateError``). Everything about the signature itself,
forged or replayed, is left to the governor, whose refusal (``GovernorInvalidSignature``,
``GovernorAlreadyCastVote``) comes back named by ``decode_revert``; gas estimation catches it,
so a refused ballot costs the relayer nothing.
"""

from __future__ import annotations

import copy

from eth_account import Account
from eth_utils import to_checksum_address

from governance.client import GovernanceClient, VoteType
from ledger.chain import TxResult

EXTENDED_BALLOT_FIELDS = [{"name": "reason", "type": "string"}, {"name": "params", "type": "bytes"}]


def ballot_for_wallet(client: GovernanceClient, proposal_id: int, support: VoteType | str,
                      voter: str, reason: str = "") -> dict:
    """The typed data a wallet signs for this vote, in ``eth_signTypedData_v4`` form (uint256
    values as decimal strings: ``GovernanceClient.ballot_typed_data``)."""
    typed = copy.deepcopy(client.ballot_typed_data(proposal_id, support, voter))
    if reason:
        typed["types"]["ExtendedBallot"] = typed["types"].pop("Ballot") + EXTENDED_BALLOT_FIELDS
        typed["primaryType"] = "ExtendedBallot"
        typed["message"].update(reason=reason, params="0x")
    return typed


def check_voting_power(client: GovernanceClient, proposal_id: int, voter: str, *,
                       reach_snapshot: bool) -> int:
    """The voter's weight on the proposal, or ``ProposalStateError`` / ``VotingPowerError``.

    A Pending proposal is accepted for signing ahead (its weight is checked once the snapshot
    has passed); with ``reach_snapshot`` on the devnet a block is mined past the snapshot first,
    as ``GovernanceClient.vote`` does, so that the relayed vote can count. Unlike
    ``GovernanceClient.vote`` it does not pre-check an earlier vote: the governor's own refusal
    of a replayed ballot is the answer the page shows.
    """
    return client.voting_weight(proposal_id, to_checksum_address(voter),
                                reach_snapshot=reach_snapshot, ahead=not reach_snapshot)


def relay_ballot(client: GovernanceClient, relayer_key: str, proposal_id: int,
                 support: VoteType | str, voter: str, signature: bytes, reason: str = ""
                 ) -> TxResult:
    """Check the voter's power, then submit their signed ballot with the relayer's key."""
    support = VoteType.parse(support)
    voter = to_checksum_address(voter)
    check_voting_power(client, proposal_id, voter, reach_snapshot=True)
    if not reason:
        return client.cast_vote_by_sig(proposal_id, support, voter, signature, key=relayer_key,
                                       verify=False)
    call = client.governor.functions.castVoteWithReasonAndParamsBySig(
        proposal_id, int(support), voter, reason, b"", signature)
    return client.send(call, Account.from_key(relayer_key))[1]
