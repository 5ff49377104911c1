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

from governance.client import GovernanceClient, ProposalState, VoteType
from governance.devnet_time import ensure_time_after, is_devnet
from governance.errors import ProposalStateError, VotingPowerError
from ledger.chain import TxResult

EXTENDED_BALLOT_FIELDS = [{"name": "reason", "type": "string"}, {"name": "params", "type": "bytes"}]


def ballot_for_wallet(client: GovernanceClient, proposal_id: int, support: VoteType | str,
                      voter: str, reason: str = "") -> dict:
    """The typed data a wallet signs for this vote, in ``eth_signTypedData_v4`` form.

    uint256 values are decimal strings: a proposal id does not fit a JavaScript number, and
    wallets (and Anvil) read strings exactly.
    """
    typed = copy.deepcopy(client.ballot_typed_data(proposal_id, support, voter))
    if reason:
        typed["types"]["ExtendedBallot"] = typed["types"].pop("Ballot") + EXTENDED_BALLOT_FIELDS
        typed["primaryType"] = "ExtendedBallot"
        typed["message"].update(reason=reason, params="0x")
    message = typed["message"]
    message["proposalId"], message["nonce"] = str(message["proposalId"]), str(message["nonce"])
    return typed


def check_voting_power(client: GovernanceClient, proposal_id: int, voter: str, *,
                       reach_snapshot: bool) -> int:
    """The voter's weight on the proposal, or ``ProposalStateError`` / ``VotingPowerError``.

    A Pending proposal is accepted for signing ahead (its weight is checked once the snapshot
    has passed); with ``reach_snapshot`` on the devnet a block is mined past the snapshot first,
    as ``GovernanceClient.vote`` does, so that the relayed vote can count.
    """
    voter = to_checksum_address(voter)
    functions = client.governor.functions
    with client._calls():
        state = ProposalState(functions.state(proposal_id).call())
        snapshot = functions.proposalSnapshot(proposal_id).call()
    if state == ProposalState.PENDING and reach_snapshot and is_devnet(client.w3):
        ensure_time_after(client.w3, snapshot)
        with client._calls():
            state = ProposalState(functions.state(proposal_id).call())
    if state == ProposalState.PENDING and not reach_snapshot:
        return client.votes(voter)  # the snapshot is ahead: today's votes are the best guess
    if state != ProposalState.ACTIVE:
        raise ProposalStateError(
            f"proposal {proposal_id} is {state.label}: votes are taken only while it is Active "
            f"(after its snapshot at {snapshot}, until its deadline)")
    weight = client.votes(voter, snapshot)
    if weight == 0:
        raise VotingPowerError(
            f"{voter} had no votes at the proposal's snapshot (timepoint {snapshot}): its vote "
            "would count 0, so it is not relayed; votes come from GYM held and delegated before "
            "a proposal is made")
    return weight


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
    return client._send(call, Account.from_key(relayer_key))[1]
