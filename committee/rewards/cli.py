"""``gym rewards``: what each account earned in a reward epoch, from chain + content endpoint
alone; the committee's attestation of its root; claims.

    gym rewards status [--json]
    gym rewards compute EPOCH [--out FILE] [--json]
    gym rewards show EPOCH [ADDRESS] [--table FILE|CID] [--json]
    gym rewards sign EPOCH [--expect CID] [--bls-key FILE] [--account N | --key-env VAR]
    gym rewards attest EPOCH SIGNED.json... [--account N | --key-env VAR]
    gym rewards claim EPOCH [--for ADDRESS] [--account N | --key-env VAR]

A transaction is signed by the installation's rule (``contracts.signing``): ``--account N`` on
the devnet, else the hex key in ``--key-env``, else on the devnet Anvil's account 0. A verifier
signs a root with its BLS key (``--bls-key``, default ``<data dir>/verifier/bls-key.json``) and
only for a table it computed itself. docs/rewards.md.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from contracts.gym_token import format_gym
from ledger.tables import CliConsole, print_table

if TYPE_CHECKING:
    from committee.rewards.distributor import RewardDistributor
    from committee.rewards.table import RewardTable

app = typer.Typer(help="Reward epochs: compute the table, attest its root, claim.",
                  no_args_is_help=True)
console = CliConsole(stderr=True)
stdout_console = CliConsole()

CLAIM_KEY_ENV = "GYM_CLAIMER_KEY"
VERIFIER_KEY_ENV = "GYM_VERIFIER_KEY"

Epoch = Annotated[int, typer.Argument(min=0, help="The reward epoch (a range of blocks: "
                                      "`gym rewards status` lists them).")]
Account_ = Annotated[int | None, typer.Option(
    "--account", help="Devnet only: sign with Anvil's public account N.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON.")]


@app.callback()
def rewards() -> None:
    """Reward epochs: compute the table, attest its root, claim (docs/rewards.md)."""


def _runtime(ctx: typer.Context) -> Any:
    if ctx.obj is None:
        raise typer.BadParameter("gym rewards needs the chain configuration: run it as `gym ...`")
    return ctx.obj


def _lookup(ctx: typer.Context, name: str) -> Any:
    lookup = ctx.meta.get(name)
    if lookup is None:
        raise typer.BadParameter(f"gym rewards needs {name}: run it as `gym rewards ...`")
    return lookup()


def _key(ctx: typer.Context, key_env: str, account: int | None) -> str:
    from contracts.signing import signing_key

    rt = _runtime(ctx)
    return signing_key(rt.contract.w3.eth.chain_id, key_env, os.environ.get(key_env) or None,
                       account)


def open_distributor(ctx: typer.Context, key: str | None = None) -> RewardDistributor:
    from committee.rewards.distributor import RewardDistributor

    rt = _runtime(ctx)
    address = os.environ.get("GYM_REWARD_DISTRIBUTOR") or _lookup(ctx, "distributor_address")
    return RewardDistributor(rt.contract.w3, address, key)


def _sources(ctx: typer.Context) -> Any:
    from committee.rewards.facts import sources_from

    return sources_from(_runtime(ctx), _lookup(ctx, "node_registry_address"),
                        _lookup(ctx, "committee_address"))


def _compute(ctx: typer.Context, epoch: int) -> tuple[RewardTable, bytes]:
    """Epoch ``epoch``'s table, computed here, and its bytes (saved under the data dir)."""
    from committee.rewards.epochs import compute_epoch

    with console.status(f"epoch {epoch}: reading the chain and the content endpoint") as status:
        table, data = compute_epoch(_sources(ctx), open_distributor(ctx), epoch,
                                    _progress(status, epoch))
    _save(ctx, epoch, data)
    return table, data


def _progress(status: Any, epoch: int) -> Any:
    def progress(what: str, done: int, total: int) -> None:
        status.update(f"epoch {epoch}: {what} {done}/{total}")
    return progress


def _save(ctx: typer.Context, epoch: int, data: bytes) -> None:
    path = Path(_lookup(ctx, "data_dir")) / "rewards" / f"epoch-{epoch}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _publish(ctx: typer.Context, data: bytes) -> str:
    return _runtime(ctx).content.add_file(data, pin=True)


def _rows(title: str, columns: list[str], rows: list[list[str]]) -> None:
    from rich.table import Table

    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    print_table(table, stdout_console)


