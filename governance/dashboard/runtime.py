"""The dashboard's dependencies, built once per server and shared by every request."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from governance.client import GovernanceClient
from governance.dashboard.evidence import VerificationCache
from governance.dashboard.indexer import GovernorIndexer
from governance.dashboard.names import AddressBook, address_book
from governance.dashboard.rewards import RewardTables
from governance.dashboard.security import CsrfTokens
from governance.devnet_time import is_devnet
from ledger.content import ContentStore
from ledger.logstore import LogStore


def index_source(chain_id: int, governor: str, ledger: str, curated_log_id: int,
                 from_block: int) -> str:
    """The name of the dashboard's event index in the database (``ledger.event_index``)."""
    return (f"dashboard:{chain_id}:{governor.lower()}:{ledger.lower()}:{curated_log_id}:"
            f"{from_block}")


@dataclass
class DashboardRuntime:
    client: GovernanceClient  # reads, and relays with ``relayer_key``; signs nothing else
    content: ContentStore  # where proposed entries are fetched from, by CID
    rpc_url: str  # the EVM node (the devnet's /rpc proxy forwards to it)
    origins: tuple[str, ...]  # the origins this server is served under
    relayer_key: str | None = None  # pays the gas of relayed ballots; None: no relaying
    store: LogStore | None = None  # local publisher logs, for proposing from the page
    # verifiers that are code (python:module:function) run when an evaluation names them;
    # math and exact always run
    trusted_verifiers: frozenset[str] = frozenset()
    csrf: CsrfTokens = field(default_factory=CsrfTokens)
    evidence_cache: VerificationCache = field(default_factory=VerificationCache)
    reward_tables: RewardTables = field(default_factory=RewardTables)  # checked, by CID
    indexer: GovernorIndexer = field(init=False)

    def __post_init__(self) -> None:
        client = self.client
        durable = None
        if self.store is not None:  # the index lives in the installation's database
            from ledger.event_index import EventIndexStore

            durable = EventIndexStore(self.store.engine, index_source(
                client.w3.eth.chain_id, client.governor.address, client.ledger.address,
                client.curated_log_id, client.from_block))
        self.indexer = GovernorIndexer(client.w3, client.governor, client.ledger.address,
                                       client.ledger.abi, client.curated_log_id,
                                       from_block=client.from_block, durable=durable)

    @cached_property
    def chain_id(self) -> int:
        return self.client.w3.eth.chain_id

    @cached_property
    def devnet(self) -> bool:
        return is_devnet(self.client.w3)

    @cached_property
    def names(self) -> AddressBook:
        """The DAO's contracts by name, and on the devnet Anvil's dev accounts."""
        return address_book(self.client.decoder.names, self.devnet)

    @cached_property
    def relayer_address(self) -> str | None:
        from eth_account import Account

        return Account.from_key(self.relayer_key).address if self.relayer_key else None
