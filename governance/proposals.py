"""Proposals beyond curation, and the readable decoding of any proposal's actions.

Two more kinds of proposal, both executed by the TimelockController (the governor's executor):

- ``ParamsProposal``: changes the DAO's own parameters. The governor's setters
  (``setVotingDelay``, ``setVotingPeriod``, ``setProposalThreshold``,
  ``updateQuorumNumerator``, all ``onlyGovernance``) are called on the governor itself: with a
  timelock as executor, OpenZeppelin 5's Governor admits such a call only while the timelock
  executes a proposal that lists it. ``updateDelay`` targets the timelock, which administers
  itself. The RewardDistributor's ``setBudget(budgetPerEpoch, poolBps)`` (budget and split in
  one call, from the epoch the proposal executes in) and ``setAppealWindow`` (for roots
  attested afterwards) target the distributor, whose governance is the timelock too.
  ``plan_params_change`` checks every value before anything is sent: a zero voting
  period (``GovernorInvalidVotingPeriod``), a quorum above 100 % (``GovernorInvalidQuorumFraction``),
  a value beyond the setter's integer type, a threshold no one could ever reach, a split that
  does not sum to 10,000 basis points (``RewardsInvalidSplit``), a budget of 2^128 base units
  or more, a reward appeal window above ``MAX_APPEAL_WINDOW``, a value that changes nothing.
- ``SlashProposal``: ``NodeRegistry.slash(operator, amount, challengeId, beneficiary)``, which
  only the registry's governance (the timelock) may call; ``plan_slash`` refuses an unknown
  node, an amount of zero or above the node's stake, a challenge that is unknown, against
  another node or dismissed, and a beneficiary the registry would refuse.

``ActionDecoder`` turns a proposal's (target, calldata) pairs into one readable line each
(``DecodedAction``), decoding the selectors of the contracts it knows (governor, timelock,
token, ledger, node registry, committee, reward distributor) and saying plainly when it does
not know one.

The planners are pure: the client (``GovernanceClient.build_params_change`` and
``build_slash``) reads the chain (``GovernanceParameters``, ``RewardParameters``) and hands
them what it read.

>>> format_parameter("proposal_threshold", 12_500_000_000_000_000_000), format_duration(5400)
('12.5 GYM', '5400 s (1 h 30 min)')
>>> format_split(parse_split("40,30,15,15"))
'data 40%, compute 30%, verification 15%, availability 15%'
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from decimal import Decimal
from enum import IntEnum
from typing import Any, Protocol

from eth_abi import encode as abi_encode
from eth_utils import keccak, to_checksum_address
from web3 import Web3
from web3.exceptions import Web3Exception

from committee.rewards.table import BPS, POOLS
from contracts.gym_token import format_gym
from governance.errors import GovernanceError, ParameterError, SlashError
from inference_node.registry import ChallengeInfo, ChallengeStatus, RegisteredNode
from ledger.evm import ZERO_ADDRESS

UINT32_MAX = 2**32 - 1
UINT48_MAX = 2**48 - 1
REWARD_BUDGET_LIMIT = 2**128  # RewardDistributor.setBudget: the budget fits 128 bits
QUORUM_DENOMINATOR = 100  # GovernorVotesQuorumFraction's default: the numerator is a percent


class ProposalPlan(Protocol):
    """What ``GovernanceClient.propose`` sends: actions and a description."""

    description: str

    @property
    def actions(self) -> tuple[list[str], list[int], list[bytes]]: ...


def format_duration(seconds: int) -> str:
    """``600 s (10 min)``: seconds, and the same in days, hours and minutes when over a minute."""
    if seconds < 60:
        return f"{seconds} s"
    parts, rest = [], seconds
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if rest >= size:
            parts.append(f"{rest // size} {unit}")
            rest %= size
    return f"{seconds} s ({' '.join(parts)})"


_DURATION_UNITS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}
_DURATION_PART = re.compile(r"(\d+)\s*(d|h|min|m|sec|s)")


def parse_duration(text: str, what: str = "a duration") -> int:
    """Seconds in ``text``: a number of seconds (``300``) or amounts with units, ``30s``,
    ``5m``/``5min``, ``2h``, ``1d``, combined as in ``1h30m``; ``ParameterError`` otherwise.

    >>> parse_duration("300"), parse_duration("5m"), parse_duration("1d 2h"), parse_duration("1h30m")
    (300, 300, 93600, 5400)
    """
    raw = str(text).strip().lower()
    if raw.isdigit():
        return int(raw)
    compact = raw.replace(" ", "")
    parts = _DURATION_PART.findall(compact)
    if not compact or not parts or "".join(n + u for n, u in parts) != compact:
        raise ParameterError(f"{what} is seconds (300) or a duration such as 30s, 5m, 2h, 1d or "
                             f"1h30m, not {text!r}")
    return sum(int(number) * _DURATION_UNITS[unit] for number, unit in parts)


def _call(signature: str, types: list[str], args: list) -> bytes:
    return keccak(text=signature)[:4] + abi_encode(types, args)


# -- proposal states and votes ----------------------------------------------------------------


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


# -- governance parameters --------------------------------------------------------------------


@dataclass(frozen=True)
class GovernanceParameters:
    """The DAO's changeable parameters, as the chain holds them now."""

    voting_delay: int  # seconds from proposal to snapshot (GymGovernor.votingDelay)
    voting_period: int  # seconds voting stays open (votingPeriod)
    proposal_threshold: int  # votes, in token base units, a proposer needs (proposalThreshold)
    quorum_numerator: int  # percent of the supply at the snapshot needed as For + Abstain
    timelock_delay: int  # seconds a queued proposal waits (TimelockController.getMinDelay)


