"""Custom errors as the governance package shows them: values by name, and what they mean.

``ledger.evm`` decodes a revert against the ABIs of every contract the client talks to;
``format_revert_value`` shows a proposal state or challenge status by name and a stake in GYM,
and ``governance_error`` turns the result into a ``GovernorRevertError`` whose message adds
what the error means to the person who ran the command and what to do.
"""

from __future__ import annotations

from typing import Any

from governance.errors import GovernanceError, GovernorRevertError
from governance.proposals import ProposalState, format_gym
from inference_node.registry import ChallengeStatus
from ledger.evm import ChainError, ContractRevertError, plain_value


def governance_error(exc: ChainError) -> GovernanceError:
    """``exc``, an error of ``ledger.evm``, as the governance package raises it: a contract's
    custom error as ``GovernorRevertError`` with what it means, anything else with its words."""
    if isinstance(exc, ContractRevertError):
        return GovernorRevertError(exc.name, exc.values, _meaning(exc.name, exc.values))
    return GovernanceError(str(exc))


def format_revert_value(error: str, abi_input: dict, value: Any) -> Any:
    name = abi_input["name"]
    if name == "current" and error == "GovernorUnexpectedProposalState":
        return ProposalState(value).label
    if name == "expectedStates" and error == "GovernorUnexpectedProposalState":
        return "|".join(s.label for s in ProposalState if int.from_bytes(value, "big") & (1 << s))
    if name == "status" and error == "NodeRegistryChallengeNotOpen":
        return ChallengeStatus(value).label
    if name in ("amount", "stake", "minStake") and error.startswith("NodeRegistry") or \
            name in ("votes", "threshold") and error == "GovernorInsufficientProposerVotes":
        return format_gym(value)
    return plain_value(error, abi_input, value)


