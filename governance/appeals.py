"""Committee proposals: reverse a VerifierCommittee settlement, set the appeal window; reverse
a RewardDistributor root.

The VerifierCommittee (docs/committee.md) lets its governance, the DAO timelock, ``reverse``
a settled challenge while its appeal window runs (``settledAt + appealWindow()``; the outcome
flips and every signer is slashed) and ``setAppealWindow`` (at most ``MAX_APPEAL_WINDOW()``).
``build_reverse`` and ``build_appeal_window`` read the committee through ``committee.client``
(the one client of that contract) and refuse, before anything is sent, what the committee
would refuse when the timelock executes the proposal: a committee governed by another
address, an unknown challenge, one that is not ``Settled``, and an appeal window that ends
before a proposal made now could execute (voting delay + voting period + timelock delay, and
the blocks between); a window above the maximum or equal to the current one.

The window is read at execution: ``reverse`` compares the execution block's time with
``settledAt`` plus the appeal window *then*, so raising the window (a passed
``propose-appeal-window``) also lengthens the windows of settlements already made.

The RewardDistributor (docs/rewards.md) lets the same timelock ``reverse(epoch)`` an attested
reward root before its ``finalAt``, which is fixed when the root is attested: ``build_root_reverse``
refuses an epoch with no attested root (never attested, or reversed already) and one whose
``finalAt`` comes before a proposal made now could execute. Unlike the committee's, raising
the distributor's appeal window (``gym gov propose-params --reward-appeal-window``) helps only
roots attested afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass

from eth_abi import encode as abi_encode
from eth_utils import keccak, to_checksum_address

from committee.client import ChallengeState, CommitteeChallenge, VerifierCommittee
from committee.messages import reason_text
from committee.rewards.distributor import EpochRoot, EpochStatus, RewardDistributor
from contracts.gym_token import format_gym
from governance.devnet_time import utc
from governance.errors import CommitteeProposalError
from governance.proposals import GovernanceParameters, format_duration

VERDICT_LABELS = {1: "upheld", 2: "rejected"}
# A proposal made now executes, at the earliest, this many seconds after the voting delay,
# the voting period and the timelock delay: the proposal's own block, and the block after the
# deadline in which it can be queued.
BLOCK_SLACK = 2


def verdict_label(verdict: int) -> str:
    return VERDICT_LABELS.get(verdict, "none")


@dataclass(frozen=True)
class ReverseProposal:
    """What ``propose`` sends to reverse a settlement: one ``VerifierCommittee.reverse``."""

    committee_address: str
    challenge_id: int
    description: str

    @property
    def calldata(self) -> bytes:
        return keccak(text="reverse(uint256)")[:4] + abi_encode(["uint256"], [self.challenge_id])

    @property
    def actions(self) -> tuple[list[str], list[int], list[bytes]]:
        return [self.committee_address], [0], [self.calldata]


@dataclass(frozen=True)
class AppealWindowProposal:
    """What ``propose`` sends to change the appeal window: one ``setAppealWindow``."""

    committee_address: str
    old: int
    new: int  # seconds
    description: str

    @property
    def calldata(self) -> bytes:
        return keccak(text="setAppealWindow(uint64)")[:4] + abi_encode(["uint64"], [self.new])

    @property
    def actions(self) -> tuple[list[str], list[int], list[bytes]]:
        return [self.committee_address], [0], [self.calldata]


def check_governed_by(committee: VerifierCommittee, timelock_address: str) -> None:
    governance = to_checksum_address(committee.value("governance"))
    if governance != to_checksum_address(timelock_address):
        raise CommitteeProposalError(
            f"the VerifierCommittee at {committee.address} is governed by {governance}, not by "
            f"this DAO's timelock {timelock_address}: a proposal could never act there")


def settlement_reason(committee: VerifierCommittee, challenge_id: int) -> str:
    """The reason of ``challenge_id``'s settlement (its ``ChallengeSettled`` event), or ``""``."""
    events = committee.events("ChallengeSettled", challengeId=challenge_id)
    if not events:
        return ""
    raw = bytes(events[-1][1]["reason"])
    try:
        return reason_text(raw)
    except ValueError:
        return "0x" + raw.hex()


def _span(seconds: int) -> str:
    return format_duration(max(seconds, 0))


