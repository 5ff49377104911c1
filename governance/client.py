"""The DAO client: delegate, propose curations, list proposals, vote (directly or by EIP-712
signature), queue and execute, against GymGovernor + TimelockController (DESIGN.md "Flows" 2).

A curation proposal is one action: ``ExperienceLedger.appendManyFromLog(curatedLogId,
leaves)`` on the curated library the timelock owns. ``build_curation`` makes it from a local
publisher log (``ledger.LogStore``): it takes the log's last anchored checkpoint covering the
requested indices, checks that the chain holds that checkpoint's root, fetches every entry
from the content store, computes each RFC 9162 inclusion proof against the checkpoint and
verifies it locally (the ledger verifies it again on-chain when the timelock executes). The
entry bodies go into one JSON document on the content store, whose CID the proposal's
description names beside a human summary, so voters read what they vote on.

Votes: ``vote`` sends ``castVote``/``castVoteWithReason`` from the voter's own key;
``ballot_typed_data`` builds the EIP-712 ``Ballot(uint256 proposalId,uint8 support,address
voter,uint256 nonce)`` message (OpenZeppelin 5, domain read from the governor's ERC-5267
``eip712Domain``) for a wallet to sign, and ``cast_vote_by_sig`` lets anyone relay the
signature. Before sending, the client refuses what would be wasted or silently weightless:
a vote outside the Active state, a voter with no votes at the snapshot (OpenZeppelin would
record a vote of weight 0: we reject it instead), a second vote, and a signature that does not
recover to the voter at their current nonce (a replayed or forged one).

Reverts: custom errors of the governor, the timelock, the token and the ledger (an executed
curation reverts with the ledger's own error, bubbled up through the timelock) are decoded
into ``GovernorRevertError``, one line with the error, its values (states by name) and what
it means.

On the devnet (chain id 31337) the governor's timestamp clock stands still while Anvil idles:
``propose`` and ``vote`` mine a block a second later when the chain's time has not yet passed
what they need (the proposer's delegation, the proposal's snapshot). The voting period and
the timelock delay are never skipped implicitly: ``advance_time`` (``gym devnet mine``) does it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from eth_abi import decode as abi_decode
from eth_abi import encode as abi_encode
from eth_abi.exceptions import DecodingError
from eth_account import Account
from eth_account.messages import encode_typed_data
from eth_utils import function_abi_to_4byte_selector, keccak, to_checksum_address
from web3 import Web3
from web3.exceptions import ContractLogicError, Web3Exception

from governance.devnet_time import advance_time, ensure_time_after, is_devnet
from governance.errors import (
    CurationError,
    GovernanceError,
    GovernorRevertError,
    NotProposerError,
    ProposalStateError,
    SignatureError,
    SlashError,
    VotingPowerError,
)
from governance.proposals import (
    ActionDecoder,
    ChallengeInfo,
    ChallengeStatus,
    DecodedAction,
    GovernanceParameters,
    NodeInfo,
    ParamsProposal,
    ProposalPlan,
    SlashProposal,
    check_slash_amount,
    format_gym,
    plan_params_change,
    plan_slash,
)
from ledger.chain import LedgerContract, LogKind, TxResult
from ledger.entries import MAX_ENTRY_BYTES
from ledger.errors import LedgerError, NotFoundError, VerificationError
from ledger.json_input import JSONInputError, parse_json
from ledger.multiformats import CID
from ledger.publish import PublishError, check_chain_binding
from ledger.rfc9162 import verify_inclusion

if TYPE_CHECKING:
    from ledger.content import ContentStore
    from ledger.logstore import LogStore

RECEIPT_TIMEOUT_S = 120
DOCUMENT_TYPE = "curation-proposal"
_DOCUMENT_LINE = re.compile(r"^Proposal document: ipfs://(\S+)$", re.MULTILINE)
_APPEND_MANY = "appendManyFromLog(uint256,(uint256,uint64,uint64,bytes32,bytes,bytes32[])[])"
_APPEND_MANY_TYPES = ["uint256", "(uint256,uint64,uint64,bytes32,bytes,bytes32[])[]"]
# What the client reads of the timelock when it was given no ABI for it.
_MIN_DELAY_ABI = [{"type": "function", "name": "getMinDelay", "stateMutability": "view",
                   "inputs": [], "outputs": [{"name": "", "type": "uint256"}]}]


class ProposalState(IntEnum):
    """IGovernor.ProposalState, in the contract's order."""

    PENDING = 0
    ACTIVE = 1
    CANCELED = 2
    DEFEATED = 3
    SUCCEEDED = 4
    QUEUED = 5
    EXPIRED = 6
    EXECUTED = 7

    @property
    def label(self) -> str:
        return self.name.capitalize()