# field -> (contract that holds it, setter signature, setter ABI type, largest value, label)
_SETTERS: dict[str, tuple[str, str, str, int, str]] = {
    "voting_delay": ("governor", "setVotingDelay(uint48)", "uint48", UINT48_MAX, "voting delay"),
    "voting_period": ("governor", "setVotingPeriod(uint32)", "uint32", UINT32_MAX, "voting period"),
    "proposal_threshold": ("governor", "setProposalThreshold(uint256)", "uint256", 2**256 - 1,
                           "proposal threshold"),
    "quorum_numerator": ("governor", "updateQuorumNumerator(uint256)", "uint256",
                         QUORUM_DENOMINATOR, "quorum"),
    "timelock_delay": ("timelock", "updateDelay(uint256)", "uint256", 2**256 - 1, "timelock delay"),
}


@dataclass(frozen=True)
class RewardParameters:
    """The RewardDistributor's changeable parameters, as the chain holds them now, and what a
    voter needs to judge a new budget (docs/rewards.md)."""

    budget: int  # GYM base units per epoch, of the current epoch (budgetOf(currentEpoch()))
    pool_bps: tuple[int, int, int, int]  # its split: data, compute, verification, availability
    appeal_window: int  # seconds after an attestation during which the DAO may reverse it
    max_appeal_window: int  # MAX_APPEAL_WINDOW()
    current_epoch: int  # currentEpoch(): setBudget applies from the epoch it executes in
    treasury: str  # who pays the claims (the DAO timelock)
    treasury_balance: int  # GYM the treasury holds
    treasury_allowance: int  # GYM the treasury lets the distributor pay out


# What ``plan_params_change`` takes besides the ``GovernanceParameters`` fields.
REWARD_FIELDS = ("reward_budget", "reward_split", "reward_appeal_window")
_REWARD_LABELS = {"reward_budget": "reward budget", "reward_split": "reward split",
                  "reward_appeal_window": "reward appeal window"}


def format_percent(bps: int) -> str:
    """Basis points as a percent: ``4000`` -> ``40%``, ``3333`` -> ``33.33%``."""
    whole, rest = divmod(bps, 100)
    return f"{whole}.{rest:02d}".rstrip("0").rstrip(".") + "%"


def format_split(pool_bps: tuple[int, ...]) -> str:
    """``data 40%, compute 30%, verification 15%, availability 15%``."""
    return ", ".join(f"{pool} {format_percent(bps)}"
                     for pool, bps in zip(POOLS, pool_bps, strict=True))


