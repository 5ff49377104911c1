"""Governance: the DAO client that curates publisher-log entries into the curated library.

``GovernanceClient`` (``governance.client``) proposes a curation (one
``appendManyFromLog`` call whose inclusion proofs come from a local, anchored publisher log),
lists and shows proposals with their state and tallies, votes directly or relays EIP-712
``castVoteBySig`` ballots, and queues and executes through the timelock. Custom errors of the
governor, timelock and ledger are decoded into one readable line (``GovernorRevertError``).
``governance.devnet_time`` moves the devnet's timestamp clock (``gym devnet mine``).
``gym gov`` (``governance.cli``) is the command line over the client.

>>> from governance import ProposalState, VoteType
>>> ProposalState(4).label, VoteType.parse("abstain")
('Succeeded', <VoteType.ABSTAIN: 2>)
"""

from governance.client import (
    CurationProposal,
    GovernanceClient,
    Proposal,
    ProposalState,
    SourcedLeaf,
    VoteType,
)
from governance.errors import (
    CurationError,
    GovernanceError,
    GovernorRevertError,
    ProposalStateError,
    SignatureError,
    VotingPowerError,
)

__all__ = [
    "CurationError",
    "CurationProposal",
    "GovernanceClient",
    "GovernanceError",
    "GovernorRevertError",
    "Proposal",
    "ProposalState",
    "ProposalStateError",
    "SignatureError",
    "SourcedLeaf",
    "VoteType",
    "VotingPowerError",
]
