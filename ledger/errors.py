"""Exceptions of the ledger package.

One base, ``LedgerError``; each subclass also subclasses the builtin it refines, so callers
may catch either. Verifiers raise only ``VerificationError`` subclasses, which carry what was
expected and what was computed.
"""

from __future__ import annotations


class LedgerError(Exception):
    """Base of every error the ledger package raises on purpose."""


class VerificationError(LedgerError, ValueError):
    """A proof, hash, CID or signature does not check out.

    ``expected`` and ``computed`` hold the two values that disagree (hex strings or ints)
    when there are two to show.
    """

    def __init__(self, message: str, *, expected: object = None, computed: object = None):
        super().__init__(message)
        self.expected = expected
        self.computed = computed


class InclusionProofError(VerificationError):
    """An RFC 9162 inclusion proof is malformed or does not lead to the root."""


class ConsistencyProofError(VerificationError):
    """An RFC 9162 consistency proof is malformed or does not link the two roots."""


class ContentIntegrityError(VerificationError):
    """Bytes read from a content store do not hash to the CID they were asked for."""


class EntryError(LedgerError, ValueError):
    """An entry is malformed: wrong JSON, unknown type/version, a field breaks a rule.

    ``field`` names the offending field (dotted path) when there is one; ``problems`` lists
    every problem found as ``(field or None, message)``, the first one being ``field``'s.
    """

    def __init__(self, message: str, *, field: str | None = None,
                 problems: list[tuple[str | None, str]] | None = None):
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.problems = problems if problems else [(field, message)]


class NotFoundError(LedgerError, KeyError):
    """A log, leaf, block or CID that was asked for does not exist."""

    def __str__(self) -> str:  # KeyError quotes its argument; we want the plain message
        return str(self.args[0]) if self.args else ""


class ContentStoreError(LedgerError):
    """A content store cannot be opened or used (configuration, connection, a failing node)."""


class ContentStoreConfigError(ContentStoreError, ValueError):
    """The content-store setting (``GYM_IPFS_API``) is malformed or cannot be honoured."""


class ContentStoreUnreachableError(ContentStoreError, ConnectionError):
    """The IPFS RPC endpoint named by ``GYM_IPFS_API`` does not answer."""