def parse_split(text: str) -> tuple[int, int, int, int]:
    """The four pools' shares (data, compute, verification, availability) in basis points,
    from four comma-separated numbers summing to 100 (percent, at most two decimals:
    ``40,30,15,15``, ``33.34,33.33,33.33,0``) or to 10000 (basis points: ``4000,3000,1500,1500``);
    ``ParameterError`` otherwise.

    >>> parse_split("40,30,15,15"), parse_split("4000, 3000, 1500, 1500")
    ((4000, 3000, 1500, 1500), (4000, 3000, 1500, 1500))
    """
    parts = [part.strip() for part in str(text).split(",")]
    usage = ("the reward split is four numbers, for data, compute, verification and "
             "availability, in percent summing to 100 (40,30,15,15) or in basis points summing "
             "to 10000")
    if len(parts) != len(POOLS) or not all(re.fullmatch(r"\d+(\.\d{1,2})?", p) for p in parts):
        raise ParameterError(f"{usage}, not {text!r}")
    values = [Decimal(part) for part in parts]
    if sum(values) == 100:  # percent: a hundredth of a percent is a basis point
        return tuple(int(value * 100) for value in values)  # type: ignore[return-value]
    if sum(values) == BPS and all(value == int(value) for value in values):
        return tuple(int(value) for value in values)  # type: ignore[return-value]
    raise ParameterError(f"{usage}; {text!r} sums to {sum(values)}")


def format_parameter(name: str, value: Any) -> str:
    """A parameter's value in its unit: seconds, GYM, percent, or a reward budget's
    ``(budget, pool_bps)``."""
    if name == "proposal_threshold":
        return format_gym(value)
    if name == "quorum_numerator":
        return f"{value}% of the supply"
    if name == "reward_budget":
        budget, pool_bps = value
        return f"{format_gym(budget)} per epoch, split {format_split(pool_bps)}"
    return format_duration(value)


@dataclass(frozen=True)
class ParameterChange:
    """One setter call: ``name`` (a ``GovernanceParameters`` field; ``reward_budget``, the
    RewardDistributor's ``setBudget`` whose values are ``(budget, pool_bps)``; or
    ``reward_appeal_window``) from ``old`` to ``new``."""

    name: str
    target: str
    calldata: bytes
    old: Any
    new: Any

    @property
    def labels(self) -> list[str]:
        """What it changes, in the words of the proposal's title."""
        if self.name != "reward_budget":
            return [_SETTERS[self.name][4] if self.name in _SETTERS else
                    _REWARD_LABELS[self.name]]
        (old_budget, old_bps), (new_budget, new_bps) = self.old, self.new
        return ([_REWARD_LABELS["reward_budget"]] * (old_budget != new_budget)
                + [_REWARD_LABELS["reward_split"]] * (old_bps != new_bps))

    @property
    def lines(self) -> list[str]:
        """``- label: old -> new``, one line per value it changes."""
        if self.name == "reward_budget":
            (old_budget, old_bps), (new_budget, new_bps) = self.old, self.new
            lines = []
            if old_budget != new_budget:
                lines.append(f"- reward budget: {format_gym(old_budget)} -> "
                             f"{format_gym(new_budget)} per epoch"
                             + ("" if old_bps != new_bps else
                                f" (split unchanged: {format_split(new_bps)})"))
            if old_bps != new_bps:
                lines.append(f"- reward split: {format_split(old_bps)} -> "
                             f"{format_split(new_bps)}"
                             + ("" if old_budget != new_budget else
                                f" (budget unchanged: {format_gym(new_budget)} per epoch)"))
            return lines
        label = self.labels[0]
        old, new = format_parameter(self.name, self.old), format_parameter(self.name, self.new)
        return [f"- {label}: {old} -> {new}"]


@dataclass(frozen=True)
class ParamsProposal:
    """What ``propose`` sends to change governance parameters: one setter call per change."""

    changes: tuple[ParameterChange, ...]
    description: str

    @property
    def actions(self) -> tuple[list[str], list[int], list[bytes]]:
        return ([c.target for c in self.changes], [0] * len(self.changes),
                [c.calldata for c in self.changes])


