"""The one EVM transaction path: send, wait, replay a revert, decode custom errors.

Every contract client of the repository (``LedgerContract``, the governance client, the
NodeRegistry client, the deployer) writes through ``EvmConnection.send(call, account)``: it
estimates gas (``build_transaction``; a revert at estimation surfaces there, decoded), pads
the estimate (``padded_gas``: an estimate goes stale when the clock moves), takes the
sender's ``pending`` nonce, signs locally, sends raw (so any JSON-RPC node works, an L2
included), waits for the receipt and, when the transaction was mined but reverted, recovers
why. Reads go through ``rpc_errors()``, which turns web3's exceptions into this module's.

Why a mined transaction reverted: its effects are discarded, so no state after the block
shows them, and the state it ran against is its parent block's plus the transactions before
it in its own block. Two replays are possible and both are approximations:

- ``eth_call`` at ``blockNumber - 1`` (the parent) misses the earlier transactions of the
  block (a vote cast just before in the same block) and runs under the parent's timestamp,
  so a time-dependent check (a proposal's state, a timelock's readiness) answers as it did
  a block earlier: the wrong answer exactly when the time moved the call past a boundary;
- ``eth_call`` at ``blockNumber`` sees the block's timestamp and every transaction of the
  block, the reverted one excepted (it left nothing), but also those mined after it.

So ``send`` first asks the node to re-execute the transaction itself at its position
(``debug_traceTransaction`` with the call tracer, whose top frame's ``output`` is the revert
data): that is the state it ran against, exactly. A node without the tracer gets the
``eth_call`` at ``blockNumber``: right on an automining devnet (one transaction a block) and
wrong only when a later transaction of the same block changed what the call checks, whereas
the parent-block replay is wrong for every time-dependent check.

Errors: ``ErrorTable`` holds the custom errors of every ABI a client talks to (a governor's
call bubbles up the timelock's, the ledger's or the registry's errors), plus Solidity's
``Error(string)`` and ``Panic(uint256)``. ``decode_revert`` turns revert data into a
``ContractRevertError`` whose message reads like the Solidity that raised it,
``ExperienceLedgerStaleCheckpoint(logId=1, size=5, anchoredSize=5)``; the client may pass
``format_value`` to show a value its own way (an enum by name, an amount in GYM).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from eth_abi import decode as abi_decode
from eth_abi.exceptions import DecodingError
from eth_utils import function_abi_to_4byte_selector, to_checksum_address

from ledger.errors import LedgerError

if TYPE_CHECKING:
    from web3 import Web3

ZERO_ADDRESS = "0x" + "00" * 20
PAGE_BLOCKS = 10_000  # eth_getLogs range per request: many (L2) RPCs cap it at 10k or fewer
RECEIPT_TIMEOUT_S = 120
# Gas sent = estimate * 5/4 + GAS_PAD, at most the block's limit. An estimate is exact only for
# the state and timestamp it ran against: GymToken's clock is the timestamp, so a transfer or
# stake estimated in the second of the sender's last vote checkpoint updates that checkpoint,
# and mined a second later pushes a new one (a fresh storage slot, ~22k gas more). Without a
# margin that transaction runs out of gas; wallets and `forge script` pad the same way.
GAS_PAD = 30_000
_ERROR_STRING = bytes.fromhex("08c379a0")  # Error(string)
_PANIC = bytes.fromhex("4e487b71")  # Panic(uint256)

# (error name, the ABI input, the decoded value) -> the value as the message shows it
ValueFormatter = Callable[[str, dict, Any], Any]


class ChainError(LedgerError, RuntimeError):
    """Talking to the chain failed: unreachable node, no signing key, reverted transaction."""


class ContractRevertError(ChainError):
    """The contract refused a call; ``name`` is its custom error and ``values`` its arguments."""

    def __init__(self, name: str, values: dict[str, Any], hint: str = ""):
        self.name, self.values, self.hint = name, values, hint
        args = ", ".join(f"{key}={value}" for key, value in values.items())
        super().__init__(f"the contract refused: {name}({args})" + (f"; {hint}" if hint else ""))

    def with_hint(self, hint: str) -> ContractRevertError:
        return ContractRevertError(self.name, self.values, hint)


@dataclass(frozen=True)
class TxResult:
    tx_hash: str  # 0x-prefixed
    block_number: int
    gas_used: int

    @classmethod
    def of(cls, receipt: Any) -> TxResult:
        return cls(receipt["transactionHash"].to_0x_hex(), receipt["blockNumber"],
                   receipt["gasUsed"])


def plain_value(error: str, abi_input: dict, value: Any) -> Any:
    """An address checksummed, bytes as 0x-hex, anything else as decoded."""
    if abi_input["type"] == "address":
        return to_checksum_address(value)
    if isinstance(value, bytes):
        return "0x" + value.hex()
    return value


class ErrorTable:
    """The custom errors of the given ABIs by selector (the first ABI wins a clash)."""

    def __init__(self, abis: Iterable[Iterable[dict]], format_value: ValueFormatter = plain_value):
        self.format_value = format_value
        self.by_selector: dict[bytes, dict] = {}
        for abi in abis:
            for item in abi:
                if item["type"] == "error":
                    self.by_selector.setdefault(function_abi_to_4byte_selector(item), item)

    def decode(self, data: bytes | str | None) -> ChainError:
        """The error that revert ``data`` encodes: a ``ContractRevertError`` for a known custom
        error, ``Error(string)`` or ``Panic(uint256)``, else a ``ChainError`` saying so."""
        if isinstance(data, str):
            data = bytes.fromhex(data.removeprefix("0x"))
        if not data:
            return ChainError("the contract reverted without reason data")
        selector, body = data[:4], data[4:]
        try:
            if selector in self.by_selector:
                item = self.by_selector[selector]
                decoded = abi_decode([i["type"] for i in item["inputs"]], body)
                return ContractRevertError(item["name"], {
                    i["name"]: self.format_value(item["name"], i, v)
                    for i, v in zip(item["inputs"], decoded, strict=True)})
            if selector == _ERROR_STRING:
                return ContractRevertError("Error", {"message": abi_decode(["string"], body)[0]})
            if selector == _PANIC:
                return ContractRevertError("Panic", {"code": hex(abi_decode(["uint256"], body)[0])})
        except (DecodingError, ValueError):
            return ChainError(f"the contract reverted with malformed error data 0x{data.hex()[:72]}")
        return ChainError(f"the contract reverted with unknown error data 0x{data.hex()[:72]}")


def padded_gas(estimate: int, block_gas_limit: int) -> int:
    """The gas a transaction estimated at ``estimate`` is sent with (see ``GAS_PAD``)."""
    return min(block_gas_limit, estimate * 5 // 4 + GAS_PAD)


class EvmConnection:
    """A web3 connection and the errors of the contracts a client talks to through it.

    ``own_errors`` are the client package's error bases: raised on purpose inside
    ``rpc_errors()``, they pass through as ``LedgerError`` does (a ``ValueError`` among them
    is not a transport failure).
    """

    def __init__(self, w3: Web3, abis: Iterable[Iterable[dict]], *,
                 format_value: ValueFormatter = plain_value,
                 receipt_timeout: float = RECEIPT_TIMEOUT_S,
                 own_errors: tuple[type[Exception], ...] = ()):
        self.w3 = w3
        self.errors = ErrorTable(abis, format_value)
        self.receipt_timeout = receipt_timeout
        self.own_errors = (LedgerError, *own_errors)

    def decode_revert(self, data: bytes | str | None) -> ChainError:
        return self.errors.decode(data)

    @contextmanager
    def rpc_errors(self) -> Iterator[None]:
        """Turn web3's revert and transport errors into ``ChainError``; the package's own errors
        and ``TransactionNotFound`` (the caller says which transaction) pass through."""
        # web3 is slow to import: modules that only need this one's constants and errors
        # (receipts, for ZERO_ADDRESS) do not pay for it.
        from web3.exceptions import ContractLogicError, TransactionNotFound, Web3Exception

        try:
            yield
        except (*self.own_errors, TransactionNotFound):
            raise
        except ContractLogicError as exc:
            data = exc.data if isinstance(exc.data, str) else None
            if data and data.startswith("0x") and len(data) >= 10:
                raise self.decode_revert(data) from None
            raise ChainError(f"the contract reverted: {exc.message or exc}") from None
        except (OSError, Web3Exception, ValueError) as exc:
            url = getattr(self.w3.provider, "endpoint_uri", "the RPC endpoint")
            reason = (str(exc) or type(exc).__name__).splitlines()[0]
            raise ChainError(f"EVM RPC call to {url} failed ({reason}): is the devnet up? "
                             "run `gym devnet up`") from None

    def send(self, call: Any, account: Any) -> Any:
        """Estimate, sign with ``account`` (an ``eth_account`` local account), send and wait
        for ``call`` (a contract function or constructor call); its receipt, status 1.

        Raises ``ContractRevertError`` when the contract refuses it (at estimation, or mined
        and replayed as the module docstring says), ``ChainError`` for anything else.
        """
        with self.rpc_errors():
            tx = call.build_transaction({  # estimates gas: a revert surfaces here, decoded
                "from": account.address,
                "nonce": self.w3.eth.get_transaction_count(account.address, "pending"),
                "chainId": self.w3.eth.chain_id,
            })
            tx["gas"] = padded_gas(tx["gas"], self.w3.eth.get_block("latest")["gasLimit"])
            tx_hash = self.w3.eth.send_raw_transaction(account.sign_transaction(tx).raw_transaction)
            receipt = self.w3.eth.wait_for_transaction_receipt(tx_hash,
                                                               timeout=self.receipt_timeout)
        if receipt["status"] != 1:
            raise self.why_reverted(receipt, call, account.address)
        return receipt

    def why_reverted(self, receipt: Any, call: Any = None, sender: str | None = None
                     ) -> ChainError:
        """The error that the mined, reverted transaction of ``receipt`` raised: re-executed by
        the node's call tracer, else ``call`` replayed from ``sender`` at the transaction's
        block (see the module docstring); a plain ``ChainError`` when neither tells."""
        tx_hash, block = receipt["transactionHash"].to_0x_hex(), receipt["blockNumber"]
        try:
            with self.rpc_errors():
                traced = self.w3.provider.make_request(
                    "debug_traceTransaction", [tx_hash, {"tracer": "callTracer"}])
        except ChainError:
            traced = {}  # no tracer: replay with eth_call instead
        frame = traced.get("result") if isinstance(traced, dict) else None
        output = frame.get("output") if isinstance(frame, dict) else None
        if isinstance(output, str) and len(output) >= 10:
            return self.decode_revert(output)
        if hasattr(call, "call"):  # a function call (a constructor cannot be replayed so)
            try:
                with self.rpc_errors():
                    call.call({"from": sender or receipt["from"]}, block_identifier=block)
            except ChainError as exc:
                return exc
        return ChainError(f"transaction {tx_hash} reverted in block {block}")


__all__ = ["ZERO_ADDRESS", "ChainError", "ContractRevertError", "ErrorTable", "EvmConnection",
           "TxResult", "plain_value"]
