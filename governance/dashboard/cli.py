"""``gym dashboard``: serve the DAO's web dashboard (``governance.dashboard.app``)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from contracts.signing import SigningKeyError
from governance.errors import GovernanceError

console = Console()


def dashboard(
    ctx: typer.Context,
    host: Annotated[str, typer.Option(
        help="Interface to listen on: 127.0.0.1 for this machine only; 0.0.0.0 for voters on "
             "other hosts, who then reach it at this host's address (printed), or at the name "
             "--origin gives.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8600,
    origin: Annotated[list[str] | None, typer.Option(
        help="The origin voters elsewhere use, when it is not this host's address: a DNS "
             "name (http://dao.example:8600) or a reverse proxy's https://...; repeatable. "
             "Requests naming any other host, and POSTs from any other origin, are refused.")
    ] = None,
    no_relay: Annotated[bool, typer.Option(
        "--no-relay", help="Relay no signed ballots (voters then send their votes themselves).")
    ] = False,
    verifier: Annotated[list[str] | None, typer.Option(
        help="Run this verifier when a proposal's evidence names it, to re-check its figures "
             "(python:module:function is code: only math and exact run unless named). "
             "Repeatable.")] = None,
) -> None:
    """Serve the DAO dashboard: proposals with state, tallies, quorum and timeline from the
    governor's events; each proposal's entries verified independently (entry re-hashed, proof
    checked against the root anchored on chain) and its evidence re-checked (every receipt and
    figure of each evaluation it cites); delegate, vote by EIP-712 ballot, queue and execute
    from the browser's wallet; an account's rewards, read from the attested tables and claimed
    from its wallet.

    Ballots are signed in the browser and relayed with castVoteBySig by GYM_PUBLISHER_KEY,
    which pays the gas and cannot change a vote. On the devnet, without a wallet extension, the
    page signs with Anvil's dev accounts through /rpc, a whitelisted JSON-RPC proxy.
    """
    import uvicorn

    from governance.dashboard.app import create_app
    from governance.dashboard.runtime import DashboardRuntime
    from governance.dashboard.security import origin_of, served_origins
    from ledger.addresses import is_loopback, is_wildcard, url_host

    factory = ctx.meta.get("governance_runtime")
    if factory is None:
        raise GovernanceError("gym dashboard needs the governance runtime (run it via gym)")
    rt = factory()
    client = rt.client()
    chain = rt.ledger.chain
    runtime = DashboardRuntime(
        client=client, content=rt.ledger.content, rpc_url=chain.rpc_url,
        origins=served_origins(host, port, origin or []),
        relayer_key=None if no_relay else _relayer_key(rt.ledger), store=rt.ledger.store,
        trusted_verifiers=frozenset(verifier or ()))
    with console.status("indexing the governor's events"):
        head = runtime.indexer.sync()
    count = len(runtime.indexer.proposals())
    console.print(f"governor {client.governor.address} on chain {client.w3.eth.chain_id} "
                  f"(block {head}): {count} proposal{'s' if count != 1 else ''}"
                  + ("; devnet: pages sign with Anvil's dev accounts via /rpc" if runtime.devnet
                     else ""), highlight=False)
    if runtime.relayer_address:
        console.print(f"signed ballots are relayed by {runtime.relayer_address}", highlight=False)
    told = origin_of(origin[0]) if origin else runtime.origins[0]
    others = [o for o in runtime.origins if o != told and not is_loopback(url_host(o))]
    local = is_wildcard(host) and not is_loopback(url_host(told))
    console.print(f"dashboard on [bold]{told}/[/bold]"
                  + (f" (also {', '.join(others)})" if others else "")
                  + (" and on this machine's loopback" if local else ""),
                  highlight=False, soft_wrap=True)
    uvicorn.run(create_app(runtime), host=host, port=port, log_level="warning")


def _relayer_key(ledger) -> str | None:
    """The publisher's key relays ballots (the signing rule: GYM_PUBLISHER_KEY, else on the
    devnet Anvil's account 0); off the devnet without one the dashboard relays none."""
    try:
        return ledger.signing_key()
    except SigningKeyError:
        return None