def _meaning(name: str, v: dict[str, Any]) -> str:
    """What a custom error means to the person who ran the command, and what to do."""
    meanings = {
        "GovernorUnexpectedProposalState":
            lambda: f"the proposal is {v['current']}, this needs it {v['expectedStates'] or 'in another state'}",
        "GovernorAlreadyCastVote": lambda: f"{v['voter']} has already voted on this proposal",
        "GovernorInvalidSignature":
            lambda: f"the signature does not recover to {v['voter']} at its current nonce "
                    "(forged, or already used)",
        "GovernorInsufficientProposerVotes":
            lambda: f"{v['proposer']} has {v['votes']} of votes, proposing needs {v['threshold']}: "
                    "delegate first (`gym gov delegate`)",
        "GovernorNonexistentProposal": lambda: "no proposal has this id",
        "GovernorInvalidVoteType": lambda: "support must be 0 (against), 1 (for) or 2 (abstain)",
        "TimelockUnexpectedOperationState":
            lambda: "the timelock operation is not ready: its delay has not passed yet "
                    "(on the devnet: `gym devnet mine --seconds N`)",
        "ExperienceLedgerInvalidInclusionProof":
            lambda: f"leaf {v['leafIndex']} of log {v['logId']} does not verify against its "
                    f"anchored root at size {v['size']}: the proposal carries a bad proof",
        "ExperienceLedgerUnknownCheckpoint":
            lambda: f"log {v['logId']} has no anchored checkpoint of size {v['size']}",
        "ExperienceLedgerAlreadyCurated": lambda: "that leaf is already in the curated library",
        "ExperienceLedgerUnknownLog": lambda: f"no log {v['logId']} exists on chain",
        "GovernorUnableToCancel":
            lambda: f"{v['account']} cannot cancel proposal {v['proposalId']}: only its proposer "
                    "can, and only while it is Pending (before voting opens)",
        "GovernorOnlyExecutor":
            lambda: f"{v['account']} is not the governor's executor: governance settings change "
                    "only through an executed proposal",
        "GovernorInvalidVotingPeriod": lambda: "the voting period must be at least 1 second",
        "GovernorInvalidQuorumFraction":
            lambda: f"a quorum of {v['quorumNumerator']}/{v['quorumDenominator']} of the supply "
                    "is more than all of it",
        "TimelockUnauthorizedCaller":
            lambda: f"{v['caller']} is not the timelock: only the timelock changes its own delay",
        "NodeRegistryNotGovernance":
            lambda: f"{v['caller']} is not the registry's governance: only the DAO timelock "
                    "slashes, by an executed proposal",
        "NodeRegistryNotRegistered": lambda: f"{v['operator']} has no node in the registry",
        "NodeRegistrySlashExceedsStake":
            lambda: f"node {v['operator']} stakes only {v['stake']}, less than {v['amount']}",
        "NodeRegistryUnknownChallenge": lambda: f"no challenge #{v['challengeId']} exists",
        "NodeRegistryChallengeMismatch":
            lambda: f"challenge #{v['challengeId']} is against {v['challenged']}, not "
                    f"{v['operator']}",
        "NodeRegistryChallengeDismissed":
            lambda: f"challenge #{v['challengeId']} was dismissed: nothing can be slashed for it",
        "NodeRegistryReceiptSlashed":
            lambda: f"receipt {v['receiptHash']} of node {v['operator']} was already slashed for "
                    f"challenge #{v['challengeId']}: a receipt is slashed once, through any of "
                    "its challenges",
        "NodeRegistryZeroAmount": lambda: "the amount must be more than zero",
        "NodeRegistryInvalidBeneficiary":
            lambda: f"slashed GYM cannot be paid to {v['beneficiary']}",
        "CommitteeAppealWindowOver":
            lambda: f"the appeal window of committee challenge {v['challengeId']} ended at "
                    f"{v['windowEnds']} (it is {v['timestamp']}): its settlement can no longer "
                    "be reversed",
        "CommitteeAppealWindowTooLong":
            lambda: f"an appeal window of {v['appealWindow']} s is above the committee's maximum "
                    f"{v['maxAppealWindow']} s",
        "CommitteeNotGovernance":
            lambda: f"{v['caller']} is not the committee's governance: only the DAO timelock "
                    "reverses settlements and sets the appeal window, by an executed proposal",
        "CommitteeUnknownChallenge": lambda: f"no committee challenge {v['challengeId']}",
        "RewardsNotGovernance":
            lambda: f"{v['caller']} is not the RewardDistributor's governance: only the DAO "
                    "timelock sets the budget and the appeal window and reverses roots, by an "
                    "executed proposal",
        "RewardsInvalidSplit":
            lambda: f"the reward split sums to {v['sum']} basis points, not 10000",
        "RewardsAppealWindowTooLong":
            lambda: f"a reward appeal window of {v['appealWindow']} s is above the "
                    f"distributor's maximum {v['maxAppealWindow']} s",
        "RewardsNotAttested":
            lambda: f"epoch {v['epoch']} has no attested reward root (never attested, or "
                    "reversed)",
        "RewardsAppealWindowOver":
            lambda: f"the appeal window of epoch {v['epoch']}'s reward root ended at "
                    f"{v['finalAt']} (it is {v['timestamp']}): it can no longer be reversed",
        "RewardsNotFinal":
            lambda: f"epoch {v['epoch']}'s rewards are claimable from {v['finalAt']} (it is "
                    f"{v['timestamp']}), when its appeal window ends",
        "RewardsAlreadyClaimed":
            lambda: f"{v['account']} already claimed its rewards of epoch {v['epoch']}",
        "RewardsInvalidProof":
            lambda: f"({v['account']}, {v['amount']}) is not a line of epoch {v['epoch']}'s "
                    "attested table",
        "ExperienceLedgerNotLogOwner":
            lambda: f"{v['caller']} does not own log {v['logId']} (the owner is {v['owner']})",
    }
    explain = meanings.get(name)
    return explain() if explain else ""
