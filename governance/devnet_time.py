"""Time travel on the devnet: the governor's clock is block timestamps, and an idle Anvil
(automine) mines no blocks, so its time stands still between transactions.

A proposal's voting delay, voting period and timelock delay are durations in seconds; on
Anvil they pass only when a block with a later timestamp is mined. ``advance_time`` moves the
chain's time forward and mines blocks (``evm_increaseTime`` then ``anvil_mine``);
``ensure_time_after`` mines just enough for ``block.timestamp`` to pass a timepoint. Both
refuse any chain but the devnet's (chain id 31337): on a real network time is not ours to move.
"""

from __future__ import annotations

from datetime import UTC, datetime

from web3 import Web3

from contracts.devnet_accounts import DEVNET_CHAIN_ID
from governance.errors import GovernanceError

__all__ = ["DEVNET_CHAIN_ID", "NotDevnetError", "advance_time", "ensure_time_after", "is_devnet",
           "utc"]


def utc(timestamp: int) -> str:
    """A chain timestamp as every governance message shows it: ``2026-11-24 20:15:03 UTC``."""
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


class NotDevnetError(GovernanceError):
    """Time travel was asked of a chain that is not the devnet."""


def is_devnet(w3: Web3) -> bool:
    return w3.eth.chain_id == DEVNET_CHAIN_ID


def _rpc(w3: Web3, method: str, params: list) -> object:
    response = w3.provider.make_request(method, params)
    if "error" in response:
        error = response["error"]
        raise GovernanceError(f"{method} failed: {error.get('message', error)}")
    return response.get("result")


def advance_time(w3: Web3, seconds: int = 0, blocks: int = 1) -> dict:
    """Move the devnet's clock ``seconds`` forward and mine ``blocks`` blocks (at least one, so
    the new time shows in ``block.timestamp``); returns the new head block."""
    if seconds < 0 or blocks < 0:
        raise GovernanceError("seconds and blocks must not be negative")
    if not is_devnet(w3):
        raise NotDevnetError(f"chain {w3.eth.chain_id} is not the devnet ({DEVNET_CHAIN_ID}): "
                             "only the devnet's time can be moved")
    if seconds:
        _rpc(w3, "evm_increaseTime", [seconds])
    _rpc(w3, "anvil_mine", [hex(max(blocks, 1))])
    return w3.eth.get_block("latest")


def ensure_time_after(w3: Web3, timepoint: int) -> int:
    """Mine on the devnet until the head block's timestamp is past ``timepoint``; returns it."""
    now = w3.eth.get_block("latest")["timestamp"]
    if now > timepoint:
        return now
    return advance_time(w3, timepoint - now + 1)["timestamp"]