class VoteType(IntEnum):
    """GovernorCountingSimple's support values."""

    AGAINST = 0
    FOR = 1
    ABSTAIN = 2

    @classmethod
    def parse(cls, value: str | int) -> VoteType:
        if isinstance(value, int):
            return cls(value)
        try:
            return cls[value.strip().upper()]
        except KeyError:
            raise GovernanceError(f"a vote is for, against or abstain, not {value!r}") from None


def _states_of(bitmap: int) -> list[str]:
    return [s.label for s in ProposalState if bitmap & (1 << s)]


# -- curation proposals -----------------------------------------------------------------------


@dataclass(frozen=True)
class SourcedLeaf:
    """IExperienceLedger.SourcedLeaf: leaf ``leaf_index`` of publisher log ``source_log_id``
    at its anchored checkpoint ``source_size``, with its audit path."""

    source_log_id: int
    source_size: int
    leaf_index: int
    leaf_hash: bytes
    entry_cid: str
    inclusion_proof: tuple[bytes, ...]

    def as_abi(self) -> tuple:
        return (self.source_log_id, self.source_size, self.leaf_index, self.leaf_hash,
                CID.parse(self.entry_cid).to_bytes(), list(self.inclusion_proof))


@dataclass(frozen=True)
class CurationProposal:
    """What ``propose`` sends: one ``appendManyFromLog`` call on the curated library."""

    ledger_address: str
    curated_log_id: int
    leaves: tuple[SourcedLeaf, ...]
    description: str
    document_cid: str  # the JSON document with the entry bodies, on the content store
    source_log: str  # local name of the publisher log

    @property
    def calldata(self) -> bytes:
        selector = keccak(text=_APPEND_MANY)[:4]
        return selector + abi_encode(_APPEND_MANY_TYPES,
                                     [self.curated_log_id, [leaf.as_abi() for leaf in self.leaves]])

    @property
    def actions(self) -> tuple[list[str], list[int], list[bytes]]:
        """(targets, values, calldatas) as the governor takes them."""
        return [self.ledger_address], [0], [self.calldata]


def _entry_summary(index: int, cid: str, obj: dict) -> str:
    kind = obj.get("type", "?")
    if kind == "experience":
        text = obj.get("text", "")
        text = text if len(text) <= 120 else text[:117] + "..."
        return f"- leaf {index}: experience {obj.get('op')} [{obj.get('domain')}] {text!r} ({cid})"
    return f"- leaf {index}: {kind} entry ({cid})"


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
        found = _DOCUMENT_LINE.search(self.description)
        return found.group(1) if found else None


@dataclass
class _ErrorTable:
    by_selector: dict[bytes, dict] = field(default_factory=dict)

    def add(self, abi: Sequence[dict]) -> None:
        for item in abi:
            if item["type"] == "error":
                self.by_selector.setdefault(function_abi_to_4byte_selector(item), item)


# -- the client -------------------------------------------------------------------------------


