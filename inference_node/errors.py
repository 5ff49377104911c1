"""Errors of the inference node that an operator can fix (a missing engine, a bad option).

``NodeError`` subclasses ``ledger.errors.LedgerError`` so that the ``gym`` root prints it as
one ``error: ...`` line and exits 1, as it does for the ledger's own errors.
"""

from __future__ import annotations

from ledger.errors import LedgerError


class NodeError(LedgerError):
    """The node cannot start or run as configured; the message says what to change."""
