"""An account chosen when it is first needed: a client built for reading never asks for a key,
and one that sends asks once (the rule that picks it is ``contracts.signing.signing_key``,
handed in by the wiring as ``source``)."""

from __future__ import annotations

from collections.abc import Callable

from eth_account import Account
from eth_account.signers.local import LocalAccount

__all__ = ["LazySigner"]


class LazySigner:
    """An account chosen on first use: a fixed ``key``, else what ``source()`` answers (a key,
    or None for none); ``source`` is called at most once."""

    def __init__(self, key: str | None = None, source: Callable[[], str | None] | None = None):
        self._account: LocalAccount | None = Account.from_key(key) if key else None
        self._source = None if key else source

    def get(self) -> LocalAccount | None:
        if self._source is not None:
            source, self._source = self._source, None
            key = source()
            self._account = Account.from_key(key) if key else None
        return self._account

    def set(self, account: LocalAccount | None) -> None:
        self._account, self._source = account, None
