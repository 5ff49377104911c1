"""The dashboard's own errors, and the HTTP status of every error a request can meet.

A refusal is answered with a non-2xx status and one readable line: in JSON as
``{"error": {"message", "type", "code"}}`` (``code``: the contract's custom error when the
chain refused), on a page as the page's message.
"""

from __future__ import annotations

from governance.devnet_time import NotDevnetError
from governance.errors import (
    CurationError,
    GovernanceError,
    GovernorRevertError,
    ProposalStateError,
    SignatureError,
    VotingPowerError,
)
from ledger.errors import LedgerError, NotFoundError
from ledger.json_input import JSONInputError


class DashboardInputError(GovernanceError, ValueError):
    """A request carried a malformed value (address, proposal id, signature, ...)."""


class NoCommitteeError(GovernanceError, LookupError):
    """The deployment has no VerifierCommittee: the Committee page has nothing to show."""


class UnknownProposalError(GovernanceError, LookupError):
    """No proposal of the indexed governor has this id."""


class NoDistributorError(GovernanceError, LookupError):
    """The deployment has no RewardDistributor: the Rewards page has nothing to show."""


class RewardsClaimError(GovernanceError):
    """A reward claim that cannot be made now: no attested root, or already claimed."""


def http_status(exc: Exception) -> int:
    """The status that answers ``exc``."""
    if isinstance(exc, JSONInputError):  # a request body over the limits, or not JSON
        return 413 if exc.reason == "too_large" else 400
    if isinstance(exc, VotingPowerError | NotDevnetError):
        return 403
    if isinstance(exc, UnknownProposalError | NoCommitteeError | NoDistributorError
                  | NotFoundError):
        return 404
    if isinstance(exc, GovernorRevertError):
        return 404 if exc.name == "GovernorNonexistentProposal" else 409
    if isinstance(exc, ProposalStateError | RewardsClaimError):
        return 409
    if isinstance(exc, SignatureError | CurationError | DashboardInputError):
        return 422
    if isinstance(exc, GovernanceError | LedgerError):
        return 502  # the chain or the content store failed us
    return 500


def error_body(exc: Exception) -> dict:
    return {"error": {"message": str(exc), "type": type(exc).__name__,
                      "code": exc.name if isinstance(exc, GovernorRevertError) else None}}