def plan_params_change(current: GovernanceParameters, wanted: dict[str, Any], *,
                       governor_address: str, timelock_address: str, total_supply: int,
                       description: str = "", rewards: RewardParameters | None = None,
                       distributor_address: str | None = None) -> ParamsProposal:
    """A proposal that sets every parameter of ``wanted`` that is not None.

    ``wanted`` maps ``GovernanceParameters`` field names to new values (seconds, token base
    units, percent), and ``reward_budget`` (token base units per epoch), ``reward_split`` (four
    basis points: data, compute, verification, availability) and ``reward_appeal_window``
    (seconds) to the RewardDistributor's, which need ``rewards`` (what it holds now) and
    ``distributor_address``. Raises ``ParameterError`` when none is given, a name is unknown, or
    a value is one the contract would refuse or that would leave governance unusable or
    unchanged.
    """
    known = {f.name for f in fields(GovernanceParameters)} | set(REWARD_FIELDS)
    unknown = sorted(set(wanted) - known)
    if unknown:
        raise ParameterError(f"unknown governance parameter {unknown[0]!r} (known: "
                             f"{', '.join(sorted(known))})")
    given = {name: value for name, value in wanted.items() if value is not None}
    if not given:
        raise ParameterError("name at least one parameter to change: --voting-delay, "
                             "--voting-period, --proposal-threshold, --quorum-percent, "
                             "--timelock-delay, --reward-budget, --reward-split or "
                             "--reward-appeal-window")
    addresses = {"governor": to_checksum_address(governor_address),
                 "timelock": to_checksum_address(timelock_address)}
    changes = []
    for name in (f.name for f in fields(GovernanceParameters)):  # a fixed, readable order
        if name not in given:
            continue
        value = given[name]
        holder, signature, abi_type, largest, label = _SETTERS[name]
        if value < 0:
            raise ParameterError(f"the {label} cannot be negative ({value})")
        if value > largest:
            raise ParameterError(f"the {label} can be at most {format_parameter(name, largest)} "
                                 f"({abi_type}), not {format_parameter(name, value)}")
        if name == "voting_period" and value == 0:
            raise ParameterError("the voting period must be at least 1 second: with none, no "
                                 "vote could ever be cast (the governor refuses it: "
                                 "GovernorInvalidVotingPeriod)")
        if name == "quorum_numerator" and value == 0:
            raise ParameterError("a quorum of 0% would let a single vote decide any proposal; "
                                 "use 1 to 100")
        if name == "proposal_threshold" and value > total_supply:
            raise ParameterError(
                f"a proposal threshold of {format_gym(value)} is above the whole supply "
                f"({format_gym(total_supply)}): no one could ever propose again")
        old = getattr(current, name)
        if value == old:
            raise ParameterError(f"the {label} is already {format_parameter(name, value)}")
        changes.append(ParameterChange(name, addresses[holder],
                                       _call(signature, [abi_type], [value]), old, value))
    reward_changes = _plan_reward_changes(given, rewards, distributor_address)
    notes = []
    if changes:
        notes.append("Governance parameters apply to proposals made after execution.")
    for change in reward_changes:
        if change.name == "reward_budget":
            notes.append(_budget_note(change.new, rewards))
        else:
            notes.append("The reward appeal window applies to roots attested after execution; "
                         "a root attested before keeps the claim time it was attested with.")
    changes += reward_changes
    labels = [label for c in changes for label in c.labels]
    kind = "reward" if all(c.name.startswith("reward_") for c in changes) else "governance"
    shown = [label.removeprefix("reward ") if kind == "reward" else label for label in labels]
    text = "\n".join([
        f"# Change {kind} parameters: {', '.join(shown)}",
        "",
        *([description.strip(), ""] if description.strip() else []),
        "Changes (executed by the timelock; they apply to proposals made after execution):"
        if not reward_changes else "Changes (executed by the timelock):",
        *(line for c in changes for line in c.lines),
        *(["", *notes] if reward_changes else []),
    ])
    return ParamsProposal(tuple(changes), text)


