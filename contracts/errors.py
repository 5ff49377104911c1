"""Errors of the contracts package: one base, ``ContractsError``, that the ``gym`` root prints
as one ``error: ...`` line (exit 1), as it does the other packages' bases."""

from __future__ import annotations


class ContractsError(RuntimeError):
    """Base of every error the contracts package raises on purpose (build, toolchain)."""
