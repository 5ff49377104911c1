"""Governance: the DAO client that curates publisher-log entries into the curated library.

``GovernanceClient`` (``governance.client``) proposes a curation (one
``appendManyFromLog`` call whose inclusion proofs come from a local, anchored publisher log),
lists and shows proposals with their state and tallies, votes directly or relays EIP-712
``castVoteBySig`` ballots, cancels pending proposals, proposes governance-parameter changes
(``governance.proposals``: voting delay/period, threshold, quorum, timelock delay, the
RewardDistributor's budget, split and appeal window) and node slashing
(``NodeRegistry.slash`` on an open challenge), VerifierCommittee reversals and its appeal
window, RewardDistributor root reversals (``governance.appeals``), decodes every action for
display, and
queues and executes through the timelock. Custom errors of the
governor, timelock and ledger are decoded into one readable line (``GovernorRevertError``).
``governance.devnet_time`` moves the devnet's timestamp clock (``gym devnet mine``).
``gym gov`` (``governance.cli``) is the command line over the client; ``gym dashboard``
(``governance.dashboard``) is the web page over the same chain state.

>>> from governance import ProposalState, VoteType
>>> ProposalState(4).label, VoteType.parse("abstain")
('Succeeded', <VoteType.ABSTAIN: 2>)
"""

from ledger.lazy_exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "governance.client": ["CurationProposal", "GovernanceClient", "Proposal", "ProposalState",
        "SourcedLeaf", "VoteType"],
    "governance.errors": ["CurationError", "GovernanceError", "GovernorRevertError",
        "NotProposerError", "ParameterError", "ProposalStateError", "SignatureError", "SlashError",
        "VotingPowerError"],
    "governance.proposals": ["ActionDecoder", "DecodedAction", "ParamsProposal", "SlashProposal"],
})