def _plan_reward_changes(given: dict[str, Any], rewards: RewardParameters | None,
                         distributor_address: str | None) -> list[ParameterChange]:
    """The RewardDistributor's calls of ``plan_params_change``: one ``setBudget`` for the
    budget and the split (each kept as it is when not given), one ``setAppealWindow``."""
    if not any(name in given for name in REWARD_FIELDS):
        return []
    if rewards is None or distributor_address is None:
        raise ParameterError("no RewardDistributor is known to this client: the deployment "
                             "names none (run `gym devnet up --redeploy`)")
    target = to_checksum_address(distributor_address)
    changes = []
    if "reward_budget" in given or "reward_split" in given:
        budget = given.get("reward_budget", rewards.budget)
        pool_bps = tuple(given.get("reward_split", rewards.pool_bps))
        if budget < 0:
            raise ParameterError(f"the reward budget cannot be negative ({budget})")
        if budget >= REWARD_BUDGET_LIMIT:
            raise ParameterError(f"the reward budget must be below 2^128 GYM base units "
                                 f"(setBudget stores 128 bits), not {format_gym(budget)}")
        if len(pool_bps) != len(POOLS) or any(not 0 <= bps <= BPS for bps in pool_bps) \
                or sum(pool_bps) != BPS:
            raise ParameterError(f"the reward split's four parts must sum to {BPS} basis points "
                                 f"(100%), not {list(pool_bps)} (sum {sum(pool_bps)}): the "
                                 "distributor refuses it (RewardsInvalidSplit)")
        old, new = (rewards.budget, tuple(rewards.pool_bps)), (budget, pool_bps)
        if old == new:
            raise ParameterError(f"the reward budget is already "
                                 f"{format_parameter('reward_budget', new)}")
        changes.append(ParameterChange(
            "reward_budget", target,
            _call("setBudget(uint256,uint16[4])", ["uint256", "uint16[4]"],
                  [budget, list(pool_bps)]), old, new))
    if "reward_appeal_window" in given:
        window = given["reward_appeal_window"]
        if window < 0:
            raise ParameterError(f"the reward appeal window cannot be negative ({window})")
        if window > rewards.max_appeal_window:
            raise ParameterError(
                f"the reward appeal window can be at most "
                f"{format_duration(rewards.max_appeal_window)} (MAX_APPEAL_WINDOW), not "
                f"{format_duration(window)}")
        if window == rewards.appeal_window:
            raise ParameterError(f"the reward appeal window is already {format_duration(window)}")
        changes.append(ParameterChange(
            "reward_appeal_window", target, _call("setAppealWindow(uint64)", ["uint64"], [window]),
            rewards.appeal_window, window))
    return changes


def _budget_note(new: tuple[int, tuple[int, ...]], rewards: RewardParameters) -> str:
    """When the budget applies, and how long the treasury pays it."""
    budget = new[0]
    payable = min(rewards.treasury_balance, rewards.treasury_allowance)
    note = (f"The reward budget applies from the epoch in which the proposal executes (epoch "
            f"{rewards.current_epoch} now) on; ended epochs keep theirs. The treasury "
            f"{rewards.treasury} holds {format_gym(rewards.treasury_balance, rounded=True)} "
            f"and allows the distributor "
            f"{format_gym(rewards.treasury_allowance, rounded=True)}")
    if budget == 0:
        return note + "; a budget of 0 pays no rewards."
    epochs = payable // budget
    return note + (f": {epochs} epoch{'' if epochs == 1 else 's'} at the new budget.")


# -- node slashing ----------------------------------------------------------------------------


@dataclass(frozen=True)
class SlashProposal:
    """What ``propose`` sends to slash a node: one ``NodeRegistry.slash`` call."""

    registry_address: str
    operator: str
    amount: int  # token base units
    challenge_id: int
    beneficiary: str
    description: str

    @property
    def calldata(self) -> bytes:
        return _call("slash(address,uint256,uint256,address)",
                     ["address", "uint256", "uint256", "address"],
                     [self.operator, self.amount, self.challenge_id, self.beneficiary])

    @property
    def actions(self) -> tuple[list[str], list[int], list[bytes]]:
        return [self.registry_address], [0], [self.calldata]


def check_slash_amount(node: RegisteredNode, amount: int) -> None:
    """Refuse an unknown node, and an amount the registry would refuse for its stake."""
    if not node.exists:
        raise SlashError(f"unknown node {node.operator}: the NodeRegistry has no node for this "
                         "operator address")
    if amount <= 0:
        raise SlashError("the amount to slash must be more than 0 GYM")
    if amount > node.stake:
        raise SlashError(f"cannot slash {format_gym(amount)}: node {node.operator} stakes only "
                         f"{format_gym(node.stake)}")


