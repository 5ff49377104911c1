"""The ledger's wiring: where the log index, the content store and the chain come from.

``LedgerRuntime`` is what every command and flow that touches the ledger receives (the CLI
root builds it from settings, see ``devnet/runtime.py``). Its members are built on first use,
so a command that needs only the database never opens the content store or the chain, and
none of them needs a deployment until it talks to the chain.

    rt = LedgerRuntime(database_url="sqlite:///gym.db", content_dir=Path("ipfs"),
                       chain_config=lambda: ChainConfig(rpc_url, address, abi, key))
    rt.store.get_log("alice/math"); rt.content.put(b"..."); rt.contract.log_count()
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger.errors import LedgerError

if TYPE_CHECKING:  # SQLAlchemy and web3 load when a member is first used
    from ledger.chain import LedgerContract
    from ledger.content import ContentStore
    from ledger.logstore import LogStore


@dataclass(frozen=True)
class ChainConfig:
    """Where the ExperienceLedger lives and who signs (read from the deployment)."""

    rpc_url: str  # EVM JSON-RPC endpoint
    address: str  # ExperienceLedger contract
    abi: list[dict]  # its ABI
    private_key: str | None  # publisher key; None: read-only (unless choose_key picks one)
    chain_id: int | None = None  # recorded in proof documents
    deployment_block: int = 0  # where event scans start
    # (chain id, --account or None) -> the key that signs, by the installation's rule
    # (``contracts.signing.signing_key``); called when a transaction is first sent
    choose_key: Callable[[int, int | None], str | None] | None = None
    curated_log_id: int | None = None  # the DAO's curated library (owned by the timelock)


@dataclass
class LedgerRuntime:
    """The dependencies of the ledger commands, each built on first use."""

    database_url: str  # SQLAlchemy URL of the log index
    content_dir: Path  # local content store (used when ipfs_api is unset)
    ipfs_api: str | None = None  # Kubo RPC URL
    chain_config: Callable[[], ChainConfig] | None = None  # reads the deployment when called
    account: int | None = None  # --account N of the command: Anvil's dev account N signs
    # its credential, Kubo's bearer:TOKEN or basic:USER:PASSWORD (GYM_IPFS_API_AUTH); never shown
    ipfs_api_auth: str | None = field(default=None, repr=False)

    @cached_property
    def store(self) -> LogStore:
        from ledger.logstore import LogStore

        return LogStore(self.database_url)

    @cached_property
    def content(self) -> ContentStore:
        from ledger.content import open_content_store

        return open_content_store(self.ipfs_api, self.content_dir, auth=self.ipfs_api_auth)

    @cached_property
    def chain(self) -> ChainConfig:
        if self.chain_config is None:
            raise LedgerError("no chain is configured: run `gym devnet up`, or set GYM_RPC_URL")
        return self.chain_config()

    @cached_property
    def contract(self) -> LedgerContract:
        from web3 import Web3

        from ledger.chain import LedgerContract

        chain = self.chain
        w3 = Web3(Web3.HTTPProvider(chain.rpc_url, request_kwargs={"timeout": 30}))
        if chain.choose_key is None:
            return LedgerContract(w3, chain.address, chain.abi, chain.private_key)
        return LedgerContract(w3, chain.address, chain.abi, key_source=self.signing_key)

    def signing_key(self) -> str | None:
        """The publisher's key: ``choose_key``'s pick for this chain and ``account``, else
        ``private_key``."""
        chain = self.chain
        if chain.choose_key is None:
            return chain.private_key
        return chain.choose_key(self.contract.w3.eth.chain_id, self.account)

    def recorded_signing_key(self) -> str | None:
        """``signing_key`` by the chain id the deployment recorded, without asking the chain
        (a swarm peer signs records, not transactions, and may never reach the RPC)."""
        chain = self.chain
        if chain.choose_key is None or chain.chain_id is None:
            return chain.private_key
        return chain.choose_key(chain.chain_id, self.account)


def runtime_of(ctx: Any) -> LedgerRuntime:
    """The ``LedgerRuntime`` a command finds in ``ctx.obj`` (a click/typer context)."""
    if not isinstance(ctx.obj, LedgerRuntime):
        raise LedgerError("the ledger commands need a LedgerRuntime in ctx.obj (run them via gym)")
    return ctx.obj
