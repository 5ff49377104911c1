"""Anvil's public dev accounts: the one place their keys are written down or derived.

PUBLIC DEVNET KEYS. Anvil funds accounts derived from its well-known dev mnemonic at
``m/44'/60'/0'/0/i``. Everyone knows them: worthless outside a devnet, never to hold anything
of value. The first five are written out (the devnet deploys, publishes and votes with them
without loading an HD wallet); ``devnet_account_key(i)`` derives any of the twenty.
"""

from __future__ import annotations

DEVNET_CHAIN_ID = 31337  # Anvil's default chain id
ANVIL_MNEMONIC = "test test test test test test test test test test test junk"
ANVIL_ACCOUNTS = 20  # how many accounts Anvil funds by default

ANVIL_DEV_KEYS = (
    "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
    "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
    "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
    "0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6",
    "0x47e179ec197488593b187f80a00eb0da91f1b9d0b13f8733639f19c30a34926a",
)
ANVIL_DEFAULT_KEY = ANVIL_DEV_KEYS[0]  # Anvil's first default account


def devnet_account_key(index: int) -> str:
    """Anvil's public dev account ``index`` (0..19): devnet only."""
    if not 0 <= index < ANVIL_ACCOUNTS:
        raise ValueError(f"Anvil's dev accounts are 0..{ANVIL_ACCOUNTS - 1}, not {index}")
    if index < len(ANVIL_DEV_KEYS):
        return ANVIL_DEV_KEYS[index]
    from eth_account import Account

    Account.enable_unaudited_hdwallet_features()
    return Account.from_mnemonic(ANVIL_MNEMONIC,
                                 account_path=f"m/44'/60'/0'/0/{index}").key.to_0x_hex()