def plan_slash(node: RegisteredNode, challenge: ChallengeInfo, amount: int, reason: str, *,
               registry_address: str, beneficiary: str, beneficiary_label: str = "",
               min_stake: int = 0) -> SlashProposal:
    """A proposal to slash ``amount`` of ``node``'s stake for ``challenge``, paid to ``beneficiary``.

    Raises ``SlashError`` for what ``NodeRegistry.slash`` would refuse at execution: an unknown
    node, a zero amount or one above the stake, an unknown, mismatched or dismissed challenge, a
    zero or registry beneficiary; and for an empty reason (voters deserve one).
    """
    check_slash_amount(node, amount)
    if not reason.strip():
        raise SlashError("say why the node should be slashed (--reason TEXT): voters read it")
    if challenge.status == ChallengeStatus.NONE:
        raise SlashError(f"no challenge #{challenge.challenge_id} exists in the NodeRegistry")
    if to_checksum_address(challenge.operator) != to_checksum_address(node.operator):
        raise SlashError(f"challenge #{challenge.challenge_id} is against {challenge.operator}, "
                         f"not {node.operator}")
    if challenge.status == ChallengeStatus.DISMISSED:
        raise SlashError(f"challenge #{challenge.challenge_id} was dismissed: nothing can be "
                         "slashed for it")
    beneficiary = to_checksum_address(beneficiary)
    registry_address = to_checksum_address(registry_address)
    if beneficiary in (ZERO_ADDRESS, registry_address):
        raise SlashError(f"the slashed GYM cannot go to {beneficiary} (the zero address or the "
                         "registry itself)")
    left = node.stake - amount
    status = "bonded" if node.unbonding_ends == 0 else f"unbonding until {node.unbonding_ends}"
    below = (f" (below the minimum stake {format_gym(min_stake)}: the node stops being active "
             "until it adds stake)" if left < min_stake else "")
    evidence = f", evidence ipfs://{challenge.evidence_cid}" if challenge.evidence_cid else ""
    text = "\n".join([
        f"# Slash node {node.operator}: {format_gym(amount)}",
        "",
        reason.strip(),
        "",
        (f"Node: operator {node.operator}, signer {node.signer}, endpoint {node.endpoint}, "
         f"model digest 0x{node.model_digest.removeprefix('sha256:')}, receipt log {node.receipt_log_id}, {status}"),
        f"Stake: {format_gym(node.stake)} -> {format_gym(left)}{below}",
        (f"Challenge #{challenge.challenge_id} ({challenge.status.label}) by "
         f"{challenge.challenger} against receipt 0x{challenge.receipt_hash.hex()}{evidence}"),
        f"Slashed GYM go to {beneficiary}" + (f" ({beneficiary_label})" if beneficiary_label else ""),
        f"Action: NodeRegistry {registry_address}.slash (callable only by the DAO timelock)",
    ])
    return SlashProposal(registry_address, to_checksum_address(node.operator), amount,
                         challenge.challenge_id, beneficiary, text)


# -- reading actions --------------------------------------------------------------------------


@dataclass(frozen=True)
class DecodedAction:
    """One action of a proposal, decoded as far as the known ABIs allow."""

    target: str
    contract: str | None  # the target's contract name, when known
    function: str | None  # the function called, when its selector is known
    args: dict[str, Any]
    summary: str  # one readable line
    short: str  # a few words, for tables


