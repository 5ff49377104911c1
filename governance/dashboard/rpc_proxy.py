"""``POST /rpc``: the devnet's EIP-1193 back end, a whitelist of JSON-RPC calls forwarded to Anvil.

Without a wallet extension the page signs and sends through Anvil's unlocked dev accounts,
with the very EIP-1193 calls a wallet answers (``eth_accounts``, ``eth_signTypedData_v4``,
``eth_sendTransaction``, ...). The page reaches Anvil through this same-origin proxy rather
than directly: Anvil's RPC port is another origin (CORS), and a proxy can narrow what a page
may ask of accounts that anyone holding the URL could otherwise drive:

- only the methods in ``ALLOWED_METHODS``; no ``anvil_*``, ``evm_*``, ``debug_*`` or raw
  signing of arbitrary bytes;
- ``eth_sendTransaction`` only to the DAO's own contracts (governor, token, and the reward
  distributor's permissionless ``claim``), without value;
- ``eth_signTypedData_v4`` only for the governor's EIP-712 domain (ballots).

It exists only on the devnet (chain id 31337), where the keys are public anyway, and sits
behind the same Origin and CSRF checks as every other POST. Revert data in an error answer is
decoded to the contract's named error.

Every body gets a JSON-RPC 2.0 answer, a result or an error, never a 5xx: a body that is not
JSON or breaks the limits of ``protocol.BoundedJSONRequest`` is ``-32700`` (parse error), one
that is not a request object (or whose id is not a string or number) ``-32600``, params of
the wrong shape (a ``value`` that is not a quantity, a transaction that is not an object,
typed data that is not JSON) ``-32602``, a request the proxy does not forward
``4200`` (EIP-1193 "unsupported method"), a node that does not answer ``-32603``. The node's
answer is parsed with ``parse_json`` too.
"""

from __future__ import annotations

import math
import re
from typing import Any

import httpx
from eth_utils import keccak, to_checksum_address

from governance.client import GovernanceClient
from ledger.json_input import JSONInputError, parse_json

ALLOWED_METHODS = frozenset({
    "eth_accounts", "eth_requestAccounts", "eth_chainId", "net_version", "eth_blockNumber",
    "eth_getBalance", "eth_getTransactionCount", "eth_getTransactionByHash",
    "eth_getTransactionReceipt", "eth_getBlockByNumber", "eth_call", "eth_estimateGas",
    "eth_gasPrice", "eth_maxPriorityFeePerGas", "eth_feeHistory", "eth_signTypedData_v4",
    "eth_sendTransaction",
})
RPC_TIMEOUT_S = 30
MAX_ANSWER_BYTES = 64 * 1024 * 1024  # a full block of transactions is a few MB
MAX_ANSWER_DEPTH = 32  # a block with its transactions and access lists nests 6
MAX_TYPED_DATA_BYTES = 64 * 1024  # a ballot with a 2000-character reason is 3 KB
MAX_TYPED_DATA_DEPTH = 16

PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32602, -32603
UNSUPPORTED_METHOD = 4200  # EIP-1193

CLAIM_SELECTOR = "0x" + keccak(text="claim(uint256,address,uint256,bytes32[])")[:4].hex()
_QUANTITY = re.compile(r"0x[0-9a-fA-F]{1,64}|[0-9]{1,78}")  # hex as JSON-RPC writes it; decimal