def plan_reverse(challenge: CommitteeChallenge, reason: str, *, committee_address: str,
                 appeal_window: int, params: GovernanceParameters, now: int,
                 challenge_count: int, verdict_reason: str = "", verifier_slash: int = 0
                 ) -> ReverseProposal:
    """A proposal to reverse ``challenge``'s settlement, for a DAO with ``params`` at chain
    time ``now``; ``CommitteeProposalError`` when the committee would refuse it at execution."""
    cid = challenge.challenge_id
    if not reason.strip():
        raise CommitteeProposalError("say why the settlement is wrong (--reason TEXT): voters "
                                     "read it")
    if challenge.status == ChallengeState.NONE:
        raise CommitteeProposalError(
            f"no committee challenge {cid}: the VerifierCommittee has {challenge_count} "
            f"challenge{'' if challenge_count == 1 else 's'} (ids 1 to {challenge_count})"
            if challenge_count else f"no committee challenge {cid}: the VerifierCommittee has none")
    if challenge.status != ChallengeState.SETTLED:
        why = {ChallengeState.OPEN: "no verdict is settled yet, so there is nothing to reverse",
               ChallengeState.REVERSED: "it was reversed already",
               ChallengeState.FINALIZED: "its outcome is final (a finalized settlement cannot "
                                         "be reversed)",
               ChallengeState.EXPIRED: "it expired unsettled"}.get(challenge.status, "")
        raise CommitteeProposalError(f"committee challenge {cid} is {challenge.status.label}, "
                                     f"not settled: {why}")
    window_ends = challenge.settled_at + appeal_window
    needed = params.voting_delay + params.voting_period + params.timelock_delay + BLOCK_SLACK
    left = window_ends - now
    if now + needed >= window_ends:
        raise CommitteeProposalError(
            f"the appeal window of committee challenge {cid} ends at {utc(window_ends)}, "
            f"{'in ' + _span(left) if left > 0 else 'already'}; a proposal made now executes "
            f"at the earliest in {_span(needed)} (voting delay {params.voting_delay} s + voting "
            f"period {params.voting_period} s + timelock delay {params.timelock_delay} s + "
            f"{BLOCK_SLACK} s of blocks): it could never reverse in time. Raise the window first "
            "(`gym gov propose-appeal-window`) or shorten the DAO's delays")
    verdict = verdict_label(challenge.verdict)
    flipped = "rejected" if verdict == "upheld" else "upheld"
    because = f" (reason {verdict_reason!r})" if verdict_reason else ""
    evidence = f", evidence ipfs://{challenge.evidence_cid}" if challenge.evidence_cid else ""
    signers = ", ".join(str(i) for i in challenge.signers)
    slash = (f"{format_gym(verifier_slash)} each, capped at its stake" if verifier_slash
             else "the committee's verifierSlash each")
    text = "\n".join([
        f"# Reverse committee challenge {cid}: {verdict} against node {challenge.operator}",
        "",
        reason.strip(),
        "",
        (f"Challenge {cid}: opened by {challenge.challenger} against node operator "
         f"{challenge.operator}'s receipt 0x{challenge.receipt_hash.hex()}, bond "
         f"{format_gym(challenge.bond)}{evidence}"),
        (f"Settled verdict: {verdict}{because} at {utc(challenge.settled_at)}, signed by "
         f"verifier slot{'' if len(challenge.signers) == 1 else 's'} {signers}"),
        (f"Appeal window ends {utc(window_ends)} (in {_span(left)}); this proposal executes "
         f"at the earliest in {_span(needed)}"),
        (f"Effect: the outcome becomes {flipped}; each signer is slashed {slash}, to the DAO "
         "timelock"),
        (f"Action: VerifierCommittee {committee_address}.reverse({cid}) (callable only by "
         "the DAO timelock)"),
    ])
    return ReverseProposal(to_checksum_address(committee_address), cid, text)


def build_reverse(committee: VerifierCommittee, timelock_address: str,
                  params: GovernanceParameters, now: int, challenge_id: int,
                  reason: str) -> ReverseProposal:
    """Read ``challenge_id`` and the committee, then ``plan_reverse``."""
    check_governed_by(committee, timelock_address)
    if challenge_id < 1:
        raise CommitteeProposalError(f"committee challenge ids start at 1, not {challenge_id}")
    challenge = committee.challenge(challenge_id, with_evidence=True)
    settled = challenge.status == ChallengeState.SETTLED
    return plan_reverse(
        challenge, reason, committee_address=committee.address,
        appeal_window=committee.appeal_window(), params=params, now=now,
        challenge_count=committee.challenge_count(),
        verdict_reason=settlement_reason(committee, challenge_id) if settled else "",
        verifier_slash=committee.value("verifierSlash") if settled else 0)


def build_appeal_window(committee: VerifierCommittee, timelock_address: str, seconds: int,
                        description: str = "") -> AppealWindowProposal:
    """A proposal that sets the appeal window to ``seconds``; ``CommitteeProposalError``
    above ``MAX_APPEAL_WINDOW()``, below 0, or equal to the current window."""
    check_governed_by(committee, timelock_address)
    largest = committee.value("MAX_APPEAL_WINDOW")
    current = committee.appeal_window()
    if seconds < 0:
        raise CommitteeProposalError(f"the appeal window cannot be negative ({seconds})")
    if seconds > largest:
        raise CommitteeProposalError(
            f"the appeal window can be at most {format_duration(largest)} "
            f"(MAX_APPEAL_WINDOW), not {format_duration(seconds)}")
    if seconds == current:
        raise CommitteeProposalError(f"the appeal window is already {format_duration(seconds)}")
    text = "\n".join([
        f"# Set the committee's appeal window to {format_duration(seconds)}",
        "",
        *([description.strip(), ""] if description.strip() else []),
        f"- appeal window: {format_duration(current)} -> {format_duration(seconds)}",
        ("It applies to every settlement not yet finalized: reverse and finalize compare the "
         "time with settledAt plus the window at that moment."),
        (f"Action: VerifierCommittee {committee.address}.setAppealWindow({seconds}) "
         "(callable only by the DAO timelock)"),
    ])
    return AppealWindowProposal(committee.address, current, seconds, text)


