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
quorum rules, so the pages ask the governor's ``state`` view. A proposal's *number* is its
place in the order of ``ProposalCreated`` events from the deployment block: the order of the
governor's own enumeration (``GovernorStorage.proposalDetailsAt``), which `gym gov list` numbers.

Each event is decoded into a record (a JSON object: ``_record``) and the index is built from
records (``_apply``). With ``durable`` (a ``ledger.event_index.EventIndexStore`` in the
installation's database) every page's records and its last block's hash are committed as the
page is read, and a new indexer loads them instead of reading the chain from the deployment
block: a restart resumes after the last indexed block. If a recorded block is no longer on the
chain (a reorganisation, Anvil restarted from scratch), the index rewinds to the newest
recorded block the chain still holds and reads on from there (from scratch when none is).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from eth_utils import event_abi_to_log_topic, to_checksum_address
from web3 import Web3
from web3.exceptions import Web3Exception

from governance.client import VoteType
from governance.errors import GovernanceError
from ledger.event_index import KEEP_BLOCKS, EventIndexStore, fork_point
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
    number: int  # its place among the governor's proposals, 1 = oldest: `gym gov list`'s number
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
                 curated_log_id: int, from_block: int = 0, page_blocks: int = PAGE_BLOCKS,
                 durable: EventIndexStore | None = None):
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
        self.durable = durable
        self._reset()
        self._blocks: list[tuple[int, str]] = []  # recorded page ends (durable), oldest first
        if durable is not None:
            self._load()

    def _reset(self) -> None:
        self.last_block = self.from_block - 1
        self._last_hash: bytes | None = None
        self._proposals: dict[int, IndexedProposal] = {}
        self._curated: list[CuratedLeaf] = []
        self._timestamps: dict[int, int] = {}

    def _load(self) -> None:
        """The index as ``durable`` holds it: records applied, resuming after its last block."""
        self._reset()
        records, self._blocks = self.durable.load()
        for record in records:
            self._apply(record)
        if self._blocks:
            self.last_block = self._blocks[-1][0]
            self._last_hash = bytes.fromhex(self._blocks[-1][1][2:])

    # -- reading ------------------------------------------------------------------------------

    def proposals(self) -> list[IndexedProposal]:
        """Every proposal, oldest first."""
        with self._lock:
            return sorted(self._proposals.values(), key=lambda p: p.number)

    def proposal(self, proposal_id: int) -> IndexedProposal | None:
        with self._lock:
            return self._proposals.get(proposal_id)

    def numbered(self, number: int) -> IndexedProposal | None:
        """The proposal `gym gov list` numbers ``number`` (1 = oldest), if there is one."""
        with self._lock:
            return next((p for p in self._proposals.values() if p.number == number), None)

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
                    self._rewind()  # the chain we indexed is gone: back to where it is not
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
                    records = [(raw["blockNumber"], raw["logIndex"], self._record(raw))
                               for raw in raw_logs]
                    end_hash = bytes(self._block(end)["hash"])
                    if self.durable is not None:
                        self.durable.commit(records, end, "0x" + end_hash.hex())
                        self._blocks = [*self._blocks[-KEEP_BLOCKS:], (end, "0x" + end_hash.hex())]
                    for _, _, record in records:
                        self._apply(record)
                    self.last_block, self._last_hash = end, end_hash
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

    def _rewind(self) -> None:
        """After a reorganisation: without ``durable``, start over; with it, back to the
        newest recorded block the chain still holds (``ledger.event_index.fork_point``)."""
        if self.durable is None:
            self._reset()
            return
        head = self.w3.eth.block_number

        def chain_hash(number: int) -> str | None:
            return None if number > head else "0x" + bytes(self._block(number)["hash"]).hex()

        fork = fork_point(self._blocks, chain_hash)
        self.durable.rewind(fork[0] if fork is not None else -1)
        self._load()

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

    def _record(self, raw) -> dict:
        """The JSON record of one raw log (what ``_apply`` builds the index from)."""
        block, tx = raw["blockNumber"], raw["transactionHash"].to_0x_hex()
        when = self._timestamp(block)
        if raw["address"].lower() == self.ledger.address.lower():
            args = self.ledger.events.LeafAppended().process_log(raw)["args"]
            try:
                cid: str | None = str(CID.from_bytes(args["entryCid"]))
            except MultiformatError:
                cid = None
            return {"kind": "leaf", "index": args["index"], "leaf_hash": bytes(
                args["leafHash"]).hex(), "cid": cid, "block": block, "when": when, "tx": tx}
        name = self._topics[bytes(raw["topics"][0])]
        args = self.governor.events[name]().process_log(raw)["args"]
        record = {"kind": name, "id": str(args["proposalId"]), "block": block, "when": when,
                  "tx": tx}
        if name == "ProposalCreated":
            record.update(
                proposer=to_checksum_address(args["proposer"]),
                targets=[to_checksum_address(t) for t in args["targets"]],
                values=[str(v) for v in args["values"]],
                calldatas=[bytes(c).hex() for c in args["calldatas"]],
                description=args["description"], vote_start=args["voteStart"],
                vote_end=args["voteEnd"])
        elif name in ("VoteCast", "VoteCastWithParams"):
            record.update(voter=to_checksum_address(args["voter"]), support=args["support"],
                          weight=str(args["weight"]), reason=args["reason"],
                          params=bytes(args.get("params", b"")).hex())
        elif name == "ProposalQueued":
            record["eta"] = args["etaSeconds"]
        return record

    def _apply(self, r: dict) -> None:
        block, when, tx = r["block"], r["when"], r["tx"]
        if r["kind"] == "leaf":
            self._curated.append(CuratedLeaf(r["index"], bytes.fromhex(r["leaf_hash"]),
                                             r["cid"], block, when, tx))
            return
        proposal_id = int(r["id"])
        if r["kind"] == "ProposalCreated":
            self._proposals[proposal_id] = IndexedProposal(
                proposal_id, r["proposer"], r["targets"], [int(v) for v in r["values"]],
                [bytes.fromhex(c) for c in r["calldatas"]], r["description"], r["vote_start"],
                r["vote_end"], block, when, tx, number=len(self._proposals) + 1)
            return
        proposal = self._proposals.get(proposal_id)
        if proposal is None:  # an event of a proposal made before from_block: not ours to show
            return
        if r["kind"] in ("VoteCast", "VoteCastWithParams"):
            proposal.votes.append(IndexedVote(
                r["voter"], VoteType(r["support"]), int(r["weight"]), r["reason"],
                bytes.fromhex(r["params"]), block, when, tx))
        elif r["kind"] == "ProposalQueued":
            proposal.queued_at, proposal.eta = when, r["eta"]
        elif r["kind"] == "ProposalExecuted":
            proposal.executed_at, proposal.executed_tx = when, tx
        elif r["kind"] == "ProposalCanceled":
            proposal.canceled_at = when