class RpcRefusal(Exception):
    """A request the proxy answers itself, with JSON-RPC error ``code``."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def error_answer(request_id: Any, code: int, message: str) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def unreadable_answer(exc: JSONInputError) -> dict:
    """The answer to a body that ``parse_json`` refused (its id unknown, so null)."""
    return error_answer(None, PARSE_ERROR, str(exc))


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def request_id(request: Any) -> Any:
    """The request's id when JSON-RPC allows it (a string, a finite number or null), else
    ``RpcRefusal`` (answered with id null)."""
    rid = request.get("id") if isinstance(request, dict) else None
    valid = (rid is None or (isinstance(rid, int) and not isinstance(rid, bool))
             or (isinstance(rid, float) and math.isfinite(rid))
             or (isinstance(rid, str) and rid.isprintable() and len(rid) <= 200))
    if not valid:
        raise RpcRefusal(INVALID_REQUEST, "a JSON-RPC id is a string or a number, not "
                                          f"{_shown(rid)}")
    return rid


def quantity(value: Any, what: str) -> int:
    """A JSON-RPC QUANTITY (``0x``-prefixed hex; a decimal string or a non-negative integer
    is read too), or ``RpcRefusal(-32602)``; absent is 0."""
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**256:
        return value
    if isinstance(value, str) and _QUANTITY.fullmatch(value):
        number = int(value, 16 if value.startswith("0x") else 10)
        if number < 2**256:
            return number
    raise RpcRefusal(INVALID_PARAMS, f"{what} must be a quantity (0x-prefixed hex), not "
                                     f"{_shown(value)}")


def check(request: Any, client: GovernanceClient) -> None:
    """Raise ``RpcRefusal`` unless the proxy may forward ``request`` (a JSON-RPC object)."""
    if not isinstance(request, dict) or not isinstance(request.get("method"), str):
        raise RpcRefusal(INVALID_REQUEST, "one JSON-RPC request object with a method, please "
                                          "(no batches)")
    method, params = request["method"], request.get("params", [])
    if method not in ALLOWED_METHODS:
        raise RpcRefusal(UNSUPPORTED_METHOD,
                         f"method {_shown(method)} is not forwarded by the dashboard")
    if params is not None and not isinstance(params, list):
        raise RpcRefusal(INVALID_PARAMS, "params must be a list")
    params = params or []
    if method in ("eth_sendTransaction", "eth_call", "eth_estimateGas"):
        tx = params[0] if params and isinstance(params[0], dict) else None
        if tx is None:
            raise RpcRefusal(INVALID_PARAMS, f"{method} takes [transaction object, ...]")
        value = quantity(tx.get("value"), "the transaction's value")
        if method == "eth_sendTransaction":
            to = tx.get("to")
            try:
                to = to_checksum_address(to) if isinstance(to, str) else None
            except ValueError:
                to = None
            distributor = client.reward_distributor
            allowed = {client.governor.address, client.token.address}
            if distributor is not None:
                allowed.add(distributor.address)
            if to not in allowed:
                raise RpcRefusal(UNSUPPORTED_METHOD, "transactions through the dashboard go to "
                                 "the governor, the token or the reward distributor only, not "
                                 f"{_shown(tx.get('to'))}")
            data = tx.get("data") or tx.get("input") or ""
            if distributor is not None and to == distributor.address and not (
                    isinstance(data, str) and data.lower().startswith(CLAIM_SELECTOR)):
                raise RpcRefusal(UNSUPPORTED_METHOD, "transactions through the dashboard call "
                                                     "the reward distributor's claim only")
            if value != 0:
                raise RpcRefusal(UNSUPPORTED_METHOD, "transactions through the dashboard carry "
                                                     "no value")
    if method == "eth_signTypedData_v4":
        try:
            typed = params[1]
            if isinstance(typed, str):
                typed = parse_json(typed, max_bytes=MAX_TYPED_DATA_BYTES,
                                   max_depth=MAX_TYPED_DATA_DEPTH, what="the typed data")
            contract = to_checksum_address(typed["domain"]["verifyingContract"])
        except JSONInputError as exc:
            raise RpcRefusal(INVALID_PARAMS, str(exc)) from None
        except (IndexError, KeyError, TypeError, ValueError):
            raise RpcRefusal(INVALID_PARAMS, "eth_signTypedData_v4 takes [address, typed data "
                                             "with a verifyingContract]") from None
        if contract != client.governor.address:
            raise RpcRefusal(UNSUPPORTED_METHOD, "the dashboard signs only ballots of its "
                                                 "governor")


def forward(request: Any, rpc_url: str, client: GovernanceClient) -> dict:
    """The JSON-RPC answer to ``request``: refused here, or forwarded to the node, with revert
    data in an error answer decoded to the contract's named error."""
    try:
        rid = request_id(request)
    except RpcRefusal as refusal:
        return error_answer(None, refusal.code, str(refusal))
    try:
        check(request, client)
    except RpcRefusal as refusal:
        return error_answer(rid, refusal.code, str(refusal))
    method = "eth_accounts" if request["method"] == "eth_requestAccounts" else request["method"]
    payload = {"jsonrpc": "2.0", "id": rid, "method": method,
               "params": request.get("params") or []}
    try:
        response = httpx.post(rpc_url, json=payload, timeout=RPC_TIMEOUT_S)
        answer = parse_json(response.content, max_bytes=MAX_ANSWER_BYTES,
                            max_depth=MAX_ANSWER_DEPTH, what="the node's answer")
    except (httpx.HTTPError, ValueError) as exc:  # JSONInputError is a ValueError
        return error_answer(rid, INTERNAL_ERROR, f"the devnet node at {rpc_url} did not answer "
                                                 f"({exc})")
    if not isinstance(answer, dict) or not ("result" in answer or "error" in answer):
        return error_answer(rid, INTERNAL_ERROR, f"the devnet node at {rpc_url} answered "
                                                 "something that is not a JSON-RPC response")
    error = answer.get("error")
    if isinstance(error, dict):
        data = error.get("data")
        if isinstance(data, str) and re.fullmatch(r"0x([0-9a-fA-F]{2}){4,}", data):
            error["message"] = str(client.decode_revert(data))
    return answer
