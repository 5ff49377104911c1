"""An incremental index of the governor's events, and of the curated library's appends.

The dashboard reads proposals from events, the way Tally-style indexers do, rather than from
the client's per-call views: ``ProposalCreated`` (actions, description, snapshot, deadline),
``VoteCast`` / ``VoteCastWithParams`` (who voted what, with which weight and reason),
``ProposalQueued`` (eta), ``ProposalExecuted`` and ``ProposalCanceled``; plus the
ExperienceLedger's ``LeafAppended`` events of the curated library. ``sync`` asks the node for
the logs of the blocks it has not seen yet (from the deployment block the first time, paged
like ``ledger.chain``), so each page view costs one ``eth_getLogs`` over the new blocks only.

The tallies are sums of the indexed vote weights; the tests hold them equal to the governor's
``proposalVotes``. A proposal's *state* is not derived here: it depends on the clock and the
quorum rules, so the pages ask the governor's ``state`` view. If the block the index last saw
is no longer on the chain (Anvil restarted, a reorg), the index starts over from scratch.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from eth_utils import event_abi_to_log_topic, to_checksum_address
from web3 import Web3
from web3.exceptions import Web3Exception

from governance.client import VoteType
from governance.errors import GovernanceError
from ledger.evm import PAGE_BLOCKS
from ledger.multiformats import CID, MultiformatError

GOVERNOR_EVENTS = ("ProposalCreated", "VoteCast", "VoteCastWithParams", "ProposalQueued",
                   "ProposalExecuted", "ProposalCanceled")


@dataclass(frozen=True)
class IndexedVote:
    voter: str
    support: VoteType
    weight: int
    reason: str
    params: bytes  # VoteCastWithParams only; empty for VoteCast
    block_number: int
    timestamp: int
    tx_hash: str


@dataclass
class IndexedProposal:
    """One proposal as its events describe it; times are the governor's clock (seconds)."""

    proposal_id: int
    proposer: str
    targets: list[str]
    values: list[int]
    calldatas: list[bytes]
    description: str
    snapshot: int  # ProposalCreated.voteStart: votes weigh as of this timepoint
    deadline: int  # ProposalCreated.voteEnd: last second of voting
    created_block: int
    created_at: int  # timestamp of the creation block
    created_tx: str
    votes: list[IndexedVote] = field(default_factory=list)
    queued_at: int | None = None
    eta: int | None = None
    executed_at: int | None = None
    executed_tx: str | None = None
    canceled_at: int | None = None

    def tally(self, support: VoteType) -> int:
        return sum(v.weight for v in self.votes if v.support == support)

    @property
    def votes_for(self) -> int:
        return self.tally(VoteType.FOR)

    @property
    def votes_against(self) -> int:
        return self.tally(VoteType.AGAINST)

    @property
    def votes_abstain(self) -> int:
        return self.tally(VoteType.ABSTAIN)

    @property
    def title(self) -> str:
        text = self.description.strip()
        return text.splitlines()[0].lstrip("# ").strip() if text else f"proposal {self.proposal_id}"


@dataclass(frozen=True)
class CuratedLeaf:
    """A ``LeafAppended`` event of the curated library."""

    index: int
    leaf_hash: bytes
    entry_cid: str | None  # None when the event's bytes are not a CID
    block_number: int
    timestamp: int
    tx_hash: str


