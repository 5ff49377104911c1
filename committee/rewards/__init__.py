"""Reward epochs (docs/rewards.md): the table of what each account earned in an epoch,
computed from chain + content endpoint alone (``committee.rewards.facts`` reads,
``committee.rewards.table`` computes and encodes), its Merkle root attested by the committee
and claimed on the RewardDistributor (``committee.rewards.distributor``)."""
