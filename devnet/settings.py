"""Settings of a Gym Ledger installation, from ``GYM_*`` environment variables.

Embedded defaults need no configuration at all: SQLite under the data directory, the local
content store, and an Anvil devnet that the CLI starts itself. At scale the same settings
point at PostgreSQL (``GYM_DB_URL``), a Kubo node (``GYM_IPFS_API``) and any EVM RPC endpoint
(``GYM_RPC_URL``).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from contracts.devnet_accounts import ANVIL_DEFAULT_KEY, ANVIL_DEV_KEYS, DEVNET_CHAIN_ID

DEVNET_DIR = Path(__file__).resolve().parent

# Anvil's public dev keys, re-exported for the devnet's modules (defined once in contracts).
__all__ = ["ANVIL_DEFAULT_KEY", "ANVIL_DEV_KEYS", "DEVNET_DIR", "GymSettings"]


class GymSettings(BaseSettings):
    """Every setting is read from ``GYM_<NAME>`` (for example ``GYM_RPC_URL``)."""

    model_config = SettingsConfigDict(env_prefix="GYM_", extra="ignore")

    rpc_url: str | None = Field(
        None, description="EVM JSON-RPC endpoint; unset: the Anvil devnet that `gym devnet up` starts"
    )
    anvil_host: str = Field("127.0.0.1", description="interface the devnet's Anvil and content "
                            "service listen on (0.0.0.0: every interface, for parties elsewhere)")
    announce_host: str | None = Field(
        None, description="host name or IP other hosts reach this host's servers at (the "
        "manifest's URLs, printed hints); unset: the listening address, or for 0.0.0.0 the one "
        "address of this host's interfaces")
    rpc_public_url: str | None = Field(
        None, description="the chain's URL as other parties dial it (a proxy, TLS); overrides "
        "GYM_ANNOUNCE_HOST for the manifest's rpc_url")
    ipfs_public_url: str | None = Field(
        None, description="the content service's URL as other parties dial it; overrides "
        "GYM_ANNOUNCE_HOST for the manifest's content_api")
    anvil_port: int = Field(8545, ge=0, le=65535, description="Anvil's port; 0 picks a free one")
    chain_id: int = Field(DEVNET_CHAIN_ID, gt=0, description="chain id the devnet's Anvil runs with")
    data_dir: Path = Field(DEVNET_DIR / ".data", description="devnet state: Anvil log, pid file")
    deployment_file: Path = Field(
        DEVNET_DIR / "deployment.json", description="where `gym devnet up` writes the deployment"
    )
    db_url: str | None = Field(None, description="SQLAlchemy URL; unset: SQLite in the data dir")
    ipfs_api: str | None = Field(None, description="Kubo RPC URL; unset: the local content store")
    ipfs_api_auth: SecretStr | None = Field(None, description="GYM_IPFS_API's credential: "
                                            "bearer:TOKEN or basic:USER:PASSWORD (Kubo's syntax)")
    ipfs_authorizations: Path | None = Field(
        None, description="Kubo API.Authorizations JSON for the content service `gym devnet up` "
        "starts (who may call what, and unpin what they pinned: docs/content-endpoint.md); "
        "unset: open to anyone who reaches it, anonymous callers never unpin")
    ipfs_port: int = Field(5001, ge=0, le=65535, description="port of the content service "
                           "`gym devnet up` starts (unless GYM_IPFS_API is set); 0 picks a free one")
    deployer_key: SecretStr = Field(
        SecretStr(ANVIL_DEFAULT_KEY), description="key that deploys contracts (Anvil account 0)"
    )
    timelock_min_delay: int = Field(
        60, ge=0, description="seconds a passed DAO proposal waits in the timelock before it can "
        "run; the devnet default is short so a demo completes, a public network wants days"
    )
    publisher_key: SecretStr | None = Field(
        None, description="key that creates and anchors logs; unset: on the devnet Anvil's "
        "account 0 (or --account N), elsewhere required"
    )

    @property
    def database_url(self) -> str:
        return self.db_url or f"sqlite:///{self.data_dir / 'ledger.sqlite'}"
