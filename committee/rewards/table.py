"""The reward table of one epoch, `gym-rewards/2` (docs/rewards.md): computed from the epoch's
facts (``compute_table``), encoded as one canonical JSON document (``encode_table``), decoded
and re-checked from hostile bytes (``decode_table``).

Every amount is an integer of GYM base units, computed with integers only: a line's amount is
``floor(pool budget × its weight / the pool's weight)``, so the same facts give the same bytes
on every machine, and a pool never pays more than its budget (the floors' dust stays in the
treasury). The Merkle tree is OpenZeppelin's StandardMerkleTree over ``(address account,
uint256 total)`` (``ledger.merkle_distribution``), one leaf per account with a non-zero total.

The four pools (the budget's split, ``pool_bps``, is the RewardDistributor's for the epoch):

- ``data``: each active node with counted uses gets a slice of the pool proportional to its
  stake; its slice is split over the curated experiences its receipts named, by uses, each
  part paid to the author of the experience (the owner of the log its ``add`` was curated
  from). A node that signs receipts to itself moves only its own slice.
- ``compute``: the credited samples of the contribution entries of the swarm runs curated in
  the epoch, paid to each contributor.
- ``verification``: one point per verifier per settlement it signed that was finalized in the
  epoch and not reversed, and one per published audit report that checked something (the
  first of each verifier on each checkpoint anchored in the epoch).
- ``availability``: active nodes with an audited checkpoint that passed, by stake times the
  share of their audited checkpoints that passed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from eth_utils import is_hex_address, to_checksum_address

from ledger.canonical_json import canonical_bytes
from ledger.errors import LedgerError
from ledger.json_input import JSONInputError, parse_json

FORMAT = "gym-rewards/2"
POOLS = ("data", "compute", "verification", "availability")
BPS = 10_000
MAX_TABLE_BYTES = 64 * 1024 * 1024  # a table of ~100,000 accounts with their sources
MAX_LINES = 1_000_000  # accounts, and source lines of each pool
UINT256 = 2**256


class RewardsError(LedgerError):
    """A reward table that cannot be computed, decoded or checked; one line says why."""


# ----------------------------------------------------------------------------- facts


@dataclass(frozen=True)
class Use:
    """``uses`` receipts of ``node`` (an operator) named ``experience`` (its add entry's CID),
    which ``author`` added."""

    node: str
    experience: str
    author: str
    uses: int


@dataclass(frozen=True)
class Contribution:
    """A contribution entry (``entry``) of curated run ``run``: ``samples`` credited to
    ``contributor``."""

    run: str
    entry: str
    contributor: str
    samples: int


@dataclass(frozen=True)
class Settlement:
    """Committee challenge ``challenge`` finalized in the epoch, its verdict signed by
    ``signers`` (verifier addresses)."""

    challenge: int
    signers: tuple[str, ...]


@dataclass(frozen=True)
class AuditReport:
    """A verifier's published audit report that the chain agrees with
    (``committee.audit_reports.ReportChecker``): ``verifier``'s entry ``entry`` on checkpoint
    ``size`` of node ``node``'s receipt log ``log_id``; ``checked``: the sampled receipts it
    gave a finding other than abstained; ``passed``: it checked some, each one verified."""

    verifier: str
    entry: str
    node: str
    log_id: int
    size: int
    checked: int
    passed: bool


@dataclass(frozen=True)
class EpochWindow:
    """Epoch ``epoch`` of the distributor at ``distributor`` on chain ``chain_id``: blocks
    ``[first_block, last_block]``, its budget and split."""

    chain_id: int
    distributor: str
    epoch: int
    first_block: int
    last_block: int
    budget: int
    pool_bps: tuple[int, int, int, int]

    def __post_init__(self) -> None:  # one spelling: the document's bytes are canonical
        object.__setattr__(self, "distributor", to_checksum_address(self.distributor))
        object.__setattr__(self, "pool_bps", tuple(self.pool_bps))


@dataclass(frozen=True)
class EpochFacts:
    """What an epoch's table is computed from, each read from chain + content endpoint
    (``committee.rewards.facts.gather``). ``stakes``: operator -> stake of each node active at
    the epoch's last block; ``audits``: the reports of active verifiers on checkpoints
    anchored in the epoch, the first of each verifier per checkpoint."""

    window: EpochWindow
    stakes: dict[str, int] = field(default_factory=dict)
    uses: tuple[Use, ...] = ()
    contributions: tuple[Contribution, ...] = ()
    settlements: tuple[Settlement, ...] = ()
    audits: tuple[AuditReport, ...] = ()


# ----------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class RewardTable:
    """An epoch's table: per account and pool the amount, the sources of each pool's lines,
    the Merkle root over (account, total)."""

    window: EpochWindow
    accounts: dict[str, dict[str, int]]  # account -> pool -> amount (non-zero totals only)
    sources: dict[str, list[dict[str, Any]]]  # pool -> lines, each with its amount
    root: bytes

    @property
    def epoch(self) -> int:
        return self.window.epoch

    @property
    def budget(self) -> int:
        return self.window.budget

    def total(self, account: str | None = None) -> int:
        """What ``account`` earned (every account when None)."""
        if account is None:
            return sum(sum(pools.values()) for pools in self.accounts.values())
        return sum(self.accounts.get(to_checksum_address(account), {}).values())

    def paid(self, pool: str) -> int:
        return sum(pools.get(pool, 0) for pools in self.accounts.values())

    def values(self) -> list[tuple[str, int]]:
        """The Merkle tree's values: (account, total), by account."""
        return [(account, sum(pools.values())) for account, pools in sorted(self.accounts.items())]

    def tree(self):
        from ledger.merkle_distribution import RewardTree

        return RewardTree.of(self.values())

    def lines_of(self, account: str) -> dict[str, list[dict[str, Any]]]:
        """The source lines that paid ``account``, per pool."""
        account = to_checksum_address(account)
        return {pool: [line for line in lines if line["account"] == account]
                for pool, lines in self.sources.items()}


def pool_budgets(budget: int, pool_bps: Iterable[int]) -> dict[str, int]:
    return {pool: budget * bps // BPS for pool, bps in zip(POOLS, pool_bps, strict=True)}


def compute_table(facts: EpochFacts) -> RewardTable:
    """The epoch's table from its facts (module docstring); deterministic."""
    budgets = pool_budgets(facts.window.budget, facts.window.pool_bps)
    sources: dict[str, list[dict[str, Any]]] = {pool: [] for pool in POOLS}

    # data: a stake-sized slice per node with counted uses, split by its uses
    per_node: dict[str, dict[tuple[str, str], int]] = defaultdict(dict)
    for use in facts.uses:
        if use.uses > 0 and facts.stakes.get(use.node, 0) > 0:
            key = (use.experience, use.author)
            per_node[use.node][key] = per_node[use.node].get(key, 0) + use.uses
    staked = sum(facts.stakes[node] for node in per_node)
    for node in sorted(per_node):
        counted = sum(per_node[node].values())
        stake = facts.stakes[node]
        for (experience, author), uses in sorted(per_node[node].items()):
            amount = budgets["data"] * stake * uses // (staked * counted)
            sources["data"].append({"account": author, "amount": amount, "node": node,
                                    "stake": stake, "experience": experience, "uses": uses,
                                    "node_uses": counted})

    # compute: credited samples of the curated runs' contribution entries
    samples = sum(c.samples for c in facts.contributions if c.samples > 0)
    for c in sorted(facts.contributions, key=lambda c: (c.run, c.entry)):
        if c.samples > 0:
            sources["compute"].append({
                "account": c.contributor, "amount": budgets["compute"] * c.samples // samples,
                "run": c.run, "contribution": c.entry, "samples": c.samples})

    # verification: a point per signer of each settlement that counted, and per audit report
    # that checked something of an active node (one per verifier and checkpoint)
    stakes = {to_checksum_address(node): stake for node, stake in facts.stakes.items()}
    reports = {(to_checksum_address(r.verifier), r.log_id, r.size): r
               for r in sorted(facts.audits, key=lambda r: r.entry, reverse=True)
               if r.checked > 0 and stakes.get(to_checksum_address(r.node), 0) > 0}
    points = sum(len(set(s.signers)) for s in facts.settlements) + len(reports)
    for s in sorted(facts.settlements, key=lambda s: s.challenge):
        for signer in sorted(set(s.signers)):
            sources["verification"].append({
                "account": signer, "amount": budgets["verification"] // points,
                "challenge": s.challenge})
    for (verifier, log_id, size), r in sorted(reports.items()):
        sources["verification"].append({
            "account": verifier, "amount": budgets["verification"] // points,
            "node": to_checksum_address(r.node), "log_id": log_id, "size": size,
            "report": r.entry, "checked": r.checked})

    # availability: active nodes by stake x the share of their audited checkpoints that passed
    audited: dict[str, set[tuple[int, int]]] = defaultdict(set)
    passed: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for r in reports.values():
        node = to_checksum_address(r.node)
        audited[node].add((r.log_id, r.size))
        if r.passed:
            passed[node].add((r.log_id, r.size))
    weights = {node: stakes[node] * len(passed[node]) // len(audited[node])
               for node in sorted(passed)}
    weight = sum(weights.values())
    for node, w in weights.items():
        if w:
            sources["availability"].append({
                "account": node, "amount": budgets["availability"] * w // weight,
                "stake": stakes[node], "checkpoints": len(audited[node]),
                "passed": len(passed[node])})

    return _table(facts.window, sources)


def _table(window: EpochWindow, sources: dict[str, list[dict[str, Any]]]) -> RewardTable:
    accounts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for pool, lines in sources.items():
        for line in lines:
            line["account"] = to_checksum_address(line["account"])
            if line["amount"]:
                accounts[line["account"]][pool] += line["amount"]
    accounts = {a: dict(p) for a, p in sorted(accounts.items())}
    values = [(a, sum(p.values())) for a, p in accounts.items()]
    if values:
        from ledger.merkle_distribution import RewardTree

        root = RewardTree.of(values).root
    else:
        root = bytes(32)
    return RewardTable(window, accounts, sources, root)


# ----------------------------------------------------------------------------- the document


def table_document(table: RewardTable) -> dict[str, Any]:
    """The table as its JSON document (amounts as decimal strings: a uint256 is no JSON
    number every reader keeps exactly)."""
    w = table.window
    return {
        "format": FORMAT,
        "chain_id": w.chain_id,
        "distributor": w.distributor,
        "epoch": w.epoch,
        "blocks": [w.first_block, w.last_block],
        "budget": str(w.budget),
        "pool_bps": list(w.pool_bps),
        "pools": {pool: str(table.paid(pool)) for pool in POOLS},
        "total": str(table.total()),
        "root": "0x" + table.root.hex(),
        "accounts": [{"account": account, "total": str(sum(pools.values())),
                      **{pool: str(pools.get(pool, 0)) for pool in POOLS}}
                     for account, pools in table.accounts.items()],
        "sources": {pool: [line_document(line) for line in lines]
                    for pool, lines in table.sources.items()},
    }


def line_document(line: dict[str, Any]) -> dict[str, Any]:
    """A source line as the document writes it: its uint256 values as decimal strings."""
    return {k: str(v) if k in _AMOUNTS else v for k, v in line.items()}


def encode_table(table: RewardTable) -> bytes:
    """RFC 8785 bytes of the table's document: the bytes whose CID the committee signs."""
    return canonical_bytes(table_document(table))


def _int(value: Any, what: str, *, text: bool = False, limit: int = UINT256) -> int:
    if text:
        if not isinstance(value, str) or not value.isdigit() or len(value) > 78:
            raise RewardsError(f"{what}: expected a decimal string, got {value!r:.60}")
        value = int(value)
    if type(value) is not int or not 0 <= value < limit:
        raise RewardsError(f"{what}: expected an integer in [0, {limit}), got {value!r:.60}")
    return value


def _address(value: Any, what: str) -> str:
    if not isinstance(value, str) or not is_hex_address(value) or not value.startswith("0x"):
        raise RewardsError(f"{what}: expected an address, got {value!r:.60}")
    return to_checksum_address(value)


_AMOUNTS = {"amount", "stake"}  # uint256 values: decimal strings in the document
_COUNTS = {"uses", "node_uses", "samples", "challenge", "checkpoints", "passed", "log_id",
           "size", "checked"}
_SOURCE_FIELDS = {  # the field sets a line of each pool may have
    "data": ({"account", "amount", "node", "stake", "experience", "uses", "node_uses"},),
    "compute": ({"account", "amount", "run", "contribution", "samples"},),
    "verification": ({"account", "amount", "challenge"},
                     {"account", "amount", "node", "log_id", "size", "report", "checked"}),
    "availability": ({"account", "amount", "stake", "checkpoints", "passed"},),
}


def decode_table(data: bytes) -> RewardTable:
    """The table ``data`` encodes, checked: its fields, every account's amounts equal to the
    sum of its source lines, no pool over its budget, the root recomputed, and ``data`` the
    canonical encoding of what it decodes to (one table, one CID). ``RewardsError`` otherwise.
    It does not recompute the lines from the chain: `gym rewards compute` does."""
    try:
        doc = parse_json(data, max_bytes=MAX_TABLE_BYTES, max_depth=8, what="reward table")
    except JSONInputError as exc:
        raise RewardsError(f"reward table: {exc}") from None
    expected = {"format", "chain_id", "distributor", "epoch", "blocks", "budget", "pool_bps",
                "pools", "total", "root", "accounts", "sources"}
    if not isinstance(doc, dict) or set(doc) != expected:
        raise RewardsError(f"reward table: expected exactly the fields {sorted(expected)}")
    if doc["format"] != FORMAT:
        raise RewardsError(f"reward table: format {doc['format']!r:.40}, not {FORMAT!r}")
    blocks, bps = doc["blocks"], doc["pool_bps"]
    if not (isinstance(blocks, list) and len(blocks) == 2 and isinstance(bps, list)
            and len(bps) == len(POOLS)):
        raise RewardsError("reward table: blocks is [first, last] and pool_bps has 4 parts")
    pool_bps = tuple(_int(b, "pool_bps", limit=BPS + 1) for b in bps)
    if sum(pool_bps) != BPS:
        raise RewardsError(f"reward table: pool_bps sums to {sum(pool_bps)}, not {BPS}")
    sources_in = doc["sources"]
    if not isinstance(sources_in, dict) or set(sources_in) != set(POOLS):
        raise RewardsError(f"reward table: sources has exactly the pools {list(POOLS)}")
    sources: dict[str, list[dict[str, Any]]] = {}
    for pool in POOLS:
        lines = sources_in[pool]
        if not isinstance(lines, list) or len(lines) > MAX_LINES:
            raise RewardsError(f"reward table: sources.{pool} is a list of at most "
                               f"{MAX_LINES} lines")
        out = []
        for i, line in enumerate(lines):
            if not isinstance(line, dict) or set(line) not in _SOURCE_FIELDS[pool]:
                raise RewardsError(f"reward table: sources.{pool}[{i}] has exactly the fields "
                                   + " or ".join(str(sorted(f)) for f in _SOURCE_FIELDS[pool]))
            line = dict(line)
            for name in ("account", "node") if pool != "data" else ("account",):
                if name in line:
                    line[name] = _address(line[name], f"sources.{pool}[{i}].{name}")
            for name in _AMOUNTS & set(line):
                line[name] = _int(line[name], f"sources.{pool}[{i}].{name}", text=True)
            for name in _COUNTS & set(line):
                line[name] = _int(line[name], f"sources.{pool}[{i}].{name}", limit=2**53)
            out.append(line)
        sources[pool] = out
    window = EpochWindow(_int(doc["chain_id"], "chain_id"),
                         _address(doc["distributor"], "distributor"), _int(doc["epoch"], "epoch"),
                         _int(blocks[0], "blocks[0]"), _int(blocks[1], "blocks[1]"),
                         _int(doc["budget"], "budget", text=True), pool_bps)
    table = _table(window, sources)
    budgets = pool_budgets(window.budget, window.pool_bps)
    over = [pool for pool in POOLS if table.paid(pool) > budgets[pool]]
    if over:
        raise RewardsError(f"reward table: pool {over[0]} pays {table.paid(over[0])}, over its "
                           f"budget of {budgets[over[0]]}")
    if encode_table(table) != bytes(data):
        raise RewardsError("reward table: its accounts, totals or root are not those of its "
                           "source lines (or its bytes are not canonical)")
    return table


__all__ = ["FORMAT", "MAX_TABLE_BYTES", "POOLS", "AuditReport", "Contribution", "EpochFacts", "EpochWindow",
           "RewardTable", "RewardsError", "Settlement", "Use", "compute_table", "decode_table",
           "encode_table", "line_document", "pool_budgets", "table_document"]
