"""``POST /rpc``: the devnet's EIP-1193 back end, a whitelist of JSON-RPC calls forwarded to Anvil.

Without a wallet extension the page signs and sends through Anvil's unlocked dev accounts,
with the very EIP-1193 calls a wallet answers (``eth_accounts``, ``eth_signTypedData_v4``,
``eth_sendTransaction``, ...). The page reaches Anvil through this same-origin proxy rather
than directly: Anvil's RPC port is another origin (CORS), and a proxy can narrow what a page
may ask of accounts that anyone holding the URL could otherwise drive:

- only the methods in ``ALLOWED_METHODS``; no ``anvil_*``, ``evm_*``, ``debug_*`` or raw
  signing of arbitrary bytes;
- ``eth_sendTransaction`` only to the DAO's own contracts (governor, token), without value;
- ``eth_signTypedData_v4`` only for the governor's EIP-712 domain (ballots).

It exists only on the devnet (chain id 31337), where the keys are public anyway, and sits
behind the same Origin and CSRF checks as every other POST. Revert data in an error answer is
decoded to the contract's named error.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
from eth_utils import to_checksum_address

from governance.client import GovernanceClient

ALLOWED_METHODS = frozenset({
    "eth_accounts", "eth_requestAccounts", "eth_chainId", "net_version", "eth_blockNumber",
    "eth_getBalance", "eth_getTransactionCount", "eth_getTransactionByHash",
    "eth_getTransactionReceipt", "eth_getBlockByNumber", "eth_call", "eth_estimateGas",
    "eth_gasPrice", "eth_maxPriorityFeePerGas", "eth_feeHistory", "eth_signTypedData_v4",
    "eth_sendTransaction",
})
RPC_TIMEOUT_S = 30


def _error(request_id: Any, code: int, message: str) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def refusal(request: Any, client: GovernanceClient) -> str | None:
    """Why the proxy refuses ``request`` (a JSON-RPC object), or None when it may pass."""
    if not isinstance(request, dict) or not isinstance(request.get("method"), str):
        return "one JSON-RPC request object with a method, please (no batches)"
    method, params = request["method"], request.get("params") or []
    if method not in ALLOWED_METHODS:
        return f"method {method!r} is not forwarded by the dashboard"
    if not isinstance(params, list):
        return "params must be a list"
    if method == "eth_sendTransaction":
        tx = params[0] if params and isinstance(params[0], dict) else {}
        allowed = {client.governor.address, client.token.address}
        try:
            to = to_checksum_address(tx.get("to") or "")
        except ValueError:
            to = None
        if to not in allowed:
            return ("transactions through the dashboard go to the governor or the token only, "
                    f"not {tx.get('to')!r}")
        if int(str(tx.get("value") or "0x0"), 0) != 0:
            return "transactions through the dashboard carry no value"
    if method == "eth_signTypedData_v4":
        try:
            typed = json.loads(params[1]) if isinstance(params[1], str) else params[1]
            contract = to_checksum_address(typed["domain"]["verifyingContract"])
        except (IndexError, KeyError, TypeError, ValueError):
            return "eth_signTypedData_v4 takes [address, typed data with a verifyingContract]"
        if contract != client.governor.address:
            return "the dashboard signs only ballots of its governor"
    return None


def forward(request: dict, rpc_url: str, client: GovernanceClient) -> dict:
    """Forward one allowed request to the node; decode revert data in an error answer."""
    request_id = request.get("id")
    refused = refusal(request, client)
    if refused:
        return _error(request_id, 4200, refused)  # EIP-1193 "unsupported method"
    method = "eth_accounts" if request["method"] == "eth_requestAccounts" else request["method"]
    payload = {"jsonrpc": "2.0", "id": request_id, "method": method,
               "params": request.get("params") or []}
    try:
        answer = httpx.post(rpc_url, json=payload, timeout=RPC_TIMEOUT_S).json()
    except (httpx.HTTPError, ValueError) as exc:
        return _error(request_id, -32603, f"the devnet node at {rpc_url} did not answer ({exc})")
    error = answer.get("error") if isinstance(answer, dict) else None
    if isinstance(error, dict):
        data = error.get("data")
        if isinstance(data, str) and data.startswith("0x") and len(data) >= 10:
            error["message"] = str(client.decode_revert(data))
    return answer
