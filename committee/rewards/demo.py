"""The rewards step of `gym demo`: the epoch the demo ran in, paid (docs/rewards.md).

After the committee step (``committee.demo``), the devnet's clock is moved to the end of the
current reward epoch (blocks mined); each of the demo's three verifiers computes the table from
the chain and the content endpoint, publishes it and signs its root with its BLS key (the same
bytes, three times); one aggregate attests it (sender: Anvil account 9); the clock passes the
appeal window; the account that earned most claims its line, paid from the treasury.
``RewardsError`` (one line) on any failure.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from eth_account import Account

from committee.client import VerifierCommittee
from committee.demo import AGGREGATOR_ACCOUNT, VERIFIER_ACCOUNTS
from committee.rewards.table import POOLS, RewardsError
from contracts.devnet_accounts import devnet_account_key
from contracts.gym_token import format_gym

SHOWN_LINES = 8  # accounts printed of the table


def demo_rewards(settings: Any, ledger_rt: Any, console: Any, *, distributor_address: str,
                 committee_address: str, registry_address: str,
                 advance_time: Callable[..., Any]) -> None:
    """The module docstring's steps. ``settings``: the verifiers' (their BLS keys under
    ``<data dir>/verifiers/<n>/bls-key.json``, written by ``register_demo_verifiers``);
    ``advance_time(w3, seconds, blocks)``: moves the devnet's clock."""
    from committee import keyfile
    from committee.rewards.distributor import RewardDistributor
    from committee.rewards.epochs import attest_epoch, claim_line, sign_epoch
    from committee.rewards.facts import Sources
    from inference_node.registry import NodeRegistry

    started = time.monotonic()
    w3 = ledger_rt.contract.w3
    start = ledger_rt.chain.deployment_block
    distributor = RewardDistributor(w3, distributor_address,
                                    devnet_account_key(AGGREGATOR_ACCOUNT))
    committee = VerifierCommittee(w3, committee_address, from_block=start)
    sources = Sources(ledger=ledger_rt.contract,
                      registry=NodeRegistry(w3, registry_address, from_block=start),
                      committee=committee, content=ledger_rt.content,
                      curated_log_id=ledger_rt.chain.curated_log_id, from_block=start)
    head = w3.eth.block_number
    epoch = distributor.epoch_of(head)
    first, last = distributor.epoch_bounds(epoch)
    advance_time(w3, 0, last - head + 1)
    console.print(f"reward epoch {epoch} (blocks {first}-{last}) ended: mined to block "
                  f"{last + 1}", highlight=False)

    signed, tables = [], set()
    with console.status("each verifier computes the epoch's table from the chain and the "
                        "content endpoint, publishes it, signs its root") as status:
        for n in VERIFIER_ACCOUNTS:
            status.update(f"verifier {n} computes the epoch's table")
            sk = keyfile.load(Path(settings.data_dir) / "verifiers" / str(n) / "bls-key.json")
            verifier = Account.from_key(devnet_account_key(n)).address
            table, _, root = sign_epoch(sources, distributor, committee, epoch, sk, verifier)
            signed.append(root)
            tables.add(root.claim)
    if len(tables) != 1:
        raise RewardsError(f"the verifiers computed {len(tables)} different tables")
    claim = tables.pop()
    console.print(f"three verifiers computed the same table ({claim.table_cid}, root "
                  f"0x{claim.root.hex()}): {format_gym(table.total())} of "
                  f"{format_gym(table.budget)} to {len(table.accounts)} accounts",
                  highlight=False)
    by_total = sorted(table.accounts.items(), key=lambda item: -sum(item[1].values()))
    for account, pools in by_total[:SHOWN_LINES]:
        parts = ", ".join(f"{pool} {format_gym(pools[pool])}" for pool in POOLS if pools.get(pool))
        console.print(f"  {account}: {format_gym(sum(pools.values()))} ({parts})",
                      highlight=False)

    found = attest_epoch(distributor, committee, epoch, signed)
    console.print(f"attested on chain with one aggregate signature of verifiers "
                  f"{[i for i in range(found.signer_bitmap.bit_length()) if found.signer_bitmap >> i & 1]}"
                  f" ({format_gym(found.signer_stake)} of {format_gym(found.active_stake)} "
                  "staked)", highlight=False)
    window = distributor.value("appealWindow")
    advance_time(w3, window + 1, 1)
    account = by_total[0][0]
    token = committee.token()
    before = token.functions.balanceOf(account).call()
    amount = claim_line(distributor, table, account)
    paid = token.functions.balanceOf(account).call() - before
    if paid != amount:
        raise RewardsError(f"the claim paid {paid}, not the table's {amount}")
    console.print(f"moved the clock past the {window} s appeal window; {account} claimed "
                  f"{format_gym(amount)} (`gym rewards show {epoch} {account}` says where "
                  f"it came from); the epoch's rewards took {time.monotonic() - started:.0f} s",
                  highlight=False)


__all__ = ["demo_rewards"]
