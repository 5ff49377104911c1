"""An epoch's work, for the `gym rewards` commands and `gym demo`: compute the table from chain +
content (``compute_epoch``), sign its root as a verifier (``sign_epoch``), aggregate the
verifiers' signatures and attest (``attest_epoch``), claim a line (``claim_line``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from committee.rewards.table import MAX_TABLE_BYTES, RewardsError

if TYPE_CHECKING:
    from committee.bls import SecretKey
    from committee.client import VerifierCommittee
    from committee.committee_set import CommitteeSet
    from committee.rewards.attestation import Aggregate, SignedRoot
    from committee.rewards.distributor import RewardDistributor
    from committee.rewards.facts import Sources
    from committee.rewards.table import RewardTable


def compute_epoch(sources: Sources, distributor: RewardDistributor, epoch: int,
                  progress: Callable[[str, int, int], None] | None = None
                  ) -> tuple[RewardTable, bytes]:
    """Epoch ``epoch``'s table and its bytes; ``RewardsError`` while the epoch runs."""
    from committee.rewards.facts import gather, window_of
    from committee.rewards.table import compute_table, encode_table

    table = compute_table(gather(sources, window_of(distributor, epoch), progress))
    return table, encode_table(table)


def sign_epoch(sources: Sources, distributor: RewardDistributor, committee: VerifierCommittee,
               epoch: int, sk: SecretKey, verifier: str, *, expect: str | None = None,
               progress: Callable[[str, int, int], None] | None = None
               ) -> tuple[RewardTable, bytes, SignedRoot]:
    """As verifier ``verifier`` (its BLS key ``sk``): compute the table, publish its bytes, sign
    its root; (the table, its bytes, the signed root). ``expect``: the CID of a proposed table, signed only when it is the one computed
    here (``RewardsError`` otherwise)."""
    from committee.rewards.attestation import RootClaim, SignedRoot

    index = committee.index_of(verifier)
    if index is None:
        raise RewardsError(f"{verifier} is no verifier of the committee: `gym verifier register`")
    table, data = compute_epoch(sources, distributor, epoch, progress)
    cid = sources.content.add_file(data, pin=True)
    if expect is not None and expect != cid:
        raise RewardsError(f"the table proposed ({expect}) is not the one computed here ({cid}, "
                           f"root 0x{table.root.hex()}): not signed; `gym rewards show {epoch} "
                           f"--table {expect}` against `--table {cid}` shows the difference")
    signed = SignedRoot.create(sk, RootClaim(epoch, table.root, table.total(), cid),
                               chain_id=distributor.chain_id, distributor=distributor.address,
                               verifier_index=index, verifier=verifier)
    return table, data, signed


def attest_epoch(distributor: RewardDistributor, committee: VerifierCommittee, epoch: int,
                 signed: Iterable[SignedRoot], report: Callable[[str], None] = lambda _: None
                 ) -> Aggregate:
    """Post the root of ``epoch`` that two thirds of the committee's current stake signed
    (``distributor`` holds the sender's key); ``report`` hears each refused signature."""
    from committee.rewards.attestation import aggregate

    signed = list(signed)
    wrong = [s for s in signed if s.claim.epoch != epoch]
    if wrong:
        raise RewardsError(f"a signed root of epoch {wrong[0].claim.epoch}, not {epoch}")
    active = committee.active_set()
    holders = {i: committee.slot(i).verifier for i in range(len(active.stakes))
               if active.active(i)}
    found, refused = aggregate(signed, active, holders, chain_id=distributor.chain_id,
                               distributor=distributor.address)
    for why in refused:
        report(why)
    if found is None:
        raise RewardsError(f"no root of epoch {epoch} is signed by two thirds of the "
                           "committee's stake")
    post_aggregate(distributor, found, active)
    return found


def post_aggregate(distributor: RewardDistributor, found: Aggregate, active: CommitteeSet
                   ) -> None:
    """Send ``attest`` with ``found``, a quorum of ``active`` (the committee's current set)."""
    claim = found.claim
    distributor.attest(claim.epoch, claim.root, claim.total, claim.table_cid,
                       found.signer_bitmap, found.sigma, found.apk2, active)


def attested_table(distributor: RewardDistributor, content: Any, epoch: int) -> RewardTable:
    """The table attested on chain for ``epoch``, fetched by its CID and checked against the
    attested root."""
    from committee.rewards.distributor import EpochStatus

    standing = distributor.epoch_root(epoch)
    if standing.status != EpochStatus.ATTESTED:
        raise RewardsError(f"epoch {epoch} has no attested root: `gym rewards compute {epoch}` "
                           "computes its table, `--table` shows a file")
    table = read_table(content.cat(standing.table_cid, max_bytes=MAX_TABLE_BYTES), epoch)
    if table.root != standing.root:
        raise RewardsError(f"table {standing.table_cid} has root 0x{table.root.hex()}; the "
                           f"attested root is 0x{standing.root.hex()}")
    return table


def read_table(data: bytes, epoch: int) -> RewardTable:
    from committee.rewards.table import decode_table

    table = decode_table(data)
    if table.epoch != epoch:
        raise RewardsError(f"the table is epoch {table.epoch}'s, not {epoch}'s")
    return table


def claim_line(distributor: RewardDistributor, table: RewardTable, account: str) -> int:
    """Claim ``account``'s line of ``table`` (sent with ``distributor``'s key); the amount."""
    epoch = table.epoch
    amount = table.total(account)
    if amount == 0:
        raise RewardsError(f"{account} earned nothing in epoch {epoch}")
    if distributor.is_claimed(epoch, account):
        raise RewardsError(f"{account} already claimed epoch {epoch}")
    distributor.claim(epoch, account, amount, table.tree().proof(account))
    return amount


__all__ = ["attest_epoch", "attested_table", "claim_line", "compute_epoch", "post_aggregate",
           "read_table", "sign_epoch"]
