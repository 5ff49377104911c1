"""The content-store interface the rest of the project codes against, and how one is chosen.

Two backends give the same CIDs and the same guarantees: ``LocalBlockStore`` (a directory of
blocks, the embedded default) and ``KuboStore`` (a Kubo node or an IPFS Cluster proxy over the
Kubo RPC API, the production path). Both verify every block they read against its CID, so a
caller never needs to trust where the bytes came from. ``ContentStore`` names the only methods
other packages may call; anything else a backend has (CAR export, pin listing) is
backend-specific on purpose (``ledger.audit`` uses ``KuboStore.export_dag`` where it exists).

``open_content_store`` maps the ``GYM_IPFS_API`` setting onto a backend: unset means the local
store, a URL means a Kubo node. ``ledger.kubo`` (and its ``ipfshttpclient`` dependency) is
imported only when a URL is given. ``GYM_IPFS_API_AUTH`` (Kubo's ``bearer:TOKEN`` or
``basic:USER:PASSWORD``) is what the node's ``API.Authorizations`` (or ``gym ipfs serve
--authorizations``) expects; userinfo in the URL works too.

>>> import tempfile
>>> scratch = tempfile.TemporaryDirectory()
>>> store = open_content_store(None, scratch.name)
>>> cid = store.add_file(b"hello world")
>>> store.cat(cid), store.has(cid)
(b'hello world', True)
>>> scratch.cleanup()
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol, runtime_checkable

from ledger.blockstore import LocalBlockStore
from ledger.errors import ContentStoreConfigError
from ledger.unixfs import Source


@runtime_checkable
class ContentStore(Protocol):
    """What the project may do with a content store; every read is verified against its CID."""

    def add_file(self, source: Source, *, pin: bool = False) -> str:
        """Store ``source`` as a UnixFS file; return its ``ipfs add --cid-version=1`` CID."""
        ...

    def cat(self, cid: str, *, max_bytes: int = ...) -> bytes:
        """The whole file ``cid``, every block verified; a file declaring more than
        ``max_bytes`` (default ``unixfs.DEFAULT_CAT_MAX_BYTES``) is refused."""
        ...

    def cat_iter(self, cid: str, *, max_bytes: int | None = None) -> Iterator[bytes]:
        """The bytes of file ``cid`` in order, every block verified before it is yielded, the
        work bounded by the declared size (``unixfs.iter_file_bytes``)."""
        ...

    def has(self, cid: str) -> bool:
        """Whether the store holds the block ``cid`` (without fetching it from a network)."""
        ...

    def pin_add(self, cid: str) -> str:
        """Pin ``cid`` recursively, so garbage collection keeps its whole DAG; returns it."""
        ...

    def put_block(self, cid: str, block: bytes) -> object:
        """Store one raw or dag-pb block under ``cid``, after checking it hashes to it."""
        ...


# Said when a block is missing from the local store and no IPFS node is configured.
LOCAL_ONLY_HINT = ("it is not reachable either: GYM_IPFS_API is unset, so no IPFS node is "
                   "asked; set it to the Kubo RPC URL of a node that has the content (e.g. "
                   "http://127.0.0.1:5001, or a publisher's `gym ipfs serve`)")


def open_content_store(ipfs_api: str | None, local_dir: str | os.PathLike, *,
                       auth: str | None = None) -> ContentStore:
    """The store ``GYM_IPFS_API`` asks for: ``None`` or empty gives ``LocalBlockStore(local_dir)``;
    an ``http(s)://host:port`` URL (or a ``/ip4/…/tcp/…/http`` multiaddr) gives a ``KuboStore``.

    ``auth`` is the node's credential in Kubo's secret syntax (``ledger.kubo.authorization_header``);
    ``None`` reads ``GYM_IPFS_API_AUTH`` from the environment, so a caller without settings at
    hand still authenticates. Nothing is contacted here; a node that does not answer fails the
    first call with ``ContentStoreUnreachableError``.
    """
    if not ipfs_api:
        return LocalBlockStore(Path(local_dir), missing_hint=LOCAL_ONLY_HINT)
    if not ipfs_api.startswith(("http://", "https://", "/")):
        raise ContentStoreConfigError(
            f"GYM_IPFS_API must be a Kubo RPC URL such as http://127.0.0.1:5001, got {ipfs_api!r}"
        )
    try:
        from ledger.kubo import KuboStore
    except ImportError as exc:  # ipfshttpclient is not installed
        raise ContentStoreConfigError(
            f"GYM_IPFS_API is set but the Kubo client cannot be imported ({exc}); "
            "install ipfshttpclient, or unset GYM_IPFS_API to use the local store"
        ) from exc
    if auth is None:
        auth = os.environ.get("GYM_IPFS_API_AUTH") or None
    return KuboStore(ipfs_api, auth=auth)