class ActionDecoder:
    """Decodes calls to the contracts named in ``contracts`` (address -> (name, ABI))."""

    def __init__(self, contracts: dict[str, tuple[str, list[dict]]]):
        w3 = Web3()
        self._contracts = {to_checksum_address(address): (name, w3.eth.contract(abi=abi))
                           for address, (name, abi) in contracts.items()}
        self.names = {address: name for address, (name, _) in self._contracts.items()}

    def name_of(self, address: str) -> str:
        """``address``, followed by its contract name when it is one of ours."""
        address = to_checksum_address(address)
        name = self.names.get(address)
        return f"{address} ({name})" if name else address

    def decode(self, target: str, calldata: bytes, value: int = 0) -> DecodedAction:
        target = to_checksum_address(target)
        known = self._contracts.get(target)
        paid = f", sending {value} wei" if value else ""
        if len(calldata) < 4:
            what = f"send {value} wei to {self.name_of(target)}" if value else \
                f"call {self.name_of(target)} without data"
            return DecodedAction(target, known[0] if known else None, None, {}, what, what)
        selector = "0x" + calldata[:4].hex()
        if known is None:
            text = f"call {selector} on {target} (unknown contract, {len(calldata)} bytes){paid}"
            return DecodedAction(target, None, None, {}, text, f"call {selector}")
        name, contract = known
        try:
            function, args = contract.decode_function_input(calldata)
        except (Web3Exception, ValueError):
            text = f"call {selector} on {name} (not a function of its ABI){paid}"
            return DecodedAction(target, name, None, {}, text, f"{name}: call {selector}")
        summary, short = self._describe(name, function.fn_name, args)
        return DecodedAction(target, name, function.fn_name, dict(args), summary + paid, short)

    def _describe(self, contract: str, function: str, a: dict[str, Any]) -> tuple[str, str]:
        """(summary, short) for a decoded call; a generic rendering for the unfamiliar ones."""
        if function == "appendManyFromLog":
            leaves = a["leaves"]
            n = len(leaves)
            noun = "leaf" if n == 1 else "leaves"
            where = ", ".join(f"leaf {leaf['leafIndex']} of log {leaf['sourceLogId']}"
                              for leaf in leaves)
            summary = (f"{contract}: curate {n} {noun} into log {a['curatedLogId']} ({where}), "
                       "each proof verified on execution")
            return summary, f"curate {n} {noun}"
        if function == "appendFromLog":
            summary = (f"{contract}: curate leaf {a['leafIndex']} of log {a['sourceLogId']} into "
                       f"log {a['curatedLogId']}, its proof verified on execution")
            return summary, "curate 1 leaf"
        settings = {"setVotingDelay": "voting_delay", "setVotingPeriod": "voting_period",
                    "setProposalThreshold": "proposal_threshold",
                    "updateQuorumNumerator": "quorum_numerator", "updateDelay": "timelock_delay"}
        if function in settings:
            name = settings[function]
            value = format_parameter(name, next(iter(a.values())))
            label = _SETTERS[name][4]
            return f"{contract}: set the {label} to {value}", f"{label} -> {value}"
        if function == "slash":
            amount = format_gym(a["amount"])
            summary = (f"{contract}: slash node {a['operator']} by {amount} for challenge "
                       f"#{a['challengeId']}, paying {self.name_of(a['beneficiary'])}")
            return summary, f"slash {amount}"
        if function == "reverse" and contract == "VerifierCommittee":
            cid = a["challengeId"]
            summary = (f"{contract}: reverse committee challenge {cid} (its settled verdict "
                       "flips; the verifiers that signed it are slashed)")
            return summary, f"reverse committee challenge {cid}"
        if contract == "RewardDistributor":
            described = _describe_rewards(contract, function, a)
            if described is not None:
                return described
        if function == "setAppealWindow":
            value = format_duration(a["appealWindow_"] if "appealWindow_" in a
                                    else next(iter(a.values())))
            return f"{contract}: set the appeal window to {value}", f"appeal window -> {value}"
        if function == "resolveChallenge":
            verdict = "uphold" if a["upheld"] else "dismiss"
            summary = f"{contract}: {verdict} challenge #{a['challengeId']} without slashing"
            return summary, f"{verdict} challenge #{a['challengeId']}"
        rendered = ", ".join(f"{key}={_render(value)}" for key, value in a.items())
        return f"{contract}.{function}({rendered})", f"{contract}.{function}"


def _describe_rewards(contract: str, function: str, a: dict[str, Any]
                      ) -> tuple[str, str] | None:
    """(summary, short) for the RewardDistributor's calls a proposal or a wallet makes."""
    if function == "setBudget":
        budget, split = format_gym(a["budgetPerEpoch"]), format_split(tuple(a["poolBps"]))
        summary = (f"{contract}: set the reward budget to {budget} per epoch, split {split}, "
                   "from the epoch it executes in")
        return summary, f"reward budget -> {budget}"
    if function == "setAppealWindow":
        value = format_duration(a["appealWindow_"])
        summary = (f"{contract}: set the reward appeal window to {value} (for roots attested "
                   "afterwards)")
        return summary, f"reward appeal window -> {value}"
    if function == "reverse":
        epoch = a["epoch"]
        summary = (f"{contract}: reverse the attested reward root of epoch {epoch} (nothing is "
                   "paid from it; the epoch may be attested again)")
        return summary, f"reverse reward root of epoch {epoch}"
    if function == "claim":
        amount = format_gym(a["amount"])
        return (f"{contract}: claim {amount} of epoch {a['epoch']}'s rewards for {a['account']}",
                f"claim {amount}")
    return None


def _render(value: Any) -> str:
    if isinstance(value, bytes):
        text = "0x" + value.hex()
        return text if len(text) <= 24 else text[:22] + "..."
    if isinstance(value, (list, tuple)):
        return f"[{len(value)} items]"
    return str(value)