def _print_table(table: RewardTable, cid: str | None) -> None:
    from committee.rewards.table import POOLS

    rows = [[account, *(format_gym(pools.get(p, 0)) for p in POOLS),
             format_gym(sum(pools.values()))] for account, pools in table.accounts.items()]
    w = table.window
    _rows(f"epoch {w.epoch}: blocks {w.first_block}-{w.last_block}, budget "
          f"{format_gym(table.budget)}", ["account", *POOLS, "total"],
          rows or [["(nobody earned anything)"] + [""] * 5])
    stdout_console.print(f"paid {format_gym(table.total())} of {format_gym(table.budget)}; "
                         f"root 0x{table.root.hex()}" + (f"; table {cid}" if cid else ""),
                         highlight=False)


@app.command()
def compute(
    ctx: typer.Context,
    epoch: Epoch,
    out: Annotated[Path | None, typer.Option(help="Also write the table's bytes here.",
                                             dir_okay=False)] = None,
    publish: Annotated[bool, typer.Option(help="Add the table to the content endpoint "
                                          "(pinned) and print its CID.")] = True,
    as_json: AsJson = False,
) -> None:
    """Compute EPOCH's reward table from chain + content endpoint alone (deterministic: every
    verifier gets the same bytes) with its Merkle root; publish it."""
    table, data = _compute(ctx, epoch)
    if out is not None:
        out.write_bytes(data)
    cid = _publish(ctx, data) if publish else None
    if as_json:
        print(json.dumps({"epoch": epoch, "root": "0x" + table.root.hex(),
                          "total": str(table.total()), "table_cid": cid,
                          "accounts": len(table.accounts)}))
        return
    _print_table(table, cid)


def _attested_table(ctx: typer.Context, epoch: int, given: str | None) -> RewardTable:
    """The table ``given`` (a file or a CID), else the one attested on chain for ``epoch``."""
    from committee.rewards.epochs import MAX_TABLE_BYTES, attested_table, read_table

    if given is None:
        return attested_table(open_distributor(ctx), _runtime(ctx).content, epoch)
    path = Path(given)
    return read_table(path.read_bytes() if path.is_file() else _runtime(ctx).content.cat(
        given, max_bytes=MAX_TABLE_BYTES), epoch)


@app.command()
def show(
    ctx: typer.Context,
    epoch: Epoch,
    address: Annotated[str | None, typer.Argument(help="One account: its line and where each "
                                                  "amount came from.")] = None,
    table_from: Annotated[str | None, typer.Option(
        "--table", help="A table file or CID (default: the one attested on chain).")] = None,
    as_json: AsJson = False,
) -> None:
    """Print EPOCH's attested table, or one account's line with its sources: the experiences
    used and how often, the runs, the settlements, the nodes' checkpoints."""
    from eth_utils import is_address, to_checksum_address

    from committee.rewards.table import line_document

    table = _attested_table(ctx, epoch, table_from)
    if address is None:
        if as_json:
            from committee.rewards.table import table_document

            print(json.dumps(table_document(table)))
        else:
            _print_table(table, None)
        return
    if not is_address(address):
        raise typer.BadParameter(f"not an address: {address!r}", param_hint="ADDRESS")
    account = to_checksum_address(address)
    lines = table.lines_of(account)
    if as_json:
        print(json.dumps({"account": account, "total": str(table.total(account)),
                          "pools": {p: str(table.accounts.get(account, {}).get(p, 0))
                                    for p in lines},
                          "sources": {p: [line_document(x) for x in ls]
                                      for p, ls in lines.items()}}))
        return
    stdout_console.print(f"{account} earned {format_gym(table.total(account))} in epoch "
                         f"{epoch}", highlight=False)
    for pool, found in lines.items():
        for line in found:
            detail = ", ".join(f"{k} {v}" for k, v in line.items()
                               if k not in ("account", "amount"))
            stdout_console.print(f"  {pool}: {format_gym(line['amount'])} ({detail})",
                                 highlight=False)


@app.command()
def sign(
    ctx: typer.Context,
    epoch: Epoch,
    expect: Annotated[str | None, typer.Option(
        help="Sign only if the table computed here has this CID (the one proposed).")] = None,
    bls_key: Annotated[Path | None, typer.Option(
        "--bls-key", help="The verifier's BLS key file (default: <data dir>/verifier/"
                          "bls-key.json).", dir_okay=False)] = None,
    out: Annotated[Path | None, typer.Option(help="Write the signed root here (default: "
                                             "standard output).", dir_okay=False)] = None,
    key_env: Annotated[str, typer.Option("--key-env", help="Environment variable holding the "
                                         "verifier's hex key.")] = VERIFIER_KEY_ENV,
    account: Account_ = None,
) -> None:
    """As a verifier: compute EPOCH's table, publish it, and sign its root with your BLS key.
    Refuses with --expect naming another table: an honest verifier signs only what it
    computed."""
    from eth_account import Account

    from committee import keyfile
    from committee.client import VerifierCommittee
    from committee.rewards.epochs import sign_epoch

    verifier = Account.from_key(_key(ctx, key_env, account)).address
    path = bls_key or Path(_lookup(ctx, "data_dir")) / "verifier" / "bls-key.json"
    if not path.is_file():
        raise typer.BadParameter(f"no BLS key in {path}: `gym verifier register` creates one",
                                 param_hint="--bls-key")
    sk = keyfile.load(path)
    committee = VerifierCommittee(_runtime(ctx).contract.w3, _lookup(ctx, "committee_address"))
    with console.status(f"epoch {epoch}: reading the chain and the content endpoint") as status:
        table, data, signed = sign_epoch(_sources(ctx), open_distributor(ctx), committee,
                                         epoch, sk, verifier, expect=expect,
                                         progress=_progress(status, epoch))
    _save(ctx, epoch, data)
    cid = signed.claim.table_cid
    if out is not None:
        out.write_bytes(signed.to_bytes())
        console.print(f"signed epoch {epoch}'s root 0x{table.root.hex()} (table {cid}) into "
                      f"{out}", highlight=False)
    else:
        print(signed.to_bytes().decode())


