"""Volunteer training: one gradient-training run shared by peers anywhere through hivemind,
each peer's contribution signed and checked (docs/swarm.md).

- `trainer.swarm.records`: the peer spec and the EIP-712 contribution record (wire formats);
- `trainer.swarm.witness`: what the publishing peer saw, and the check of each record;
- `trainer.swarm.peer`: one peer's session around TRL's trainer (`gym train ... --swarm RUN`).

Importing this package imports neither torch nor hivemind.
"""
