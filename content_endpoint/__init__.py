"""The content endpoint: the one service every party shares besides the chain.

`gym ipfs serve` serves a ``ledger.blockstore.LocalBlockStore`` as the subset of Kubo's RPC
API (``/api/v0``) that the project and real Kubo clients use, plus a trustless gateway
(``/ipfs/{cid}``), so a party can point ``GYM_IPFS_API`` at it or at a real Kubo node (or IPFS
Cluster's Kubo proxy) interchangeably. `gym devnet up` starts it like any other party
(``devnet/content_service.py``); on separate hosts it runs on its own (docs/content-endpoint.md).

- ``server``: the app (``create_app``) and the store-side handlers of each RPC command;
- ``pins``: ``pin/add|ls|rm``, pins owned by the parties that made them;
- ``rpc_dag``: the DAG and UnixFS reading commands (``ls``, ``refs``, ``get``, ``dag/*``, ...);
- ``gateway``: the trustless gateway (raw blocks and CARs);
- ``authorizations``: Kubo's ``API.Authorizations`` (who a caller is, which paths it may call);
- ``limits``, ``protocol``: the bounds on uploads, stalls, connections and work, and the HTTP
  protocol that enforces the connection-level ones;
- ``kubo_rpc``: arguments, errors, streamed multipart uploads and long work as Kubo's RPC needs;
- ``dagjson``, ``tar``, ``peer``: DAG-JSON, tar output of ``get``, the node's peer identity;
- ``cli``: ``gym ipfs`` (``serve``, ``add``, ``cat``, ``export``, ``import``).

Nothing here trusts a client: every handler is bounded in size and work and stops when its
client leaves, uploads stream under hard caps, only a pin's owners can remove it, and
everything served is re-hashed against its CID.

    from content_endpoint.server import create_app
    app = create_app(LocalBlockStore(Path("ipfs")))   # then: uvicorn.run(app, ...)
"""