class GovernanceClient:
    """GymGovernor at ``governor_address``, its token and timelock, and the ledger it curates.

    ``private_key`` signs transactions unless a call passes its own ``key``; reads need none.
    ``from_block`` is where event scans start (the deployment block). ``node_registry_address``
    (optional) is the NodeRegistry whose nodes ``build_slash`` proposes to slash; its ABI
    defaults to the project's build of ``NodeRegistry``.
    """

    def __init__(self, w3: Web3, governor_address: str, governor_abi: list[dict],
                 token_address: str, token_abi: list[dict], ledger: LedgerContract,
                 timelock_address: str, timelock_abi: list[dict] | None = None, *,
                 curated_log_id: int, private_key: str | None = None, from_block: int = 0,
                 node_registry_address: str | None = None,
                 node_registry_abi: list[dict] | None = None):
        self.w3 = w3
        self.governor = w3.eth.contract(address=to_checksum_address(governor_address),
                                        abi=governor_abi)
        self.token = w3.eth.contract(address=to_checksum_address(token_address), abi=token_abi)
        self.ledger = ledger
        self.timelock_address = to_checksum_address(timelock_address)
        self.timelock = w3.eth.contract(address=self.timelock_address,
                                        abi=timelock_abi or _MIN_DELAY_ABI)
        self.curated_log_id = curated_log_id
        self.account = Account.from_key(private_key) if private_key else None
        self.from_block = from_block
        self.registry = None
        if node_registry_address is not None:
            if node_registry_abi is None:
                from contracts import load_artifact

                node_registry_abi = load_artifact("NodeRegistry").abi
            self.registry = w3.eth.contract(address=to_checksum_address(node_registry_address),
                                            abi=node_registry_abi)
        self._errors = _ErrorTable()
        for abi in (governor_abi, ledger.abi, token_abi, timelock_abi or [],
                    node_registry_abi or []):
            self._errors.add(abi)
        known = {self.governor.address: ("GymGovernor", governor_abi),
                 self.timelock_address: ("TimelockController", timelock_abi or _MIN_DELAY_ABI),
                 self.token.address: ("GymToken", token_abi),
                 ledger.address: ("ExperienceLedger", ledger.abi)}
        if self.registry is not None:
            known[self.registry.address] = ("NodeRegistry", node_registry_abi)
        self.decoder = ActionDecoder(known)

    # -- accounts and delegation --------------------------------------------------------------

    def _signer(self, key: str | None):
        if key is not None:
            return Account.from_key(key)
        if self.account is None:
            raise GovernanceError("no signing key: set GYM_VOTER_KEY, or on the devnet pass "
                                  "--account N (a public Anvil account)")
        return self.account

    def votes(self, address: str, timepoint: int | None = None) -> int:
        """Votes of ``address`` now, or at a past ``timepoint``."""
        address = to_checksum_address(address)
        with self._calls():
            if timepoint is None:
                return self.token.functions.getVotes(address).call()
            return self.token.functions.getPastVotes(address, timepoint).call()

    def delegate(self, to: str | None = None, key: str | None = None) -> TxResult:
        """Delegate the signer's token votes to ``to`` (default: itself)."""
        signer = self._signer(key)
        target = to_checksum_address(to) if to else signer.address
        return self._send(self.token.functions.delegate(target), signer)[1]

    # -- curation -----------------------------------------------------------------------------

    def build_curation(self, store: LogStore, content: ContentStore, log_name: str,
                       indices: Sequence[int], description: str = "") -> CurationProposal:
        """A proposal to curate leaves ``indices`` of local publisher log ``log_name``.

        Raises ``CurationError`` for an unknown or unpublished log, an index beyond the last
        anchored checkpoint, a checkpoint the chain does not hold, an entry the content store
        lacks, a proof that does not verify, or a leaf already curated.
        """
        if not indices:
            raise CurationError("name at least one leaf index to curate")
        if len(set(indices)) != len(indices):
            raise CurationError(f"leaf indices repeat: {list(indices)}")
        try:
            log = store.get_log(log_name)
        except NotFoundError:
            known = ", ".join(info.name for info in store.list_logs()) or "none"
            raise CurationError(f"unknown log {log_name!r} (logs here: {known}); see "
                                "`gym ledger list`") from None
        try:  # a log created before a chain reset names another chain's log id
            chain_log_id = check_chain_binding(store, self.ledger, log_name)
        except PublishError as exc:
            raise CurationError(str(exc)) from None
        checkpoints = store.checkpoints(log_name)
        anchored = checkpoints[-1].size if checkpoints else 0
        bad = [i for i in indices if not 0 <= i < anchored]
        if bad:
            raise CurationError(
                f"leaf {bad[0]} of log {log_name!r} is not anchored: its last anchored checkpoint "
                f"has {anchored} leaves (the log has {log.size}); run `gym ledger publish "
                f"{log_name}` to anchor what was appended since")
        checkpoint = checkpoints[-1]
        try:
            info = self.ledger.log_info(chain_log_id)
            chain_root = self.ledger.root_at(chain_log_id, checkpoint.size)
        except LedgerError as exc:
            raise CurationError(f"cannot read log {log_name!r} from the chain: {exc}") from None
        if info.kind != LogKind.PUBLISHER:
            raise CurationError(f"log {log_name!r} is on-chain log {chain_log_id}, a "
                                "curated log: only publisher logs can be curated from")
        if chain_root != checkpoint.root:
            raise CurationError(
                f"the chain does not hold checkpoint {checkpoint.size} of log {log_name!r} as "
                f"recorded here (chain root 0x{chain_root.hex()}, local 0x{checkpoint.root.hex()}); "
                f"check with `gym audit {log_name}`")

        leaves, bodies, lines = [], [], []
        for index in indices:
            leaf = store.leaf(log_name, index)
            try:
                data = content.cat(leaf.cid)
            except LedgerError as exc:
                raise CurationError(f"leaf {index} of {log_name!r}: entry {leaf.cid} cannot be "
                                    f"read from the content store ({exc})") from None
            proof = store.inclusion_proof(log_name, index, checkpoint.size)
            try:
                verify_inclusion(leaf.leaf_hash, index, checkpoint.size, proof, checkpoint.root)
            except VerificationError as exc:
                raise CurationError(f"leaf {index} of {log_name!r}: its inclusion proof does not "
                                    f"verify against the anchored root ({exc})") from None
            with self._calls():
                if self.ledger.contract.functions.isCurated(self.curated_log_id,
                                                            leaf.leaf_hash).call():
                    raise CurationError(f"leaf {index} of {log_name!r} ({leaf.cid}) is already in "
                                        "the curated library")
            try:
                body = parse_json(data, max_bytes=MAX_ENTRY_BYTES, what=f"entry {leaf.cid}")
            except JSONInputError as exc:
                raise CurationError(f"leaf {index} of {log_name!r}: {exc}") from None
            if not isinstance(body, dict):
                raise CurationError(f"leaf {index} of {log_name!r}: entry {leaf.cid} is not a "
                                    "JSON object")
            leaves.append(SourcedLeaf(chain_log_id, checkpoint.size, index, leaf.leaf_hash,
                                      leaf.cid, tuple(proof)))
            bodies.append({"index": index, "cid": leaf.cid, "leaf_hash": "0x" + leaf.leaf_hash.hex(),
                           "entry": body})
            lines.append(_entry_summary(index, leaf.cid, body))

        document = {
            "type": DOCUMENT_TYPE, "v": 1,
            "curated_log_id": self.curated_log_id,
            "source": {"log": log_name, "log_id": chain_log_id, "size": checkpoint.size,
                       "root": "0x" + checkpoint.root.hex()},
            "entries": bodies,
        }
        document_cid = content.add_file(json.dumps(document, sort_keys=True, indent=1).encode(),
                                        pin=True)
        n = len(leaves)
        text = "\n".join([
            f"# Curate {n} entr{'y' if n == 1 else 'ies'} from {log_name}",
            "",
            *([description.strip(), ""] if description.strip() else []),
            (f"Source: publisher log {log_name} (on-chain log {chain_log_id}), anchored "
             f"checkpoint of size {checkpoint.size}, root 0x{checkpoint.root.hex()}"),
            f"Target: curated library (on-chain log {self.curated_log_id})",
            "Entries:",
            *lines,
            "",
            f"Proposal document: ipfs://{document_cid}",
        ])
        return CurationProposal(self.ledger.address, self.curated_log_id, tuple(leaves), text,
                                document_cid, log_name)

    def propose(self, proposal: ProposalPlan, key: str | None = None) -> tuple[int, TxResult]:
        """Submit ``proposal`` (a ``CurationProposal``, ``ParamsProposal`` or ``SlashProposal``);
        returns its id and the transaction."""
        signer = self._signer(key)
        with self._calls():
            threshold = self.governor.functions.proposalThreshold().call()
        if self.votes(signer.address) < threshold:
            raise VotingPowerError(
                f"{signer.address} has {self.votes(signer.address) / 1e18:g} votes; proposing "
                f"needs {threshold / 1e18:g}: hold GYM and delegate (`gym gov delegate`)")
        if is_devnet(self.w3):  # the proposer's votes are read one second before `propose`
            ensure_time_after(self.w3, self.w3.eth.get_block("latest")["timestamp"])
        targets, values, calldatas = proposal.actions
        receipt, result = self._send(
            self.governor.functions.propose(targets, values, calldatas, proposal.description),
            signer)
        created = self.governor.events.ProposalCreated().process_receipt(receipt)
        return created[0]["args"]["proposalId"], result

    # -- governance parameters ----------------------------------------------------------------

    def governance_parameters(self) -> GovernanceParameters:
        """The governor's voting delay, period, threshold and quorum, and the timelock delay."""
        functions = self.governor.functions
        with self._calls():
            return GovernanceParameters(
                voting_delay=functions.votingDelay().call(),
                voting_period=functions.votingPeriod().call(),
                proposal_threshold=functions.proposalThreshold().call(),
                quorum_numerator=functions.quorumNumerator().call(),
                timelock_delay=self.timelock.functions.getMinDelay().call())

    def build_params_change(self, *, voting_delay: int | None = None,
                            voting_period: int | None = None,
                            proposal_threshold: int | None = None,
                            quorum_numerator: int | None = None,
                            timelock_delay: int | None = None,
                            description: str = "") -> ParamsProposal:
        """A proposal that sets each given parameter (seconds; threshold in token base units;
        quorum in percent of the supply). Raises ``ParameterError`` before anything is sent
        for a value the contracts would refuse, that changes nothing, or that would lock
        governance (see ``governance.proposals.plan_params_change``)."""
        wanted = {"voting_delay": voting_delay, "voting_period": voting_period,
                  "proposal_threshold": proposal_threshold,
                  "quorum_numerator": quorum_numerator, "timelock_delay": timelock_delay}
        with self._calls():
            supply = self.token.functions.totalSupply().call()
        return plan_params_change(self.governance_parameters(), wanted,
                                  governor_address=self.governor.address,
                                  timelock_address=self.timelock_address, total_supply=supply,
                                  description=description)

    # -- node slashing ------------------------------------------------------------------------

    def _registry(self):
        if self.registry is None:
            raise GovernanceError("no NodeRegistry is known to this client: the deployment names "
                                  "none (run `gym devnet up --redeploy`), or set "
                                  "GYM_NODE_REGISTRY to its address")
        return self.registry

    def node(self, operator: str) -> NodeInfo:
        """The NodeRegistry's record of ``operator`` (``exists`` is False when it has none)."""
        operator = _address(operator, "node")
        with self._calls():
            n = self._registry().functions.nodeOf(operator).call()
        return NodeInfo(operator, to_checksum_address(n[0]), n[1], n[2], bytes(n[3]), n[4], n[5],
                        n[6])

    def _challenge_events(self, **filters: Any) -> dict[int, str]:
        with self._calls():
            events = self._registry().events.ChallengeOpened().get_logs(
                from_block=self.from_block, argument_filters=filters)
        return {e["args"]["challengeId"]: e["args"]["evidenceCid"] for e in events}

    def challenge(self, challenge_id: int) -> ChallengeInfo:
        """Challenge ``challenge_id`` (status ``NONE`` when it does not exist)."""
        with self._calls():
            c = self._registry().functions.challengeOf(challenge_id).call()
        evidence = self._challenge_events(challengeId=challenge_id).get(challenge_id) if c[3] else None
        return ChallengeInfo(challenge_id, to_checksum_address(c[0]), to_checksum_address(c[1]),
                             c[2], ChallengeStatus(c[3]), bytes(c[4]), evidence)

    def challenges_against(self, operator: str) -> list[ChallengeInfo]:
        """Every challenge opened against ``operator``, oldest first, with its status now."""
        operator = _address(operator, "node")
        return [self.challenge(cid) for cid in sorted(self._challenge_events(operator=operator))]

    def build_slash(self, operator: str, amount: int, reason: str, *,
                    challenge_id: int | None = None,
                    beneficiary: str | None = None) -> SlashProposal:
        """A proposal that slashes ``amount`` (token base units) of node ``operator``'s stake.

        ``challenge_id`` defaults to the one open challenge against the node. ``beneficiary``
        receives the slashed GYM: an address, ``"challenger"`` (whoever opened the challenge),
        or by default the DAO timelock (the treasury). Raises ``SlashError`` before anything is
        sent for what ``NodeRegistry.slash`` would refuse when the timelock executes it.
        """
        registry = self._registry()
        with self._calls():
            governance = to_checksum_address(registry.functions.governance().call())
            min_stake = registry.functions.minStake().call()
        if governance != self.timelock_address:
            raise SlashError(f"the NodeRegistry at {registry.address} is governed by {governance}, "
                             f"not by this DAO's timelock {self.timelock_address}: a proposal "
                             "could never slash there")
        node = self.node(operator)
        if not node.exists:
            with self._calls():
                operator_of = to_checksum_address(
                    registry.functions.operatorOfSigner(node.operator).call())
            if int(operator_of, 16):
                raise SlashError(f"{node.operator} is the receipt signer of node {operator_of}, "
                                 "not an operator: name the operator address")
        check_slash_amount(node, amount)
        if challenge_id is None:
            against = self.challenges_against(node.operator)
            open_ = [c for c in against if c.status == ChallengeStatus.OPEN]
            if not open_:
                upheld = [f"#{c.challenge_id}" for c in against
                          if c.status == ChallengeStatus.UPHELD]
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
            found = self.challenge(challenge_id)
        if beneficiary is None:
            paid_to, label = self.timelock_address, "the DAO timelock, its treasury"
        elif beneficiary.strip().lower() == "challenger":
            paid_to, label = found.challenger, f"the challenger of #{found.challenge_id}"
        else:
            paid_to, label = _address(beneficiary, "beneficiary"), ""
        return plan_slash(node, found, amount, reason, registry_address=registry.address,
                          beneficiary=paid_to, beneficiary_label=label, min_stake=min_stake)

    # -- reading proposals --------------------------------------------------------------------

    def proposal_ids(self) -> list[int]:
        """Every proposal id, oldest first (GovernorStorage enumeration)."""
        with self._calls():
            count = self.governor.functions.proposalCount().call()
            return [self.governor.functions.proposalDetailsAt(i).call()[0] for i in range(count)]

    def _created_events(self) -> dict[int, Any]:
        with self._calls():
            events = self.governor.events.ProposalCreated().get_logs(from_block=self.from_block)
        return {e["args"]["proposalId"]: e for e in events}

    def proposal(self, proposal_id: int, *, _created: dict[int, Any] | None = None) -> Proposal:
        created = (self._created_events() if _created is None else _created).get(proposal_id)
        if created is None:
            raise GovernanceError(f"no proposal {proposal_id} on this governor (see `gym gov list`)")
        functions = self.governor.functions
        with self._calls():
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
        with self._calls():
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
        with self._calls():
            state = ProposalState(functions.state(proposal_id).call())
            snapshot = functions.proposalSnapshot(proposal_id).call()
        if state == ProposalState.PENDING and reach_snapshot and is_devnet(self.w3):
            ensure_time_after(self.w3, snapshot)  # devnet: skip the voting delay
            with self._calls():
                state = ProposalState(functions.state(proposal_id).call())
        if state == ProposalState.PENDING and ahead:
            return self.votes(voter)
        if state != ProposalState.ACTIVE:
            raise ProposalStateError(
                f"proposal {proposal_id} is {state.label}: votes are taken only while it is "
                f"Active (after its snapshot at {snapshot}, until its deadline)")
        weight = self.votes(voter, snapshot)
        if weight == 0:
            raise VotingPowerError(
                f"{voter} had no votes at the proposal's snapshot (timepoint {snapshot}): its "
                "vote would count 0, so it is not sent; votes come from GYM held and delegated "
                "before a proposal is made")
        return weight

    def _check_can_vote(self, proposal_id: int, voter: str) -> int:
        """Refuse a vote that would fail or weigh nothing; returns the voter's weight."""
        weight = self.voting_weight(proposal_id, voter)
        with self._calls():
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
        return self._send(call, signer)[1]

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
        with self._calls():
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
        return self._send(call, self._signer(key))[1]

    # -- queue and execute ------------------------------------------------------------------

    def queue(self, proposal_id: int, key: str | None = None) -> TxResult:
        """Queue a Succeeded proposal in the timelock (anyone may)."""
        return self._send(self.governor.functions.queue(proposal_id), self._signer(key))[1]

    def execute(self, proposal_id: int, key: str | None = None) -> TxResult:
        """Execute a Queued proposal whose timelock delay has passed (anyone may)."""
        return self._send(self.governor.functions.execute(proposal_id), self._signer(key))[1]

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
        with self._calls():
            targets, values, calldatas, description_hash = \
                functions.proposalDetails(proposal_id).call()
        if verify:
            with self._calls():
                state = ProposalState(functions.state(proposal_id).call())
                proposer = to_checksum_address(functions.proposalProposer(proposal_id).call())
                snapshot = functions.proposalSnapshot(proposal_id).call()
            if proposer != signer.address:
                raise NotProposerError(f"{signer.address} did not make proposal {proposal_id}: "
                                       f"only its proposer {proposer} can cancel it")
            if state == ProposalState.PENDING and is_devnet(self.w3):
                # An idle Anvil's head block stands still while its next block takes the wall
                # clock's time: what counts is the time the cancel will be mined at.
                with self._calls():
                    mined_at = self.w3.eth.get_block("pending")["timestamp"]
                if mined_at > snapshot:
                    state = ProposalState.ACTIVE
            if state != ProposalState.PENDING:
                raise ProposalStateError(
                    f"proposal {proposal_id} is {state.label}: a proposal can be canceled only "
                    f"while Pending, before voting opens (after its snapshot at {snapshot})")
        call = functions.cancel(targets, values, calldatas, description_hash)
        return self._send(call, signer)[1]

    def describe_actions(self, proposal: Proposal) -> list[DecodedAction]:
        """``proposal``'s actions, each decoded into one readable line."""
        values = proposal.values or [0] * len(proposal.targets)
        return [self.decoder.decode(t, c, v)
                for t, c, v in zip(proposal.targets, proposal.calldatas, values, strict=True)]

    def advance_time(self, seconds: int = 0, blocks: int = 1) -> int:
        """Devnet only: move the clock and mine; returns the new chain time."""
        return advance_time(self.w3, seconds, blocks)["timestamp"]

    # -- transactions and errors ------------------------------------------------------------

    def _send(self, call, signer) -> tuple[Any, TxResult]:
        with self._calls():
            tx = call.build_transaction({  # estimates gas: a revert surfaces here, decoded
                "from": signer.address,
                "nonce": self.w3.eth.get_transaction_count(signer.address, "pending"),
                "chainId": self.w3.eth.chain_id,
            })
            tx_hash = self.w3.eth.send_raw_transaction(signer.sign_transaction(tx).raw_transaction)
            receipt = self.w3.eth.wait_for_transaction_receipt(tx_hash, timeout=RECEIPT_TIMEOUT_S)
        result = TxResult(tx_hash.to_0x_hex(), receipt["blockNumber"], receipt["gasUsed"])
        if receipt["status"] != 1:
            # Replay to learn why: the state or the time moved since estimation. Replayed on top
            # of the block it was mined in, the call sees that block's timestamp (what a
            # time-dependent check like a proposal's state saw) and, the transaction having
            # reverted, the state it ran on.
            with self._calls():
                call.call({"from": signer.address}, block_identifier=receipt["blockNumber"])
            raise GovernanceError(f"transaction {result.tx_hash} reverted in block "
                                  f"{result.block_number}")
        return receipt, result

    @contextmanager
    def _calls(self) -> Iterator[None]:
        """Turn web3's revert and transport errors into the package's errors."""
        try:
            yield
        except ContractLogicError as exc:
            data = exc.data if isinstance(exc.data, str) else None
            if data and data.startswith("0x") and len(data) >= 10:
                raise self.decode_revert(data) from None
            raise GovernanceError(f"the contract reverted: {exc.message or exc}") from None
        except (GovernanceError, LedgerError):
            raise
        except (OSError, Web3Exception, ValueError) as exc:
            url = getattr(self.w3.provider, "endpoint_uri", "the RPC endpoint")
            reason = (str(exc) or type(exc).__name__).splitlines()[0]
            raise GovernanceError(f"EVM RPC call to {url} failed ({reason}): is the devnet up? "
                                  "run `gym devnet up`") from None

    def decode_revert(self, data: bytes | str) -> GovernanceError:
        """The error that revert ``data`` encodes, decoded against every contract involved."""
        if isinstance(data, str):
            data = bytes.fromhex(data.removeprefix("0x"))
        selector, body = data[:4], data[4:]
        item = self._errors.by_selector.get(selector)
        try:
            if item is not None:
                decoded = abi_decode([i["type"] for i in item["inputs"]], body)
                values = {i["name"]: _format_value(item["name"], i, v)
                          for i, v in zip(item["inputs"], decoded)}
                return GovernorRevertError(item["name"], values, _meaning(item["name"], values))
            if selector == bytes.fromhex("08c379a0"):
                return GovernorRevertError("Error", {"message": abi_decode(["string"], body)[0]})
        except (DecodingError, ValueError):
            pass
        return GovernanceError(f"the contract reverted with unknown error data 0x{data.hex()[:72]}")