# -- reward roots -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RootReverseProposal:
    """What ``propose`` sends to reverse an epoch's reward root: one
    ``RewardDistributor.reverse``."""

    distributor_address: str
    epoch: int
    description: str

    @property
    def calldata(self) -> bytes:
        return keccak(text="reverse(uint256)")[:4] + abi_encode(["uint256"], [self.epoch])

    @property
    def actions(self) -> tuple[list[str], list[int], list[bytes]]:
        return [self.distributor_address], [0], [self.calldata]


def plan_root_reverse(standing: EpochRoot, reason: str, *, distributor_address: str,
                      params: GovernanceParameters, now: int,
                      blocks: tuple[int, int] | None = None) -> RootReverseProposal:
    """A proposal to reverse ``standing`` (an epoch's root as ``epochInfo`` holds it), for a DAO
    with ``params`` at chain time ``now``; ``CommitteeProposalError`` when the distributor
    would refuse it at execution."""
    epoch = standing.epoch
    if not reason.strip():
        raise CommitteeProposalError("say why the epoch's table is wrong (--reason TEXT): "
                                     "voters read it")
    if standing.status == EpochStatus.NONE:
        raise CommitteeProposalError(f"epoch {epoch} has no attested reward root: nothing to "
                                     "reverse (`gym rewards status` lists the epochs)")
    if standing.status == EpochStatus.REVERSED:
        raise CommitteeProposalError(f"the reward root of epoch {epoch} was reversed already; "
                                     "the epoch may be attested again")
    needed = params.voting_delay + params.voting_period + params.timelock_delay + BLOCK_SLACK
    left = standing.final_at - now
    if now + needed >= standing.final_at:
        raise CommitteeProposalError(
            f"the appeal window of epoch {epoch}'s reward root ends at "
            f"{utc(standing.final_at)}, {'in ' + _span(left) if left > 0 else 'already'}; a "
            f"proposal made now executes at the earliest in {_span(needed)} (voting delay "
            f"{params.voting_delay} s + voting period {params.voting_period} s + timelock delay "
            f"{params.timelock_delay} s + {BLOCK_SLACK} s of blocks): it could never reverse in "
            "time. A root's window is fixed when it is attested: a longer one "
            "(`gym gov propose-params --reward-appeal-window`) helps only later roots")
    span = f" (blocks {blocks[0]}-{blocks[1]})" if blocks else ""
    text = "\n".join([
        f"# Reverse the reward root of epoch {epoch}",
        "",
        reason.strip(),
        "",
        (f"Epoch {epoch}{span}: root 0x{standing.root.hex()}, total "
         f"{format_gym(standing.total)}, table ipfs://{standing.table_cid} (`gym rewards show "
         f"{epoch}` prints it)"),
        (f"Attested at {utc(standing.attested_at)}; its appeal window ends "
         f"{utc(standing.final_at)} (in {_span(left)}); this proposal executes at the earliest "
         f"in {_span(needed)}"),
        ("Effect: nothing can be claimed from this root; the epoch may be attested again "
         "with a new root (the verifiers sign the table they compute)"),
        (f"Action: RewardDistributor {distributor_address}.reverse({epoch}) (callable only by "
         "the DAO timelock)"),
    ])
    return RootReverseProposal(to_checksum_address(distributor_address), epoch, text)


def check_distributor_governed_by(distributor: RewardDistributor, timelock_address: str) -> None:
    governance = to_checksum_address(distributor.value("governance"))
    if governance != to_checksum_address(timelock_address):
        raise CommitteeProposalError(
            f"the RewardDistributor at {distributor.address} is governed by {governance}, not "
            f"by this DAO's timelock {timelock_address}: a proposal could never act there")


def build_root_reverse(distributor: RewardDistributor, timelock_address: str,
                       params: GovernanceParameters, now: int, epoch: int,
                       reason: str) -> RootReverseProposal:
    """Read epoch ``epoch``'s root, then ``plan_root_reverse``."""
    check_distributor_governed_by(distributor, timelock_address)
    if epoch < 0:
        raise CommitteeProposalError(f"reward epochs start at 0, not {epoch}")
    return plan_root_reverse(distributor.epoch_root(epoch), reason,
                             distributor_address=distributor.address, params=params, now=now,
                             blocks=distributor.epoch_bounds(epoch))
