"""An attested reward epoch on a deployed devnet, for the governance tests (the dashboard's
Rewards page, reversing a reward root): the epoch is mined to its end, a table of the lines
given is computed from those facts (``committee.rewards.table.compute_table``, not read from
the chain: the distributor checks only the committee's signatures and the budget), published
to the content store, signed by the three verifiers of ``committee_world.register_verifiers``
and attested by their aggregate, as `gym rewards sign` and `gym rewards attest` do."""

from __future__ import annotations

from eth_account import Account

from committee.rewards.attestation import RootClaim, SignedRoot
from committee.rewards.distributor import RewardDistributor
from committee.rewards.epochs import attest_epoch
from committee.rewards.facts import window_of
from committee.rewards.table import EpochFacts, RewardTable, compute_table, encode_table
from contracts.devnet_accounts import ANVIL_DEV_KEYS


def end_epoch(distributor: RewardDistributor, epoch: int) -> None:
    """Mine past ``epoch``'s last block."""
    _, last = distributor.epoch_bounds(epoch)
    head = distributor.head()
    if head <= last:
        distributor.w3.provider.make_request("anvil_mine", [hex(last - head + 1)])


def attest_table(world, content, epoch: int, **facts) -> RewardTable:
    """End ``epoch``, compute its table from ``facts`` (``EpochFacts`` fields: ``stakes``,
    ``uses``, ``settlements``, ``audits``, ...), publish it to ``content`` and attest its root
    with the signatures of ``world``'s three verifiers (``committee_world.BLS``); the table."""
    from committee_world import BLS, VERIFIER_KEYS

    address = world.deployment.contracts["RewardDistributor"].address
    distributor = RewardDistributor(world.w3, address, ANVIL_DEV_KEYS[0])
    end_epoch(distributor, epoch)
    table = compute_table(EpochFacts(window_of(distributor, epoch), **facts))
    cid = content.add_file(encode_table(table), pin=True)
    claim = RootClaim(epoch, table.root, table.total(), cid)
    signed = [SignedRoot.create(sk, claim, chain_id=distributor.chain_id,
                                distributor=distributor.address, verifier_index=i,
                                verifier=Account.from_key(key).address)
              for i, (sk, key) in enumerate(zip(BLS, VERIFIER_KEYS, strict=True))]
    attest_epoch(distributor, world.client(), epoch, signed)
    return table
