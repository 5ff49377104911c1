"""The Rewards page's data: the RewardDistributor's latest epochs, one account's line of each
attested epoch's table with the source lines that paid it, and the unsigned ``claim`` the
account's wallet sends (docs/rewards.md).

An epoch's table is fetched from the content store by the CID attested on chain and checked
by ``committee.rewards.epochs.attested_table``: its bytes decode as a canonical
``gym-rewards/2`` table whose lines sum to its amounts, and its root is the attested root, so
the line shown is the one the distributor pays. It does not recompute the table from the
chain: `gym rewards compute EPOCH` does, and the page says so. A table that cannot be fetched
or does not check is shown with the reason, never as an error page. Checked tables are kept
per (epoch, CID, root), the latest ``MAX_TABLES`` (a table's bytes never change under its CID;
a reversal changes the root on chain, so the key).

``claim_tx`` answers ``{from, to, data}`` for ``claim(epoch, account, amount, proof)``, the
proof computed here from the checked table (``table.tree().proof(account)``), after trying the
call from the sender so that a refusal (the appeal window not over: ``RewardsNotFinal``) comes
back named. Anyone may claim for any account; the tokens go to the account.

Bounded: the latest ``MAX_EPOCHS`` epochs; older ones with `gym rewards show EPOCH ADDRESS`.
Amounts are decimal strings of token base units in JSON, exact in JavaScript.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from eth_utils import to_checksum_address

from committee.rewards.distributor import EpochRoot, EpochStatus, RewardDistributor
from committee.rewards.epochs import attested_table
from committee.rewards.table import POOLS, RewardTable
from contracts.gym_token import format_gym
from governance.client import GovernanceClient
from governance.dashboard.errors import DashboardInputError, NoDistributorError, RewardsClaimError
from ledger.content import ContentStore
from ledger.errors import LedgerError

MAX_EPOCHS = 24
MAX_TABLES = 8  # checked tables kept (a table may be tens of MB)


def distributor_of(client: GovernanceClient) -> RewardDistributor:
    if client.reward_distributor is None:
        raise NoDistributorError("this deployment has no RewardDistributor (run `gym devnet up "
                                 "--redeploy`)")
    return client.reward_distributor


class RewardTables:
    """The latest ``size`` attested tables the page checked, by (epoch, CID, root)."""

    def __init__(self, size: int = MAX_TABLES) -> None:
        self.size = size
        self._kept: OrderedDict[tuple[int, str, bytes], RewardTable] = OrderedDict()
        self._lock = threading.Lock()

    def attested(self, distributor: RewardDistributor, content: ContentStore,
                 standing: EpochRoot) -> RewardTable:
        """The table attested for ``standing.epoch``, fetched and checked once
        (``attested_table``); ``RewardsError`` (or the content store's ``LedgerError``) when it
        cannot be fetched or does not check."""
        key = (standing.epoch, standing.table_cid, standing.root)
        with self._lock:
            if key in self._kept:
                self._kept.move_to_end(key)
                return self._kept[key]
        table = attested_table(distributor, content, standing.epoch)
        if table.root == standing.root:  # the chain did not change in between
            with self._lock:
                self._kept[key] = table
                while len(self._kept) > self.size:
                    self._kept.popitem(last=False)
        return table


def _hex(data: bytes) -> str:
    return "0x" + data.hex()


def _status(standing: EpochRoot, epoch: int, current: int, now: int) -> str:
    if epoch == current:
        return "running"
    if standing.status == EpochStatus.ATTESTED:
        return "final" if now >= standing.final_at else "attested"
    return {EpochStatus.NONE: "unattested", EpochStatus.REVERSED: "reversed"}[standing.status]


def _epochs(distributor: RewardDistributor, limit: int) -> tuple[int, list[int]]:
    current = distributor.current_epoch()
    return current, list(range(current, max(current - limit, -1), -1))


def rewards_json(client: GovernanceClient, now: int, limit: int = MAX_EPOCHS) -> dict:
    """The distributor as the page and ``GET /api/rewards`` show it: its parameters and the
    latest ``limit`` epochs (at most ``MAX_EPOCHS``), newest first. An epoch's ``status`` is
    ``running``, ``unattested`` (ended, no root yet), ``attested`` (within its appeal window),
    ``final`` (claimable) or ``reversed``."""
    distributor = distributor_of(client)
    with client.rpc_errors():
        current, epochs = _epochs(distributor, max(1, min(limit, MAX_EPOCHS)))
        budget, pool_bps = distributor.budget_of(current)
        treasury = to_checksum_address(distributor.value("treasury"))
        params = {
            "address": distributor.address, "governance": distributor.value("governance"),
            "treasury": treasury, "current_epoch": current,
            "epoch_blocks": distributor.value("epochBlocks"),
            "appeal_window": distributor.value("appealWindow"), "budget": str(budget),
            "pool_bps": list(pool_bps),
            "treasury_balance": str(client.token.functions.balanceOf(treasury).call()),
            "treasury_allowance": str(client.token.functions.allowance(
                treasury, distributor.address).call())}
        rows = []
        for epoch in epochs:
            first, last = distributor.epoch_bounds(epoch)
            epoch_budget, epoch_bps = distributor.budget_of(epoch)
            standing = distributor.epoch_root(epoch)
            rows.append({
                "epoch": epoch, "blocks": [first, last], "budget": str(epoch_budget),
                "pool_bps": list(epoch_bps), "status": _status(standing, epoch, current, now),
                "root": _hex(standing.root) if standing.status != EpochStatus.NONE else None,
                "total": str(standing.total), "claimed": str(standing.claimed),
                "table_cid": standing.table_cid or None,
                "attested_at": standing.attested_at or None,
                "final_at": standing.final_at or None})
    return {**params, "pools": list(POOLS), "epochs": rows, "shown": len(rows)}


def source_text(pool: str, line: dict[str, Any], label: Callable[[str], str]) -> str:
    """Where one line of the table came from, in words (its amount is shown beside it)."""
    if pool == "data":
        return (f"experience {line['experience']}, curated from this account's log, named in "
                f"{line['uses']} of the {line['node_uses']} counted uses of node "
                f"{label(line['node'])} (stake {format_gym(line['stake'])})")
    if pool == "compute":
        return (f"{line['samples']} credited samples in contribution {line['contribution']} "
                f"to run {line['run']}, curated in the epoch")
    if pool == "verification" and "challenge" in line:
        return f"signed the settlement of committee challenge {line['challenge']}, finalized"
    if pool == "verification":
        return (f"published audit report {line['report']}: {line['checked']} sampled receipts "
                f"of node {label(line['node'])}'s log {line['log_id']} checked, checkpoint "
                f"{line['size']}")
    if pool == "availability":
        return (f"a node active at the epoch's end with stake {format_gym(line['stake'])}: "
                f"{line['passed']} of its {line['checkpoints']} audited checkpoint"
                f"{'' if line['checkpoints'] == 1 else 's'} passed")
    return ", ".join(f"{key} {value}" for key, value in line.items())


def _line_json(table: RewardTable, account: str, label: Callable[[str], str]) -> dict:
    pools = table.accounts.get(account, {})
    return {
        "total": str(table.total(account)),
        "pools": {pool: str(pools.get(pool, 0)) for pool in POOLS},
        "sources": [{"pool": pool, "amount": str(line["amount"]),
                     "text": source_text(pool, line, label),
                     "line": {k: (str(v) if k in ("amount", "stake") else v)
                              for k, v in line.items()}}
                    for pool, lines in table.lines_of(account).items() for line in lines],
    }


def account_rewards_json(client: GovernanceClient, content: ContentStore, tables: RewardTables,
                         account: str, now: int, label: Callable[[str], str] = str,
                         limit: int = MAX_EPOCHS) -> dict:
    """``account``'s line of each attested (or final) epoch among the latest ``limit``, newest
    first: its amounts per pool, the source lines that paid it, whether it claimed and whether
    it can now; ``verified`` False with the ``error`` when the table cannot be fetched or
    does not check."""
    distributor = distributor_of(client)
    account = to_checksum_address(account)
    out = []
    with client.rpc_errors():
        current, epochs = _epochs(distributor, max(1, min(limit, MAX_EPOCHS)))
        for epoch in epochs:
            standing = distributor.epoch_root(epoch)
            if standing.status != EpochStatus.ATTESTED:
                continue
            item = {"epoch": epoch, "status": _status(standing, epoch, current, now),
                    "root": _hex(standing.root), "table_cid": standing.table_cid,
                    "final_at": standing.final_at, "claimed": distributor.is_claimed(
                        epoch, account), "verified": False, "error": None, "total": "0",
                    "pools": {pool: "0" for pool in POOLS}, "sources": [], "can_claim": False}
            try:
                table = tables.attested(distributor, content, standing)
            except LedgerError as exc:  # RewardsError, or the content store's
                item["error"] = str(exc)
            else:
                item.update(_line_json(table, account, label), verified=True)
                item["can_claim"] = (item["status"] == "final" and not item["claimed"]
                                     and table.total(account) > 0)
            out.append(item)
    return {"account": account, "current_epoch": current, "epochs": out}


def claim_tx(client: GovernanceClient, content: ContentStore, tables: RewardTables, sender: str,
             epoch: int, account: str) -> dict:
    """``claim(epoch, account, amount, proof)`` from ``sender``'s wallet, the amount and proof
    from the checked attested table; refused before the wallet sees it when the account earned
    nothing, already claimed, or the distributor would refuse it (its named error)."""
    distributor = distributor_of(client)
    sender, account = to_checksum_address(sender), to_checksum_address(account)
    with client.rpc_errors():
        standing = distributor.epoch_root(epoch)
        if standing.status != EpochStatus.ATTESTED:
            raise RewardsClaimError(f"epoch {epoch} has no attested reward root: nothing to "
                                    "claim yet")
        table = tables.attested(distributor, content, standing)
        amount = table.total(account)
        if amount == 0:
            raise DashboardInputError(f"{account} earned nothing in epoch {epoch}")
        if distributor.is_claimed(epoch, account):
            raise RewardsClaimError(f"{account} already claimed its rewards of epoch {epoch}")
        proof = table.tree().proof(account)
        call = distributor.contract.functions.claim(epoch, account, amount, proof)
        call.call({"from": sender})
    data = distributor.contract.encode_abi("claim", args=[epoch, account, amount, proof])
    return {"from": sender, "to": distributor.address, "data": data, "epoch": epoch,
            "account": account, "amount": str(amount), "proof": [_hex(p) for p in proof]}
