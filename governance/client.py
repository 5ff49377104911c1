"""The DAO client: delegate, propose curations, list proposals, vote (directly or by EIP-712
signature), queue and execute, against GymGovernor + TimelockController (DESIGN.md "Flows" 2).

Curation proposals are built by ``governance.curation`` (``build_curation``), the readable
text of custom errors by ``governance.reverts``; proposal states and vote types live in
``governance.proposals`` and are importable from here as before.

Votes: ``vote`` sends ``castVote``/``castVoteWithReason`` from the voter's own key;
``ballot_typed_data`` builds the EIP-712 ``Ballot(uint256 proposalId,uint8 support,address
voter,uint256 nonce)`` message (OpenZeppelin 5, domain read from the governor's ERC-5267
``eip712Domain``) for a wallet to sign, and ``cast_vote_by_sig`` lets anyone relay the
signature. Before sending, the client refuses what would be wasted or silently weightless:
a vote outside the Active state, a voter with no votes at the snapshot (OpenZeppelin would
record a vote of weight 0: we reject it instead), a second vote, and a signature that does not
recover to the voter at their current nonce (a replayed or forged one).

Transactions go through ``ledger.evm``, the repository's one transaction path. Reverts:
custom errors of the governor, the timelock, the token, the ledger and the node registry (an
executed curation reverts with the ledger's own error, bubbled up through the timelock) are
decoded into ``GovernorRevertError``, one line with the error, its values (states by name) and
what it means. Nodes and challenges are read through ``inference_node.registry.NodeRegistry``,
the one client of that contract.

On the devnet (chain id 31337) the governor's timestamp clock stands still while Anvil idles:
``propose`` and ``vote`` mine a block a second later when the chain's time has not yet passed
what they need (the proposer's delegation, the proposal's snapshot). The voting period and
the timelock delay are never skipped implicitly: ``advance_time`` (``gym devnet mine``) does it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from eth_account import Account
from eth_account.messages import encode_typed_data
from eth_utils import to_checksum_address
from web3 import Web3

from committee.client import CommitteeChallenge, VerifierCommittee, VerifierSlot
from committee.rewards.distributor import RewardDistributor
from contracts.gym_token import format_gym
from governance.appeals import (
    AppealWindowProposal,
    ReverseProposal,
    RootReverseProposal,
    build_appeal_window,
    build_reverse,
    build_root_reverse,
)
from governance.curation import CurationProposal, SourcedLeaf, build_curation, document_cid_of
from governance.devnet_time import advance_time, ensure_time_after, is_devnet, utc
from governance.errors import (
    CurationError,
    GovernanceError,
    NotProposerError,
    ParameterError,
    ProposalStateError,
    SignatureError,
    VotingPowerError,
)
from governance.proposals import (
    ActionDecoder,
    DecodedAction,
    GovernanceParameters,
    ParamsProposal,
    ProposalPlan,
    ProposalState,
    RewardParameters,
    SlashProposal,
    VoteType,
    plan_params_change,
)
from governance.reverts import format_revert_value, governance_error
from governance.slashing import build_slash, checksum_address
from inference_node.registry import ChallengeInfo, NodeRegistry, RegisteredNode
from ledger.chain import LedgerContract
from ledger.errors import LedgerError
from ledger.evm import ChainError, EvmConnection, TxResult
from ledger.signer import LazySigner

if TYPE_CHECKING:
    from ledger.content import ContentStore
    from ledger.logstore import LogStore

# What the client reads of the timelock when it was given no ABI for it.
_MIN_DELAY_ABI = [{"type": "function", "name": "getMinDelay", "stateMutability": "view",
                   "inputs": [], "outputs": [{"name": "", "type": "uint256"}]}]


# -- proposals as read from the chain ---------------------------------------------------------


@dataclass(frozen=True)
class Proposal:
    proposal_id: int
    proposer: str
    state: ProposalState
    description: str
    targets: list[str]
    calldatas: list[bytes]
    snapshot: int  # timepoint (seconds) of the vote weights; voting opens after it
    deadline: int  # last second of voting
    eta: int  # when a queued proposal can execute (0 unless queued)
    votes_against: int
    votes_for: int
    votes_abstain: int
    quorum: int  # For + Abstain needed (at the snapshot, or now while the snapshot is ahead)
    created_block: int | None = None
    values: list[int] = field(default_factory=list)  # wei sent with each action

    @property
    def title(self) -> str:
        first = self.description.strip().splitlines()[0] if self.description.strip() else ""
        return first.lstrip("# ").strip()

    @property
    def document_cid(self) -> str | None:
        return document_cid_of(self.description)


# -- the client -------------------------------------------------------------------------------


class GovernanceClient:
    """GymGovernor at ``governor_address``, its token and timelock, and the ledger it curates.

    ``private_key`` signs transactions unless a call passes its own ``key``; reads need none.
    ``from_block`` is where event scans start (the deployment block). ``node_registry_address``
    (optional) is the NodeRegistry whose nodes ``build_slash`` proposes to slash; its ABI
    defaults to the project's build of ``NodeRegistry``. ``committee_address`` (optional) is
    the VerifierCommittee whose settlements ``build_reverse`` proposes to reverse and whose
    appeal window ``build_appeal_window`` sets, read through ``committee.client``.
    ``reward_distributor_address`` (optional) is the RewardDistributor whose budget and appeal
    window ``build_params_change`` sets and whose roots ``build_root_reverse`` reverses, read
    through ``committee.rewards.distributor``.
    """

    def __init__(self, w3: Web3, governor_address: str, governor_abi: list[dict],
                 token_address: str, token_abi: list[dict], ledger: LedgerContract,
                 timelock_address: str, timelock_abi: list[dict] | None = None, *,
                 curated_log_id: int, private_key: str | None = None, from_block: int = 0,
                 node_registry_address: str | None = None,
                 node_registry_abi: list[dict] | None = None,
                 committee_address: str | None = None,
                 committee_abi: list[dict] | None = None,
                 reward_distributor_address: str | None = None,
                 key_source: Callable[[], str | None] | None = None):
        self.w3 = w3
        self.governor = w3.eth.contract(address=to_checksum_address(governor_address),
                                        abi=governor_abi)
        self.token = w3.eth.contract(address=to_checksum_address(token_address), abi=token_abi)
        self.ledger = ledger
        self.timelock_address = to_checksum_address(timelock_address)
        self.timelock = w3.eth.contract(address=self.timelock_address,
                                        abi=timelock_abi or _MIN_DELAY_ABI)
        self.curated_log_id = curated_log_id
        # ``key_source`` (without ``private_key``) picks the key when a transaction is first sent
        self._lazy_account = LazySigner(private_key, key_source)
        self.from_block = from_block
        self.registry = None
        if node_registry_address is not None:
            self.registry = NodeRegistry(w3, node_registry_address, from_block=from_block,
                                         abi=node_registry_abi)
        registry_abi = self.registry.contract.abi if self.registry is not None else []
        self.committee = None
        if committee_address is not None:
            self.committee = VerifierCommittee(w3, committee_address, from_block=from_block,
                                               abi=committee_abi)
        committee_abi = self.committee.abi if self.committee is not None else []
        self.reward_distributor = None
        if reward_distributor_address is not None:
            self.reward_distributor = RewardDistributor(w3, reward_distributor_address)
        distributor_abi = (self.reward_distributor.abi if self.reward_distributor is not None
                           else [])
        self.evm = EvmConnection(w3, [governor_abi, ledger.abi, token_abi, timelock_abi or [],
                                      registry_abi, committee_abi, distributor_abi],
                                 format_value=format_revert_value,
                                 own_errors=(GovernanceError,))
        known = {self.governor.address: ("GymGovernor", governor_abi),
                 self.timelock_address: ("TimelockController", timelock_abi or _MIN_DELAY_ABI),
                 self.token.address: ("GymToken", token_abi),
                 ledger.address: ("ExperienceLedger", ledger.abi)}
        if self.registry is not None:
            known[self.registry.address] = ("NodeRegistry", registry_abi)
        if self.committee is not None:
            known[self.committee.address] = ("VerifierCommittee", committee_abi)
        if self.reward_distributor is not None:
            known[self.reward_distributor.address] = ("RewardDistributor", distributor_abi)
        self.decoder = ActionDecoder(known)

    @property
    def account(self):
        """The account that signs by default, or None (read-only)."""
        return self._lazy_account.get()

    # -- accounts and delegation --------------------------------------------------------------

    def _signer(self, key: str | None):
        if key is not None:
            return Account.from_key(key)
        if self.account is None:
            raise GovernanceError("no signing key: set GYM_VOTER_KEY, or on the devnet pass "
                                  "--account N (a public Anvil account)")  # built without one
        return self.account

    def votes(self, address: str, timepoint: int | None = None) -> int:
        """Votes of ``address`` now, or at a past ``timepoint``."""
        address = to_checksum_address(address)
        with self.rpc_errors():
            if timepoint is None:
                return self.token.functions.getVotes(address).call()
            return self.token.functions.getPastVotes(address, timepoint).call()

    def delegate(self, to: str | None = None, key: str | None = None) -> TxResult:
        """Delegate the signer's token votes to ``to`` (default: itself)."""
        signer = self._signer(key)
        target = to_checksum_address(to) if to else signer.address
        return self.send(self.token.functions.delegate(target), signer)[1]

    # -- curation -----------------------------------------------------------------------------

    def build_curation(self, store: LogStore, content: ContentStore, log_name: str,
                       indices: Sequence[int], description: str = "",
                       evidence: Sequence[str] = ()) -> CurationProposal:
        """A proposal to curate leaves ``indices`` of local publisher log ``log_name`` into this
        DAO's curated library (``governance.curation.build_curation``)."""
        return build_curation(self.ledger, self.curated_log_id, store, content, log_name,
                              indices, description, evidence)

    def build_curation_from_chain(self, content: ContentStore, log: str, indices: Sequence[int],
                                  description: str = "", progress=None,
                                  evidence: Sequence[str] = ()) -> CurationProposal:
        """The same proposal for a published log named ``log`` on chain (or its on-chain id),
        read from the chain and the content endpoint alone
        (``governance.curation.build_curation_from_chain``)."""
        from governance.curation import build_curation_from_chain
        from ledger.chain import resolve_log_id

        try:
            log_id = resolve_log_id(self.ledger, log, from_block=self.from_block,
                                    curated_log_id=self.curated_log_id)
        except LedgerError as exc:
            raise CurationError(str(exc)) from None
        return build_curation_from_chain(self.ledger, self.curated_log_id, content, log_id,
                                         indices, description, from_block=self.from_block,
                                         progress=progress, evidence=evidence)

    def check_can_propose(self, proposer: str, remedy: str) -> None:
        """``VotingPowerError`` (ending in ``remedy``) unless ``proposer`` holds the governor's
        proposal threshold in votes."""
        with self.rpc_errors():
            threshold = self.governor.functions.proposalThreshold().call()
        votes = self.votes(proposer)
        if votes < threshold:
            raise VotingPowerError(f"{proposer} has {format_gym(votes)} of votes; proposing needs "
                                   f"{format_gym(threshold)}: {remedy}")

    def propose(self, proposal: ProposalPlan, key: str | None = None) -> tuple[int, TxResult]:
        """Submit ``proposal`` (a ``CurationProposal``, ``ParamsProposal``, ``SlashProposal``,
        ``ReverseProposal``, ``AppealWindowProposal`` or ``RootReverseProposal``);
        returns its id and the transaction."""
        signer = self._signer(key)
        self.check_can_propose(signer.address, "hold GYM and delegate (`gym gov delegate`)")
        if is_devnet(self.w3):  # the proposer's votes are read one second before `propose`
            ensure_time_after(self.w3, self.w3.eth.get_block("latest")["timestamp"])
        targets, values, calldatas = proposal.actions
        receipt, result = self.send(
            self.governor.functions.propose(targets, values, calldatas, proposal.description),
            signer)
        created = self.governor.events.ProposalCreated().process_receipt(receipt)
        return created[0]["args"]["proposalId"], result

    # -- governance parameters ----------------------------------------------------------------

    def governance_parameters(self) -> GovernanceParameters:
        """The governor's voting delay, period, threshold and quorum, and the timelock delay."""
        functions = self.governor.functions
        with self.rpc_errors():
            return GovernanceParameters(
                voting_delay=functions.votingDelay().call(),
                voting_period=functions.votingPeriod().call(),
                proposal_threshold=functions.proposalThreshold().call(),
                quorum_numerator=functions.quorumNumerator().call(),
                timelock_delay=self.timelock.functions.getMinDelay().call())

    def reward_parameters(self) -> RewardParameters:
        """The RewardDistributor's budget and split of the current epoch, its appeal window,
        and what its treasury holds and allows it; ``ParameterError`` when the distributor is
        not governed by this DAO's timelock."""
        distributor = self._distributor()
        with self.rpc_errors():
            governance = distributor.value("governance")
            if to_checksum_address(governance) != self.timelock_address:
                raise ParameterError(
                    f"the RewardDistributor at {distributor.address} is governed by "
                    f"{governance}, not by this DAO's timelock {self.timelock_address}: a "
                    "proposal could never change it")
            epoch = distributor.current_epoch()
            budget, pool_bps = distributor.budget_of(epoch)
            treasury = to_checksum_address(distributor.value("treasury"))
            return RewardParameters(
                budget=budget, pool_bps=pool_bps,
                appeal_window=distributor.value("appealWindow"),
                max_appeal_window=distributor.value("MAX_APPEAL_WINDOW"),
                current_epoch=epoch, treasury=treasury,
                treasury_balance=self.token.functions.balanceOf(treasury).call(),
                treasury_allowance=self.token.functions.allowance(
                    treasury, distributor.address).call())

    def build_params_change(self, *, voting_delay: int | None = None,
                            voting_period: int | None = None,
                            proposal_threshold: int | None = None,
                            quorum_numerator: int | None = None,
                            timelock_delay: int | None = None,
                            reward_budget: int | None = None,
                            reward_split: Sequence[int] | None = None,
                            reward_appeal_window: int | None = None,
                            description: str = "") -> ParamsProposal:
        """A proposal that sets each given parameter (seconds; threshold in token base units;
        quorum in percent of the supply; the reward budget in token base units per epoch, its
        split as four basis points: data, compute, verification, availability). Raises
        ``ParameterError`` before anything is sent for a value the contracts would refuse,
        that changes nothing, or that would lock governance (see
        ``governance.proposals.plan_params_change``)."""
        wanted = {"voting_delay": voting_delay, "voting_period": voting_period,
                  "proposal_threshold": proposal_threshold,
                  "quorum_numerator": quorum_numerator, "timelock_delay": timelock_delay,
                  "reward_budget": reward_budget,
                  "reward_split": tuple(reward_split) if reward_split is not None else None,
                  "reward_appeal_window": reward_appeal_window}
        rewards = None
        if any(value is not None for value in (reward_budget, reward_split,
                                               reward_appeal_window)):
            rewards = self.reward_parameters()
        with self.rpc_errors():
            supply = self.token.functions.totalSupply().call()
        return plan_params_change(
            self.governance_parameters(), wanted, governor_address=self.governor.address,
            timelock_address=self.timelock_address, total_supply=supply, description=description,
            rewards=rewards,
            distributor_address=self.reward_distributor.address if rewards else None)

    # -- node slashing ------------------------------------------------------------------------

    def _registry(self) -> NodeRegistry:
        if self.registry is None:
            raise GovernanceError("no NodeRegistry is known to this client: the deployment names "
                                  "none (run `gym devnet up --redeploy`), or set "
                                  "GYM_NODE_REGISTRY to its address")
        return self.registry

    def node(self, operator: str) -> RegisteredNode:
        """The NodeRegistry's record of ``operator`` (``exists`` is False when it has none)."""
        operator = checksum_address(operator, "node")
        with self.rpc_errors():
            return self._registry().node_record(operator)

    def challenge(self, challenge_id: int) -> ChallengeInfo:
        """Challenge ``challenge_id`` (status ``NONE`` when it does not exist)."""
        with self.rpc_errors():
            return self._registry().challenge_of(challenge_id)

    def challenges_against(self, operator: str) -> list[ChallengeInfo]:
        """Every challenge opened against ``operator``, oldest first, with its status now."""
        operator = checksum_address(operator, "node")
        with self.rpc_errors():
            return self._registry().challenges_against(operator)

    def build_slash(self, operator: str, amount: int, reason: str, *,
                    challenge_id: int | None = None,
                    beneficiary: str | None = None) -> SlashProposal:
        """A proposal that slashes ``amount`` (token base units) of node ``operator``'s stake
        (``governance.slashing.build_slash``: ``SlashError`` for what the registry would refuse;
        ``challenge_id`` defaults to the one open challenge, ``beneficiary`` to the timelock)."""
        with self.rpc_errors():
            return build_slash(self._registry(), self.timelock_address, operator, amount, reason,
                               challenge_id=challenge_id, beneficiary=beneficiary)

    # -- the verifier committee -------------------------------------------------------------

    def _committee(self) -> VerifierCommittee:
        if self.committee is None:
            raise GovernanceError("no VerifierCommittee is known to this client: the deployment "
                                  "names none (run `gym devnet up --redeploy`)")
        return self.committee

    def committee_challenge(self, challenge_id: int) -> CommitteeChallenge:
        """Committee challenge ``challenge_id`` (status ``NONE`` when it does not exist)."""
        with self.rpc_errors():
            return self._committee().challenge(challenge_id)

    def committee_slots(self) -> list[VerifierSlot]:
        """Every verifier slot of the committee, index 0 up."""
        with self.rpc_errors():
            return self._committee().slots()

    def build_reverse(self, challenge_id: int, reason: str) -> ReverseProposal:
        """A proposal that reverses committee challenge ``challenge_id``'s settlement
        (``governance.appeals.build_reverse``: ``CommitteeProposalError`` when it does not
        exist, is not Settled, or its appeal window ends before a proposal made now executes)."""
        with self.rpc_errors():
            return build_reverse(self._committee(), self.timelock_address,
                                 self.governance_parameters(), self.now(), challenge_id, reason)

    def build_appeal_window(self, seconds: int, description: str = "") -> AppealWindowProposal:
        """A proposal that sets the committee's appeal window to ``seconds`` (refused above
        ``MAX_APPEAL_WINDOW()`` or when it changes nothing)."""
        with self.rpc_errors():
            return build_appeal_window(self._committee(), self.timelock_address, seconds,
                                       description)

    # -- the reward distributor --------------------------------------------------------------

    def _distributor(self) -> RewardDistributor:
        if self.reward_distributor is None:
            raise ParameterError("no RewardDistributor is known to this client: the deployment "
                                 "names none (run `gym devnet up --redeploy`)")
        return self.reward_distributor

    def build_root_reverse(self, epoch: int, reason: str) -> RootReverseProposal:
        """A proposal that reverses epoch ``epoch``'s attested reward root
        (``governance.appeals.build_root_reverse``: ``CommitteeProposalError`` when it has none,
        or its appeal window ends before a proposal made now executes)."""
        with self.rpc_errors():
            return build_root_reverse(self._distributor(), self.timelock_address,
                                      self.governance_parameters(), self.now(), epoch, reason)

    # -- reading proposals --------------------------------------------------------------------

    def proposal_ids(self) -> list[int]:
        """Every proposal id, oldest first (GovernorStorage enumeration)."""
        with self.rpc_errors():
            count = self.governor.functions.proposalCount().call()
            return [self.governor.functions.proposalDetailsAt(i).call()[0] for i in range(count)]

    def _created_events(self) -> dict[int, Any]:
        with self.rpc_errors():
            events = self.governor.events.ProposalCreated().get_logs(from_block=self.from_block)
        return {e["args"]["proposalId"]: e for e in events}

    def proposal(self, proposal_id: int, *, _created: dict[int, Any] | None = None) -> Proposal:
        created = (self._created_events() if _created is None else _created).get(proposal_id)
        if created is None:
            raise GovernanceError(f"no proposal {proposal_id} on this governor (see `gym gov list`)")
        functions = self.governor.functions
        with self.rpc_errors():
            state = ProposalState(functions.state(proposal_id).call())
            snapshot = functions.proposalSnapshot(proposal_id).call()
            deadline = functions.proposalDeadline(proposal_id).call()
            eta = functions.proposalEta(proposal_id).call()
            against, for_, abstain = functions.proposalVotes(proposal_id).call()
            now = self.w3.eth.get_block("latest")["timestamp"]
            quorum = functions.quorum(snapshot if snapshot < now else now - 1).call()
        args = created["args"]
        return Proposal(proposal_id, to_checksum_address(args["proposer"]), state,
                        args["description"], [to_checksum_address(t) for t in args["targets"]],
                        [bytes(c) for c in args["calldatas"]], snapshot, deadline, eta, against,
                        for_, abstain, quorum, created["blockNumber"], list(args["values"]))

    def proposals(self) -> list[Proposal]:
        created = self._created_events()
        return [self.proposal(pid, _created=created) for pid in self.proposal_ids()]

    def now(self) -> int:
        """The chain's time: the head block's timestamp (the governor's clock)."""
        with self.rpc_errors():
            return self.w3.eth.get_block("latest")["timestamp"]

    # -- voting -------------------------------------------------------------------------------

    def voting_weight(self, proposal_id: int, voter: str, *, reach_snapshot: bool = True,
                      ahead: bool = False) -> int:
        """The voter's weight on the proposal; ``ProposalStateError`` when the proposal takes no
        votes now, ``VotingPowerError`` when the vote would weigh nothing.

        With ``reach_snapshot`` on the devnet a Pending proposal's snapshot is passed first (the
        voting delay skipped). With ``ahead`` a proposal that is still Pending answers the voter's
        current votes: a ballot signed ahead of the snapshot, whose weight is checked again when
        it is relayed.
        """
        functions = self.governor.functions
        with self.rpc_errors():
            state = ProposalState(functions.state(proposal_id).call())
            snapshot = functions.proposalSnapshot(proposal_id).call()
            deadline = functions.proposalDeadline(proposal_id).call()
        if state == ProposalState.PENDING and reach_snapshot and is_devnet(self.w3):
            ensure_time_after(self.w3, snapshot)  # devnet: skip the voting delay
            with self.rpc_errors():
                state = ProposalState(functions.state(proposal_id).call())
        if state == ProposalState.PENDING and ahead:
            return self.votes(voter)
        if state != ProposalState.ACTIVE:
            raise ProposalStateError(
                f"proposal {proposal_id} is {state.label}: votes are taken only while it is "
                f"Active, after {utc(snapshot)} until {utc(deadline)} (chain time now "
                f"{utc(self.now())})")
        weight = self.votes(voter, snapshot)
        if weight == 0:
            raise VotingPowerError(
                f"{voter} had no votes at the proposal's snapshot ({utc(snapshot)}): its "
                "vote would count 0, so it is not sent; votes come from GYM held and delegated "
                "before a proposal is made")
        return weight

    def _check_can_vote(self, proposal_id: int, voter: str) -> int:
        """Refuse a vote that would fail or weigh nothing; returns the voter's weight."""
        weight = self.voting_weight(proposal_id, voter)
        with self.rpc_errors():
            if self.governor.functions.hasVoted(proposal_id, voter).call():
                raise ProposalStateError(f"{voter} has already voted on proposal {proposal_id}")
        return weight

    def vote(self, proposal_id: int, support: VoteType | str | int, reason: str = "",
             key: str | None = None) -> TxResult:
        """Vote with the signer's own key (``castVoteWithReason`` when a reason is given)."""
        support = VoteType.parse(support)
        signer = self._signer(key)
        self._check_can_vote(proposal_id, signer.address)
        functions = self.governor.functions
        call = (functions.castVoteWithReason(proposal_id, int(support), reason) if reason
                else functions.castVote(proposal_id, int(support)))
        return self.send(call, signer)[1]

    def ballot_typed_data(self, proposal_id: int, support: VoteType | str | int, voter: str,
                          nonce: int | None = None) -> dict:
        """The EIP-712 message a wallet signs for ``castVoteBySig`` (OpenZeppelin 5 ``Ballot``,
        nonce default: the voter's current one), in ``eth_signTypedData_v4`` form.

        uint256 values (``chainId``, ``proposalId``, ``nonce``) are decimal strings, as EIP-712
        tools read them: a proposal id has up to 78 digits, which JavaScript's ``JSON.parse``
        rounds to another number and Foundry's ``cast wallet sign --data`` refuses as a bare
        JSON number. ``eth_account`` reads the strings as the same integers.
        """
        voter = to_checksum_address(voter)
        with self.rpc_errors():
            _, name, version, chain_id, verifying, _, _ = self.governor.functions.eip712Domain().call()
            if nonce is None:
                nonce = self.governor.functions.nonces(voter).call()
        return {
            "types": {
                "EIP712Domain": [
                    {"name": "name", "type": "string"}, {"name": "version", "type": "string"},
                    {"name": "chainId", "type": "uint256"},
                    {"name": "verifyingContract", "type": "address"}],
                "Ballot": [
                    {"name": "proposalId", "type": "uint256"}, {"name": "support", "type": "uint8"},
                    {"name": "voter", "type": "address"}, {"name": "nonce", "type": "uint256"}],
            },
            "primaryType": "Ballot",
            "domain": {"name": name, "version": version, "chainId": str(chain_id),
                       "verifyingContract": to_checksum_address(verifying)},
            "message": {"proposalId": str(proposal_id), "support": int(VoteType.parse(support)),
                        "voter": voter, "nonce": str(nonce)},
        }

    def cast_vote_by_sig(self, proposal_id: int, support: VoteType | str | int, voter: str,
                         signature: bytes | str, key: str | None = None, *,
                         verify: bool = True) -> TxResult:
        """Relay ``voter``'s signed ballot, paying the gas from the signer's key.

        With ``verify`` (the default) the signature must recover to ``voter`` over the ballot at
        the voter's current nonce, else ``SignatureError`` (a replayed signature was made for a
        nonce already used); ``verify=False`` leaves the judgement to the contract.
        """
        support = VoteType.parse(support)
        voter = to_checksum_address(voter)
        if isinstance(signature, str):
            signature = bytes.fromhex(signature.removeprefix("0x"))
        if verify:
            self._check_can_vote(proposal_id, voter)
            typed = self.ballot_typed_data(proposal_id, support, voter)
            try:
                signer = Account.recover_message(encode_typed_data(full_message=typed),
                                                 signature=signature)
            except (ValueError, TypeError) as exc:
                raise SignatureError(f"the ballot signature is malformed ({exc})") from None
            if signer != voter:
                raise SignatureError(
                    f"the signature is not {voter}'s ballot ({support.name.lower()} on proposal "
                    f"{proposal_id}) at its current nonce {typed['message']['nonce']}: it was "
                    f"made for another ballot or key, or already used (signatures are good once)")
        call = self.governor.functions.castVoteBySig(proposal_id, int(support), voter, signature)
        return self.send(call, self._signer(key))[1]

    # -- queue and execute ------------------------------------------------------------------

    def queue(self, proposal_id: int, key: str | None = None) -> TxResult:
        """Queue a Succeeded proposal in the timelock (anyone may)."""
        return self.send(self.governor.functions.queue(proposal_id), self._signer(key))[1]

    def execute(self, proposal_id: int, key: str | None = None) -> TxResult:
        """Execute a Queued proposal whose timelock delay has passed (anyone may)."""
        return self.send(self.governor.functions.execute(proposal_id), self._signer(key))[1]

    def cancel(self, proposal_id: int, key: str | None = None, *,
               verify: bool = True) -> TxResult:
        """Cancel a Pending proposal: only its proposer may, and only before voting opens.

        Sends OpenZeppelin's ``cancel(targets, values, calldatas, descriptionHash)`` with the
        proposal's own actions (``proposalDetails``). With ``verify`` (the default) the client
        first refuses, with ``ProposalStateError`` or ``NotProposerError``, what the governor
        would refuse; ``verify=False`` leaves it to the contract (``GovernorUnableToCancel``).
        """
        signer = self._signer(key)
        functions = self.governor.functions
        with self.rpc_errors():
            targets, values, calldatas, description_hash = \
                functions.proposalDetails(proposal_id).call()
        if verify:
            with self.rpc_errors():
                state = ProposalState(functions.state(proposal_id).call())
                proposer = to_checksum_address(functions.proposalProposer(proposal_id).call())
                snapshot = functions.proposalSnapshot(proposal_id).call()
            if proposer != signer.address:
                raise NotProposerError(f"{signer.address} did not make proposal {proposal_id}: "
                                       f"only its proposer {proposer} can cancel it")
            if state == ProposalState.PENDING and is_devnet(self.w3):
                # An idle Anvil's head block stands still while its next block takes the wall
                # clock's time: what counts is the time the cancel will be mined at.
                with self.rpc_errors():
                    mined_at = self.w3.eth.get_block("pending")["timestamp"]
                if mined_at > snapshot:
                    state = ProposalState.ACTIVE
            if state != ProposalState.PENDING:
                raise ProposalStateError(
                    f"proposal {proposal_id} is {state.label}: a proposal can be canceled only "
                    f"while Pending, before voting opens (after {utc(snapshot)})")
        call = functions.cancel(targets, values, calldatas, description_hash)
        return self.send(call, signer)[1]

    def describe_actions(self, proposal: Proposal) -> list[DecodedAction]:
        """``proposal``'s actions, each decoded into one readable line."""
        values = proposal.values or [0] * len(proposal.targets)
        return [self.decoder.decode(t, c, v)
                for t, c, v in zip(proposal.targets, proposal.calldatas, values, strict=True)]

    def advance_time(self, seconds: int = 0, blocks: int = 1) -> int:
        """Devnet only: move the clock and mine; returns the new chain time."""
        return advance_time(self.w3, seconds, blocks)["timestamp"]

    # -- transactions and errors ------------------------------------------------------------

    def send(self, call, signer) -> tuple[Any, TxResult]:
        """Send ``call`` signed by ``signer`` through ``ledger.evm``; its receipt and result."""
        with self.rpc_errors():
            receipt = self.evm.send(call, signer)
        return receipt, TxResult.of(receipt)

    @contextmanager
    def rpc_errors(self) -> Iterator[None]:
        """Turn web3's revert and transport errors, as ``ledger.evm`` words them, into the
        package's errors: a custom error into ``GovernorRevertError``, said with what it means."""
        try:
            with self.evm.rpc_errors():
                yield
        except ChainError as exc:
            raise governance_error(exc) from None

    def decode_revert(self, data: bytes | str) -> GovernanceError:
        """The error that revert ``data`` encodes, decoded against every contract involved."""
        return governance_error(self.evm.decode_revert(data))



__all__ = ["CurationProposal", "GovernanceClient", "Proposal", "ProposalState", "SourcedLeaf",
           "VoteType"]
