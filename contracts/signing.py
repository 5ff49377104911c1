"""Who signs a transaction: the one rule every command that sends one follows.

``signing_key(chain_id, env_var, env_key, account)`` picks, in this order:

1. ``--account N``: Anvil's public dev account N, on the devnet (chain id 31337) only;
2. the command's environment variable (``env_key``, read from ``env_var``, e.g.
   ``GYM_VOTER_KEY`` or ``GYM_PUBLISHER_KEY``);
3. on the devnet, Anvil's account 0, saying so in one line on stderr;

and off the devnet with neither it refuses with one line naming the variable.
The clients apply it through ``ledger.signer.LazySigner`` only when a transaction is about to
be signed, so commands that only read never pick (nor announce) a key.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from contracts.devnet_accounts import ANVIL_ACCOUNTS, DEVNET_CHAIN_ID, devnet_account_key
from contracts.errors import ContractsError

__all__ = ["SigningKeyError", "held_notices", "short_address", "signing_key"]


class SigningKeyError(ContractsError, ValueError):
    """No key to sign with, or an ``--account`` that cannot be used here."""


_held: list[str] | None = None  # while held_notices() runs, announcements wait here


@contextmanager
def held_notices() -> Iterator[list[str]]:
    """Hold the announcements made meanwhile in the list yielded, instead of printing them: the
    ``gym`` root prints them once a command succeeded, and a command that fails says only its
    one ``error:`` line."""
    global _held
    _held = []
    try:
        yield _held
    finally:
        _held = None


def _to_stderr(line: str) -> None:
    if _held is not None:
        _held.append(line)
    else:
        print(line, file=sys.stderr, flush=True)


def short_address(address: str) -> str:
    return f"{address[:6]}…{address[-4:]}"


def signing_key(chain_id: int, env_var: str, env_key: str | None = None,
                account: int | None = None, *,
                announce: Callable[[str], None] | None = _to_stderr) -> str:
    """The key that signs, by the rule above; ``announce`` receives the line said when the
    devnet's account 0 is picked for lack of a choice (None: say nothing)."""
    devnet = chain_id == DEVNET_CHAIN_ID
    if account is not None:
        if not devnet:
            raise SigningKeyError(f"--account picks a public devnet key, and chain {chain_id} is "
                                  f"not the devnet ({DEVNET_CHAIN_ID}): set {env_var} instead")
        if not 0 <= account < ANVIL_ACCOUNTS:
            raise SigningKeyError(f"--account is one of Anvil's accounts 0..{ANVIL_ACCOUNTS - 1}, "
                                  f"not {account}")
        return devnet_account_key(account)
    if env_key:
        return env_key
    if not devnet:
        raise SigningKeyError(f"no signing key: set {env_var} (chain {chain_id} is not the "
                              f"devnet, where Anvil's account 0 would sign)")
    key = devnet_account_key(0)
    if announce is not None:
        from eth_account import Account  # 1 s to import: not before a key is used

        address = Account.from_key(key).address
        announce(f"signing as devnet account 0 ({short_address(address)}); --account N or "
                 f"{env_var} to choose")
    return key
