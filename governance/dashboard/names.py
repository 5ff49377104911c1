"""Names for the addresses a voter meets, so that a page reads "GymGovernor" and "dev account 1"
rather than forty hex digits.

The DAO's contracts are named as the deployment names them (``GovernanceClient.decoder``:
GymGovernor, TimelockController, GymToken, ExperienceLedger, NodeRegistry, VerifierCommittee).
On the devnet (chain id 31337) Anvil's public dev accounts are named as `gym` names them with
``--account N``: ``dev account N``, account 0 with its role, ``dev account 0 (deployer)`` (it
deploys the DAO and, by default, relays ballots). No other chain gets dev names: there these
keys are anyone's, and an address is only what it is. Every other address is shortened,
``0x1234…abcd``. The pages put the full address in the ``title`` (on hover) and behind a copy
button, never only the name.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from eth_utils import to_checksum_address
from markupsafe import Markup, escape

from contracts.devnet_accounts import ANVIL_ACCOUNTS, devnet_account_key

DEV_ACCOUNT_ROLES = {0: "deployer"}  # what `gym devnet up` does with the account


@cache
def dev_account_addresses() -> tuple[str, ...]:
    """Anvil's dev accounts 0..19, checksummed (derived once: ~0.5 s)."""
    from eth_account import Account

    return tuple(Account.from_key(devnet_account_key(i)).address for i in range(ANVIL_ACCOUNTS))


def dev_account_name(index: int) -> str:
    role = DEV_ACCOUNT_ROLES.get(index)
    return f"dev account {index}" + (f" ({role})" if role else "")


def short_address(address: str) -> str:
    """``0x1234…abcd``: the first and last four hex digits, as wallets show an address."""
    return f"{address[:6]}…{address[-4:]}"


@dataclass(frozen=True)
class AddressBook:
    """The names this dashboard knows: checksummed address -> name."""

    names: dict[str, str]

    def name(self, address: str) -> str | None:
        try:
            return self.names.get(to_checksum_address(address))
        except ValueError:  # not an address: nothing to name
            return None

    def label(self, address: str) -> str:
        """The name, or the address shortened."""
        return self.name(address) or short_address(address)

    def html(self, address: str | None) -> Markup:
        """The label with the full address on hover (``title``) and a copy button that the
        page's script answers (``data-copy``); ``-`` for no address."""
        if not address:
            return Markup("-")
        full, name = escape(address), self.name(address)
        kind = "addr" if name else "addr hex"  # a shortened address reads as hex
        return Markup(f'<span class="{kind}" title="{full}" data-address="{full}">'
                      f'{escape(name or short_address(address))}</span>'
                      f'<button type="button" class="copy" data-copy="{full}" '
                      f'title="Copy {full}" aria-label="Copy the address {full}">copy</button>')

    def for_script(self) -> dict[str, str]:
        """Lower-case address -> name: what the page's script labels accounts with."""
        return {address.lower(): name for address, name in self.names.items()}


def address_book(contracts: dict[str, str], devnet: bool) -> AddressBook:
    """``contracts`` (address -> contract name) named, and on the devnet Anvil's accounts too;
    a contract's name wins over a dev account's (a contract is never one of them anyway)."""
    names = {to_checksum_address(a): name for a, name in contracts.items()}
    if devnet:
        for index, address in enumerate(dev_account_addresses()):
            names.setdefault(address, dev_account_name(index))
    return AddressBook(names)
