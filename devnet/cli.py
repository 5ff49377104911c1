"""The ``gym`` command: the root of the CLI and the ``gym devnet`` and ``gym demo`` commands.

Each package contributes its own sub-commands from its ``cli.py``; this module only mounts
them, and turns the packages' expected errors into one clear line and a non-zero exit code
instead of a traceback.
"""

from __future__ import annotations

import sys
from importlib.metadata import version
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

import contracts
import contracts.cli
from devnet.errors import DevnetError
from devnet.network import devnet_down, devnet_status, devnet_up
from devnet.settings import GymSettings

app = typer.Typer(
    name="gym",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)
devnet_app = typer.Typer(help="Run the local network: Anvil plus every contract, deployed.",
                         no_args_is_help=True)
app.add_typer(devnet_app, name="devnet")
app.add_typer(contracts.cli.app, name="contracts")

console = Console()
err_console = Console(stderr=True)

# Errors a user can cause and fix; anything else is a bug and keeps its traceback.
EXPECTED_ERRORS: tuple[type[Exception], ...] = (
    DevnetError,
    contracts.ArtifactError,
    contracts.ToolchainError,
)


def _version_callback(value: bool) -> None:
    if value:
        console.print(f"gym {version('zoo-gym')}")
        raise typer.Exit()


@app.callback()
def root(
    _version: Annotated[bool, typer.Option("--version", callback=_version_callback,
                                           is_eager=True, help="Print the version and exit.")] = False,
) -> None:
    """Gym Ledger: publish training results to IPFS, anchor them on an EVM chain, curate them
    by DAO vote, and serve them from inference nodes with proof-of-inference receipts.

    Settings come from GYM_* environment variables (GYM_RPC_URL, GYM_DATA_DIR, GYM_DB_URL,
    GYM_IPFS_API, ...); the defaults run everything locally.
    """


def _print_deployment(up_or_status_deployment, rpc_url: str) -> None:
    table = Table("contract", "address", title=f"deployment on chain {up_or_status_deployment.chain_id}")
    for name, contract in up_or_status_deployment.contracts.items():
        table.add_row(name, contract.address)
    console.print(table)
    console.print(f"RPC: {rpc_url}  deployment block: {up_or_status_deployment.deployment_block}")


@devnet_app.command()
def up(
    port: Annotated[int | None, typer.Option(help="Anvil's port (0: a free one). "
                                             "Default: GYM_ANVIL_PORT or 8545.")] = None,
    redeploy: Annotated[bool, typer.Option(help="Deploy again even if the chain holds the "
                                           "recorded deployment.")] = False,
) -> None:
    """Start Anvil (unless running or GYM_RPC_URL is set) and deploy every contract.

    Writes the deployment manifest (devnet/deployment.json). Idempotent: run it again and it
    only redeploys when the chain no longer holds the recorded deployment.
    """
    settings = GymSettings()
    with console.status("starting the devnet"):
        result = devnet_up(settings, port=port, redeploy=redeploy)
    if result.anvil is not None:
        verb = "started" if result.started_anvil else "already running"
        console.print(f"anvil {verb}: pid {result.anvil.pid}, {result.anvil.rpc_url}")
    if result.deployed:
        console.print(f"deployed contracts ({result.reason}); wrote {settings.deployment_file}")
    else:
        console.print(f"contracts already deployed ({result.reason})")
    _print_deployment(result.deployment, result.deployment.rpc_url)


@devnet_app.command()
def status() -> None:
    """Report what runs and whether the chain still holds the recorded deployment.

    Exits non-zero when the devnet is down or the deployment does not match the chain.
    """
    settings = GymSettings()
    result = devnet_status(settings)
    if result.anvil is not None:
        console.print(f"anvil: running, pid {result.anvil.pid}, {result.anvil.rpc_url}")
    else:
        console.print(f"anvil: not started by gym; using {result.rpc_url}")
    console.print(f"chain head: block {result.block_number}")
    _print_deployment(result.deployment, result.rpc_url)
    if not result.healthy:
        for problem in result.problems:
            err_console.print(f"[red]mismatch:[/red] {problem}")
        err_console.print("the chain does not hold this deployment: run `gym devnet up` to redeploy")
        raise typer.Exit(1)
    console.print("[green]deployment matches the chain[/green]")


@devnet_app.command()
def down() -> None:
    """Stop the Anvil that `gym devnet up` started (never any other process)."""
    stopped = devnet_down(GymSettings())
    if stopped is None:
        console.print("no devnet started by gym is running")
    else:
        console.print(f"stopped anvil (pid {stopped.pid}, {stopped.rpc_url})")


@app.command()
def demo(
    keep: Annotated[bool, typer.Option(help="Leave the devnet running afterwards.")] = False,
) -> None:
    """Run the whole flow on embedded defaults: devnet up, deploy, check, tear down."""
    settings = GymSettings()
    console.rule("1. devnet")
    with console.status("starting Anvil and deploying the contracts"):
        result = devnet_up(settings)
    try:
        _print_deployment(result.deployment, result.deployment.rpc_url)
        state = devnet_status(settings)
        if not state.healthy:
            raise DevnetError("deployment check failed: " + "; ".join(state.problems))
        console.print(f"[green]chain at block {state.block_number}; deployment verified[/green]")
    finally:
        if result.started_anvil and not keep:
            devnet_down(settings)
            console.print("devnet stopped (use --keep to leave it running)")
    console.rule("demo finished")


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except EXPECTED_ERRORS as exc:
        err_console.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
