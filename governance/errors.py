"""Exceptions of the governance package: one base, each also a builtin where one fits.

Messages are one line that says what is wrong and what to do; the CLI root prints them as
``error: ...`` without a traceback.
"""

from __future__ import annotations

from typing import Any


class GovernanceError(RuntimeError):
    """Base of every error the governance package raises on purpose."""


class CurationError(GovernanceError, ValueError):
    """A curation proposal cannot be built: unknown log, unanchored index, bad proof, ..."""


class ParameterError(GovernanceError, ValueError):
    """A governance-parameter proposal asks for a value the contracts would refuse, or one that
    changes nothing or would leave governance unusable."""


class SlashError(GovernanceError, ValueError):
    """A slashing proposal cannot be built: unknown node, amount above its stake, bad challenge."""


class CommitteeProposalError(GovernanceError, ValueError):
    """A VerifierCommittee proposal (reverse a settlement, set the appeal window) cannot be
    built: no such challenge, not settled, an appeal window that ends too soon, a value out of
    range."""


class NotProposerError(GovernanceError, PermissionError):
    """Only a proposal's proposer may do this (cancel it)."""


class VotingPowerError(GovernanceError):
    """The account had no votes at the proposal's snapshot (its vote would weigh 0)."""


class SignatureError(GovernanceError, ValueError):
    """A vote signature does not recover to the voter at its current nonce (forged or replayed)."""


class ProposalStateError(GovernanceError):
    """The proposal is not in a state that allows the action (vote, cancel, queue, execute)."""


class GovernorRevertError(GovernanceError):
    """A contract refused a call; ``name`` is its custom error and ``values`` its arguments.

    The message is one readable line: the raw error, then what it means.
    """

    def __init__(self, name: str, values: dict[str, Any], meaning: str = ""):
        self.name, self.values, self.meaning = name, values, meaning
        args = ", ".join(f"{key}={value}" for key, value in values.items())
        super().__init__(f"the contract refused: {name}({args})" + (f": {meaning}" if meaning else ""))