def _address(text: str, what: str) -> str:
    try:
        return to_checksum_address(text.strip())
    except (ValueError, TypeError):
        raise GovernanceError(f"the {what} is an address (0x and 40 hex digits), not "
                              f"{text!r}") from None


def _format_value(error: str, abi_input: dict, value: Any) -> Any:
    name, kind = abi_input["name"], abi_input["type"]
    if name == "current" and error == "GovernorUnexpectedProposalState":
        return ProposalState(value).label
    if name == "expectedStates" and error == "GovernorUnexpectedProposalState":
        return "|".join(_states_of(int.from_bytes(value, "big")))
    if name == "status" and error == "NodeRegistryChallengeNotOpen":
        return ChallengeStatus(value).label
    if name in ("amount", "stake", "minStake") and error.startswith("NodeRegistry"):
        return format_gym(value)
    if kind == "address":
        return to_checksum_address(value)
    if isinstance(value, bytes):
        return "0x" + value.hex()
    return value


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
            lambda: f"{v['proposer']} has {v['votes']} votes, proposing needs {v['threshold']}: "
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
        "NodeRegistryZeroAmount": lambda: "the amount must be more than zero",
        "NodeRegistryInvalidBeneficiary":
            lambda: f"slashed GYM cannot be paid to {v['beneficiary']}",
        "ExperienceLedgerNotLogOwner":
            lambda: f"{v['caller']} does not own log {v['logId']} (the owner is {v['owner']})",
    }
    explain = meanings.get(name)
    return explain() if explain else ""