@app.command()
def attest(
    ctx: typer.Context,
    epoch: Epoch,
    signed: Annotated[list[Path], typer.Argument(help="Signed roots (`gym rewards sign`).",
                                                 exists=True, dir_okay=False)],
    key_env: Annotated[str, typer.Option("--key-env", help="Environment variable holding the "
                                         "sender's hex key.")] = CLAIM_KEY_ENV,
    account: Account_ = None,
) -> None:
    """Aggregate the verifiers' signed roots of EPOCH and post the root that two thirds of
    the committee's stake signed to the RewardDistributor."""
    from committee.client import VerifierCommittee
    from committee.rewards.attestation import decode_signed_root
    from committee.rewards.epochs import attest_epoch

    messages = [decode_signed_root(path.read_bytes()) for path in signed]
    committee = VerifierCommittee(_runtime(ctx).contract.w3, _lookup(ctx, "committee_address"))
    distributor = open_distributor(ctx, _key(ctx, key_env, account))
    found = attest_epoch(distributor, committee, epoch, messages,
                         report=lambda why: console.print(f"refused: {why}", highlight=False))
    console.print(f"attested epoch {epoch}: root 0x{found.claim.root.hex()}, "
                  f"{format_gym(found.claim.total)}, signed by "
                  f"{format_gym(found.signer_stake)} of {format_gym(found.active_stake)} "
                  "staked", highlight=False)


@app.command()
def claim(
    ctx: typer.Context,
    epoch: Epoch,
    for_: Annotated[str | None, typer.Option("--for", help="Claim for this account (paid to "
                                             "it; default: the signer's).")] = None,
    key_env: Annotated[str, typer.Option("--key-env", help="Environment variable holding the "
                                         "claimer's hex key.")] = CLAIM_KEY_ENV,
    account: Account_ = None,
) -> None:
    """Claim what EPOCH's attested table pays an account, once its appeal window is over."""
    from eth_account import Account
    from eth_utils import is_address, to_checksum_address

    from committee.rewards.epochs import claim_line

    key = _key(ctx, key_env, account)
    if for_ is not None and not is_address(for_):
        raise typer.BadParameter(f"not an address: {for_!r}", param_hint="--for")
    who = to_checksum_address(for_) if for_ else Account.from_key(key).address
    table = _attested_table(ctx, epoch, None)
    amount = claim_line(open_distributor(ctx, key), table, who)
    console.print(f"claimed {format_gym(amount)} for {who} (epoch {epoch})", highlight=False)
    print(amount)


@app.command()
def status(ctx: typer.Context, as_json: AsJson = False) -> None:
    """The distributor's epochs so far: blocks, budget, root, claimed."""
    distributor = open_distributor(ctx)
    current = distributor.current_epoch()
    rows, out = [], []
    for epoch in range(max(0, current - 20), current + 1):
        first, last = distributor.epoch_bounds(epoch)
        budget, _ = distributor.budget_of(epoch)
        root = distributor.epoch_root(epoch)
        state = "running" if epoch == current else root.status.name.lower()
        out.append({"epoch": epoch, "blocks": [first, last], "budget": str(budget),
                    "status": state, "root": "0x" + root.root.hex(), "total": str(root.total),
                    "claimed": str(root.claimed), "table_cid": root.table_cid,
                    "final_at": root.final_at})
        rows.append([str(epoch), f"{first}-{last}", format_gym(budget), state,
                     format_gym(root.total) if root.total else "", format_gym(root.claimed)
                     if root.claimed else ""])
    if as_json:
        print(json.dumps(out))
        return
    _rows(f"reward epochs (current: {current})",
          ["epoch", "blocks", "budget", "root", "total", "claimed"], rows)
