"""A swarm volunteer's stake: `gym swarm register` (docs/swarm.md "Slashing a staked
volunteer").

A volunteer registers in the NodeRegistry as a node does, its signer the address that signs
its contribution records (the key of `gym train ... --swarm`: GYM_PUBLISHER_KEY, or the
devnet's --account N), with a stake and a receipt log of its own (the registry asks every
operator for one; a volunteer's stays empty). Its endpoint is ``swarm-volunteer``: it serves
no requests, so the committee's random audits find no receipts of it to sample. A challenge of
one of its signed records, with a failed work check as the evidence, is judged by the
committee (``committee.work_judge``) and slashes that stake as a receipt's does.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

VOLUNTEER_ENDPOINT = "swarm-volunteer"  # no URL: a volunteer serves nothing
VOLUNTEER_LOG = "swarm-volunteer"  # its (empty) receipt log, which registration needs
NO_MODEL = "sha256:" + "0" * 64  # a volunteer trains many bases: its record names each run's


def register_volunteer(registry: Any, rt: Any, stake: int) -> tuple[str, Any]:
    """Register ``registry``'s account (its key signs the contribution records) as a volunteer
    with ``stake`` (wei of GYM), or bring its record up to it: (what was done, the record)."""
    from ledger.errors import NotFoundError
    from ledger.publish import ensure_chain_log

    try:
        rt.store.get_log(VOLUNTEER_LOG)
    except NotFoundError:
        rt.store.create_log(VOLUNTEER_LOG)
    log_id = ensure_chain_log(rt.store, rt.contract, VOLUNTEER_LOG)
    return registry.ensure_registered(signer=registry.account.address, model_digest=NO_MODEL,
                                      endpoint=VOLUNTEER_ENDPOINT, stake=stake,
                                      receipt_log_id=log_id)


def register(
    ctx: typer.Context,
    stake: Annotated[str | None, typer.Option(
        help="GYM to stake (default: the NodeRegistry's minimum); a failed work check a "
             "committee upholds is slashed from it.")] = None,
    account: Annotated[int | None, typer.Option(
        "--account", help="Anvil's account N signs (devnet only; else GYM_PUBLISHER_KEY, the "
                          "key of `gym train --swarm`).")] = None,
) -> None:
    """Stake as a swarm volunteer: register the address that signs your contribution records in
    the NodeRegistry, so a committee can slash a failed work check (docs/swarm.md)."""
    from contracts.gym_token import format_gym, parse_gym
    from inference_node.registry import NodeRegistry, RegistryError
    from ledger.runtime import runtime_of
    from ledger.tables import CliConsole

    rt = runtime_of(ctx)
    rt.account = account  # the key that signs the records signs the registration and owns the log
    key = rt.signing_key()
    if key is None:
        raise typer.BadParameter("no key signs: set GYM_PUBLISHER_KEY (the key of `gym train "
                                 "--swarm`), or --account N on the devnet")
    registry = NodeRegistry(rt.contract.w3, ctx.meta["node_registry_address"](), key,
                            from_block=rt.chain.deployment_block)
    amount = parse_gym(stake, "--stake", RegistryError) if stake is not None \
        else registry.min_stake()
    console = CliConsole()
    with console.status("registering in the NodeRegistry"):
        action, node = register_volunteer(registry, rt, amount)
    console.print(f"NodeRegistry {registry.address}: {action} volunteer {node.operator}, "
                  f"signer {node.signer}, stake {format_gym(node.stake)}, "
                  f"{'active' if node.active else 'NOT active'}", highlight=False)
