"""A thin client of the ExperienceLedger contract: transactions, views, events, reverts.

The caller hands over the web3 connection, the contract's address and ABI, and optionally
the key that signs transactions (``ledger`` imports nothing of the repository outside
itself; the CLI root reads them from the deployment). Transactions are signed locally and
sent raw, so any JSON-RPC node works, an L2 included.

Transactions and reverts go through ``ledger.evm``, the repository's one transaction path:
the contract's custom errors come back as ``ContractRevertError``, whose message reads like
the Solidity that raised it, ``ExperienceLedgerStaleCheckpoint(logId=1, size=5,
anchoredSize=5)``, never a hex blob, also for a transaction that reverted once mined.

Events: ``eth_getLogs`` is paged in block ranges (``page_blocks``, halved on a node's
"range too large" or "too many results" refusal), from a start block to the head, so the
readers work against Anvil and against L2 nodes with strict limits. Each event carries its
transaction hash, block number and log index.

Audit: the consistency proof of a checkpoint is not in its ``Anchored`` event; an auditor
recovers it from the call that anchored it. ``anchor_calls`` finds every ``anchor`` call a
transaction made on this contract, whatever the outer call was: a direct transaction's input
is decoded as is; a transaction to another contract (the DAO timelock's ``execute`` or
``executeBatch``, a multisig) is replayed with the node's call tracer (``debug_traceTransaction``
with ``callTracer``, served by Anvil and geth-style nodes) and the inner calls to this address
are decoded, leaving out any that reverted. A node without the tracer raises
``TracingUnavailableError``; ``anchor_calldata`` decodes a direct ``anchor`` transaction only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from eth_abi import decode as abi_decode
from eth_abi.exceptions import DecodingError
from eth_utils import event_abi_to_log_topic, function_abi_to_4byte_selector, to_checksum_address
from web3 import Web3
from web3.exceptions import TransactionNotFound, Web3Exception

from ledger.errors import LedgerError
from ledger.evm import (
    PAGE_BLOCKS,
    ChainError,
    ContractRevertError,
    EvmConnection,
    TxResult,
    plain_value,
)
from ledger.logstore import ChainBinding
from ledger.multiformats import CID, MultiformatError
from ledger.signer import LazySigner


class LogKind(IntEnum):
    PUBLISHER = 0  # off-chain tree, anchored checkpoints
    CURATED = 1  # leaves appended on-chain


class TracingUnavailableError(ChainError):
    """The node refused ``debug_traceTransaction``: calls made through a contract are hidden."""


@dataclass(frozen=True)
class LogState:
    """``logInfo``: a log at its latest checkpoint."""

    log_id: int
    owner: str
    kind: LogKind
    name: str
    size: int
    root: bytes


@dataclass(frozen=True)
class LogCreatedEvent:
    log_id: int
    owner: str
    kind: LogKind
    name: str
    tx_hash: str
    block_number: int
    log_index: int


@dataclass(frozen=True)
class AnchoredEvent:
    log_id: int
    size: int
    root: bytes
    batch_cid: str | None  # None when the bytes are not a CID (reported by the audit)
    batch_cid_bytes: bytes
    tx_hash: str
    block_number: int
    log_index: int


@dataclass(frozen=True)
class LeafAppendedEvent:
    log_id: int
    index: int
    leaf_hash: bytes
    entry_cid: str | None  # None when the bytes are not a CID
    entry_cid_bytes: bytes
    tx_hash: str
    block_number: int
    log_index: int


@dataclass(frozen=True)
class CuratedCheckpointEvent:
    log_id: int
    size: int
    root: bytes
    tx_hash: str
    block_number: int
    log_index: int


@dataclass(frozen=True)
class AnchorCall:
    """The decoded arguments of one ``anchor`` call (a transaction, or a call inside one)."""

    log_id: int
    size: int
    root: bytes
    batch_cid_bytes: bytes
    consistency_proof: list[bytes]


def _cid_text(data: bytes) -> str | None:
    try:
        return str(CID.from_bytes(data))
    except MultiformatError:
        return None


def _format_value(error: str, abi_input: dict, value: Any) -> Any:
    if abi_input.get("internalType", "").endswith(".LogKind") and value in (0, 1):
        return LogKind(value).name.capitalize()
    return plain_value(error, abi_input, value)


class LedgerContract:
    """ExperienceLedger at ``address``; ``private_key`` is needed only to send transactions."""

    def __init__(self, w3: Web3, address: str, abi: list[dict], private_key: str | None = None,
                 *, page_blocks: int = PAGE_BLOCKS,
                 key_source: Callable[[], str | None] | None = None):
        self.w3 = w3
        self.address = to_checksum_address(address)
        self.abi = abi
        self.contract = w3.eth.contract(address=self.address, abi=abi)
        # ``key_source`` (without ``private_key``) picks the key when a transaction is first sent
        self._lazy_account = LazySigner(private_key, key_source)
        self.page_blocks = page_blocks
        self.evm = EvmConnection(w3, [abi], format_value=_format_value)
        self._events = {item["name"]: item for item in abi if item["type"] == "event"}
        self._topics = {name: event_abi_to_log_topic(item) for name, item in self._events.items()}
        self._anchor_selector = function_abi_to_4byte_selector(
            next(item for item in abi if item["type"] == "function" and item["name"] == "anchor"))

    @property
    def account(self):
        """The account that signs, or None (read-only)."""
        return self._lazy_account.get()

    @account.setter
    def account(self, account) -> None:
        self._lazy_account.set(account)

    # -- transactions -------------------------------------------------------------------------

    def create_log(self, name: str, kind: LogKind = LogKind.PUBLISHER) -> tuple[int, TxResult]:
        """Create a log owned by the signing key; returns its id (from ``LogCreated``)."""
        receipt, result = self._send(self.contract.functions.createLog(name, int(kind)))
        for raw in receipt["logs"]:
            if raw["topics"] and bytes(raw["topics"][0]) == self._topics["LogCreated"]:
                return int.from_bytes(bytes(raw["topics"][1]), "big"), result
        raise ChainError(f"createLog transaction {result.tx_hash} emitted no LogCreated event")

    def anchor(self, log_id: int, size: int, root: bytes, batch_cid: str,
               consistency_proof: list[bytes]) -> TxResult:
        """Anchor checkpoint (``size``, ``root``) of publisher log ``log_id``."""
        call = self.contract.functions.anchor(log_id, size, root, CID.parse(batch_cid).to_bytes(),
                                              list(consistency_proof))
        return self._send(call)[1]

    def append_leaves(self, log_id: int, leaf_hashes: list[bytes], entry_cids: list[str]
                      ) -> TxResult:
        """Append leaves to curated log ``log_id`` (the signer must own it)."""
        call = self.contract.functions.appendLeaves(
            log_id, list(leaf_hashes), [CID.parse(cid).to_bytes() for cid in entry_cids])
        return self._send(call)[1]

    def transfer_log_ownership(self, log_id: int, new_owner: str) -> TxResult:
        return self._send(self.contract.functions.transferLogOwnership(
            log_id, to_checksum_address(new_owner)))[1]

    def _send(self, call) -> tuple[Any, TxResult]:
        if self.account is None:
            raise ChainError("no signing key: set GYM_PUBLISHER_KEY to the log owner's key")
        receipt = self.evm.send(call, self.account)
        return receipt, TxResult.of(receipt)

    # -- views ----------------------------------------------------------------------------

    def binding(self) -> ChainBinding:
        """Which ledger this is: chain id, genesis block hash, contract address. Read anew on
        every call: a chain behind the same URL may have been restarted since the last one."""
        with self._rpc_errors():
            return ChainBinding(self.w3.eth.chain_id,
                                self.w3.eth.get_block(0)["hash"].to_0x_hex().lower(), self.address)

    def log_info(self, log_id: int) -> LogState:
        with self._rpc_errors():
            owner, kind, name, size, root = self.contract.functions.logInfo(log_id).call()
        return LogState(log_id, owner, LogKind(kind), name, size, bytes(root))

    def root_at(self, log_id: int, size: int) -> bytes:
        with self._rpc_errors():
            return bytes(self.contract.functions.rootAt(log_id, size).call())

    def log_count(self) -> int:
        with self._rpc_errors():
            return self.contract.functions.logCount().call()

    def is_curated(self, log_id: int, leaf_hash: bytes) -> bool:
        """Whether curated log ``log_id`` holds a leaf of hash ``leaf_hash``."""
        with self._rpc_errors():
            return self.contract.functions.isCurated(log_id, leaf_hash).call()

    def verify_inclusion(self, leaf_hash: bytes, index: int, size: int, proof: list[bytes],
                         root: bytes) -> bool:
        with self._rpc_errors():
            return self.contract.functions.verifyInclusion(leaf_hash, index, size, list(proof),
                                                           root).call()

    # -- events ---------------------------------------------------------------------------

    def logs_created(self, from_block: int = 0, to_block: int | None = None
                     ) -> list[LogCreatedEvent]:
        return [LogCreatedEvent(v["logId"], to_checksum_address(v["owner"]), LogKind(v["kind"]),
                                v["name"], *where)
                for _, v, where in self._events_of(["LogCreated"], None, from_block, to_block)]

    def anchored(self, log_id: int, from_block: int = 0, to_block: int | None = None
                 ) -> list[AnchoredEvent]:
        """Every ``Anchored`` event of ``log_id`` in chain order."""
        return [AnchoredEvent(log_id, v["size"], v["root"], _cid_text(v["batchCid"]),
                              v["batchCid"], *where)
                for _, v, where in self._events_of(["Anchored"], log_id, from_block, to_block)]

    def curated_events(self, log_id: int, from_block: int = 0, to_block: int | None = None
                       ) -> list[LeafAppendedEvent | CuratedCheckpointEvent]:
        """``LeafAppended`` and ``CuratedCheckpoint`` events of ``log_id``, interleaved in
        chain order (each append call: its leaves, then its checkpoint)."""
        out: list[LeafAppendedEvent | CuratedCheckpointEvent] = []
        for name, v, where in self._events_of(["LeafAppended", "CuratedCheckpoint"], log_id,
                                              from_block, to_block):
            if name == "LeafAppended":
                out.append(LeafAppendedEvent(log_id, v["index"], v["leafHash"],
                                             _cid_text(v["entryCid"]), v["entryCid"], *where))
            else:
                out.append(CuratedCheckpointEvent(log_id, v["size"], v["root"], *where))
        return out

    def leaves_appended(self, log_id: int, from_block: int = 0, to_block: int | None = None
                        ) -> list[LeafAppendedEvent]:
        return [e for e in self.curated_events(log_id, from_block, to_block)
                if isinstance(e, LeafAppendedEvent)]

    def leaves_curated(self, log_id: int, from_block: int = 0, to_block: int | None = None
                       ) -> list[dict[str, Any]]:
        """``LeafCurated`` events of curated log ``log_id`` in chain order: each leaf's
        ``sourceLogId``, ``sourceSize``, ``leafIndex``, ``leafHash`` and its ``block``."""
        return [{**v, "block": where[1]}
                for _, v, where in self._events_of(["LeafCurated"], log_id, from_block, to_block)]

    def _events_of(self, names: list[str], log_id: int | None, from_block: int,
                   to_block: int | None):
        """Yield (event name, decoded values, (tx hash, block, log index)) in chain order."""
        by_topic = {self._topics[name]: name for name in names}
        topics: list[Any] = [["0x" + t.hex() for t in by_topic]]
        if log_id is not None:
            topics.append("0x" + log_id.to_bytes(32, "big").hex())
        with self._rpc_errors():
            last = self.w3.eth.block_number if to_block is None else to_block
        start, span = from_block, self.page_blocks
        while start <= last:
            end = min(start + span - 1, last)
            try:
                raw_logs = self.w3.eth.get_logs({"address": self.address, "topics": topics,
                                                 "fromBlock": start, "toBlock": end})
            except (Web3Exception, ValueError) as exc:
                if span == 1:
                    raise ChainError(f"eth_getLogs failed at block {start}: {exc}") from None
                span = max(1, span // 2)  # the node's range or result limit: ask for less
                continue
            for raw in sorted(raw_logs, key=lambda r: (r["blockNumber"], r["logIndex"])):
                name = by_topic[bytes(raw["topics"][0])]
                where = (raw["transactionHash"].to_0x_hex(), raw["blockNumber"], raw["logIndex"])
                yield name, self._decode_event(name, raw), where
            start = end + 1

    def _decode_event(self, name: str, raw) -> dict[str, Any]:
        inputs = self._events[name]["inputs"]
        indexed = [i for i in inputs if i["indexed"]]
        plain = [i for i in inputs if not i["indexed"]]
        values = dict(zip([i["name"] for i in plain],
                          abi_decode([i["type"] for i in plain], bytes(raw["data"]))))
        for item, topic in zip(indexed, raw["topics"][1:]):
            values[item["name"]] = abi_decode([item["type"]], bytes(topic))[0]
        return values

    # -- calldata -------------------------------------------------------------------------

    def anchor_calldata(self, tx_hash: str) -> AnchorCall:
        """The arguments of the ``anchor`` call made by transaction ``tx_hash``.

        Raises ``ChainError`` when the transaction is not a direct call of ``anchor`` on this
        contract (an anchor made through another contract keeps its proof in that call).
        """
        try:
            with self._rpc_errors():
                tx = self.w3.eth.get_transaction(tx_hash)
        except TransactionNotFound:
            raise ChainError(f"transaction {tx_hash} is not on the chain") from None
        if tx["to"] is None or to_checksum_address(tx["to"]) != self.address:
            raise ChainError(f"transaction {tx_hash} does not call ExperienceLedger directly; "
                             "its consistency proof cannot be read from its calldata")
        try:
            function, args = self.contract.decode_function_input(tx["input"])
        except (ValueError, Web3Exception) as exc:
            raise ChainError(f"transaction {tx_hash}: undecodable calldata ({exc})") from None
        if function.fn_name != "anchor":
            raise ChainError(f"transaction {tx_hash} calls {function.fn_name}, not anchor")
        return AnchorCall(args["logId"], args["size"], bytes(args["root"]), bytes(args["batchCid"]),
                          [bytes(h) for h in args["consistencyProof"]])

    def anchor_calls(self, tx_hash: str) -> list[AnchorCall]:
        """Every ``anchor`` call on this contract that transaction ``tx_hash`` made and that
        did not revert, in execution order, whoever made it (the sender or a contract).

        A transaction sent to this contract is decoded from its input (it cannot call
        ``anchor`` twice: the contract makes no calls). Any other transaction is replayed
        with the node's call tracer; a call inside a frame that reverted is left out, its
        effects (its ``Anchored`` event included) were undone. Raises
        ``TracingUnavailableError`` when the node refuses ``debug_traceTransaction``, and
        ``ChainError`` when the transaction is unknown or a successful ``anchor`` call on
        this contract cannot be decoded.
        """
        try:
            with self._rpc_errors():
                tx = self.w3.eth.get_transaction(tx_hash)
                receipt = self.w3.eth.get_transaction_receipt(tx_hash)
        except TransactionNotFound:
            raise ChainError(f"transaction {tx_hash} is not on the chain") from None
        if receipt["status"] != 1:
            return []
        if tx["to"] is not None and to_checksum_address(tx["to"]) == self.address:
            call = self._decode_anchor(tx_hash, bytes(tx["input"]))
            return [] if call is None else [call]
        with self._rpc_errors():
            response = self.w3.provider.make_request(
                "debug_traceTransaction", [tx_hash, {"tracer": "callTracer"}])
        if "error" in response or not isinstance(response.get("result"), dict):
            reason = response.get("error", {}).get("message", "no call trace in the reply")
            target = ("creates a contract" if tx["to"] is None
                      else f"calls {to_checksum_address(tx['to'])}")
            raise TracingUnavailableError(
                f"transaction {tx_hash} {target}, not ExperienceLedger, and the node refuses "
                f"debug_traceTransaction ({reason}): "
                "audit through a node that serves the call tracer to see the inner anchor call")
        calls: list[AnchorCall] = []
        frames = [response["result"]]
        while frames:  # depth first, in execution order
            frame = frames.pop()
            if frame.get("error"):
                continue  # reverted: nothing under it took effect
            if (frame.get("type") == "CALL" and frame.get("to")
                    and to_checksum_address(frame["to"]) == self.address):
                call = self._decode_anchor(tx_hash, bytes.fromhex(
                    frame.get("input", "0x").removeprefix("0x")))
                if call is not None:
                    calls.append(call)
            frames.extend(reversed(frame.get("calls") or []))
        return calls

    def _decode_anchor(self, tx_hash: str, data: bytes) -> AnchorCall | None:
        """The ``anchor`` call that calldata ``data`` encodes; None for any other function."""
        if data[:4] != self._anchor_selector:
            return None
        try:
            _, args = self.contract.decode_function_input(data)
        except (ValueError, DecodingError, Web3Exception) as exc:
            raise ChainError(f"transaction {tx_hash}: undecodable anchor call ({exc})") from None
        return AnchorCall(args["logId"], args["size"], bytes(args["root"]), bytes(args["batchCid"]),
                          [bytes(h) for h in args["consistencyProof"]])

    # -- errors ---------------------------------------------------------------------------

    def decode_revert(self, data: bytes | str | None) -> ChainError:
        """The error that revert ``data`` encodes (see ``ledger.evm.ErrorTable.decode``)."""
        return self.evm.decode_revert(data)

    def _rpc_errors(self):
        return self.evm.rpc_errors()


__all__ = ["AnchorCall", "AnchoredEvent", "ChainError", "ContractRevertError", "CuratedCheckpointEvent",
           "LeafAppendedEvent", "LedgerContract", "LogCreatedEvent", "LogKind", "LogState",
           "TracingUnavailableError", "TxResult", "resolve_log_id"]


def resolve_log_id(contract: LedgerContract, name: str, *, from_block: int = 0,
                   curated_log_id: int | None = None) -> int:
    """The on-chain id of log ``name``: a number is an id; the curated library's name (the
    deployment's ``curated_log_id``) is that log; else the one log created on chain as
    ``name`` (names are not unique there: ``LedgerError`` names the ids when several are)."""
    if name.isdigit():
        return int(name)
    if curated_log_id is not None and contract.log_info(curated_log_id).name == name:
        return curated_log_id
    ids = [e.log_id for e in contract.logs_created(from_block) if e.name == name]
    if not ids:
        raise LedgerError(f"no log named {name!r} was created on chain: list yours with "
                          "`gym ledger list`, or pass an on-chain log id (`gym audit N`)")
    if len(ids) > 1:
        raise LedgerError(f"{len(ids)} logs are named {name!r} on chain (ids "
                          f"{', '.join(map(str, ids))}): pass the id (`gym audit N`)")
    return ids[0]