class GovernorIndexer:
    """Events of the governor at ``governor`` and of curated log ``curated_log_id`` of the
    ledger at ``ledger``, indexed from ``from_block``; thread-safe, ``sync`` before reading."""

    def __init__(self, w3: Web3, governor, ledger_address: str, ledger_abi: list[dict],
                 curated_log_id: int, from_block: int = 0, page_blocks: int = PAGE_BLOCKS):
        self.w3 = w3
        self.governor = governor
        self.ledger = w3.eth.contract(address=to_checksum_address(ledger_address), abi=ledger_abi)
        self.curated_log_id = curated_log_id
        self.from_block = from_block
        self.page_blocks = page_blocks
        self._lock = threading.Lock()
        self._topics = {event_abi_to_log_topic(governor.events[name].abi): name
                        for name in GOVERNOR_EVENTS}
        self._leaf_topic = event_abi_to_log_topic(self.ledger.events.LeafAppended.abi)
        self._reset()

    def _reset(self) -> None:
        self.last_block = self.from_block - 1
        self._last_hash: bytes | None = None
        self._proposals: dict[int, IndexedProposal] = {}
        self._curated: list[CuratedLeaf] = []
        self._timestamps: dict[int, int] = {}

    # -- reading ------------------------------------------------------------------------------

    def proposals(self) -> list[IndexedProposal]:
        """Every proposal, oldest first."""
        with self._lock:
            return sorted(self._proposals.values(), key=lambda p: (p.created_block, p.created_at))

    def proposal(self, proposal_id: int) -> IndexedProposal | None:
        with self._lock:
            return self._proposals.get(proposal_id)

    def curated_leaves(self) -> list[CuratedLeaf]:
        with self._lock:
            return list(self._curated)

    # -- syncing ------------------------------------------------------------------------------

    def sync(self) -> int:
        """Index the blocks added since the last call; returns the head block number.

        Progress is recorded page by page, so a failure part-way indexes nothing twice."""
        with self._lock:
            try:
                head = self.w3.eth.block_number
                if self._chain_changed(head):
                    self._reset()  # the chain we indexed is gone: start over
                start, span = self.last_block + 1, self.page_blocks
                while start <= head:
                    end = min(start + span - 1, head)
                    try:
                        raw_logs = self._logs(start, end)
                    except (Web3Exception, ValueError):
                        if span == 1:
                            raise
                        span = max(1, span // 2)  # the node's range or result limit
                        continue
                    for raw in raw_logs:
                        self._apply(raw)
                    self.last_block, self._last_hash = end, bytes(self._block(end)["hash"])
                    start = end + 1
                return head
            except (OSError, Web3Exception, ValueError) as exc:
                reason = (str(exc) or type(exc).__name__).splitlines()[0]
                raise GovernanceError(f"cannot read the governor's events ({reason}): is the "
                                      "devnet up? run `gym devnet up`") from None

    def _chain_changed(self, head: int) -> bool:
        """Whether the last block indexed is no longer on the chain (restart, reorg)."""
        if self._last_hash is None:
            return False
        return head < self.last_block or bytes(self._block(self.last_block)["hash"]) \
            != self._last_hash

    def _logs(self, start: int, end: int) -> list:
        governor = self.w3.eth.get_logs({
            "address": self.governor.address, "fromBlock": start, "toBlock": end,
            "topics": [["0x" + t.hex() for t in self._topics]]})
        curated = self.w3.eth.get_logs({
            "address": self.ledger.address, "fromBlock": start, "toBlock": end,
            "topics": ["0x" + self._leaf_topic.hex(),
                       "0x" + self.curated_log_id.to_bytes(32, "big").hex()]})
        return sorted([*governor, *curated], key=lambda r: (r["blockNumber"], r["logIndex"]))

    def _block(self, number: int):
        return self.w3.eth.get_block(number)

    def _timestamp(self, block_number: int) -> int:
        if block_number not in self._timestamps:
            self._timestamps[block_number] = self._block(block_number)["timestamp"]
        return self._timestamps[block_number]

    def _apply(self, raw) -> None:
        block, tx = raw["blockNumber"], raw["transactionHash"].to_0x_hex()
        when = self._timestamp(block)
        if raw["address"].lower() == self.ledger.address.lower():
            args = self.ledger.events.LeafAppended().process_log(raw)["args"]
            try:
                cid: str | None = str(CID.from_bytes(args["entryCid"]))
            except MultiformatError:
                cid = None
            self._curated.append(CuratedLeaf(args["index"], bytes(args["leafHash"]), cid, block,
                                             when, tx))
            return
        name = self._topics[bytes(raw["topics"][0])]
        args = self.governor.events[name]().process_log(raw)["args"]
        if name == "ProposalCreated":
            self._proposals[args["proposalId"]] = IndexedProposal(
                args["proposalId"], to_checksum_address(args["proposer"]),
                [to_checksum_address(t) for t in args["targets"]], list(args["values"]),
                [bytes(c) for c in args["calldatas"]], args["description"], args["voteStart"],
                args["voteEnd"], block, when, tx)
            return
        proposal = self._proposals.get(args["proposalId"])
        if proposal is None:  # an event of a proposal made before from_block: not ours to show
            return
        if name in ("VoteCast", "VoteCastWithParams"):
            proposal.votes.append(IndexedVote(
                to_checksum_address(args["voter"]), VoteType(args["support"]), args["weight"],
                args["reason"], bytes(args.get("params", b"")), block, when, tx))
        elif name == "ProposalQueued":
            proposal.queued_at, proposal.eta = when, args["etaSeconds"]
        elif name == "ProposalExecuted":
            proposal.executed_at, proposal.executed_tx = when, tx
        elif name == "ProposalCanceled":
            proposal.canceled_at = when
