"""The ``gym`` command: the root of the CLI and the ``gym devnet`` and ``gym demo`` commands.

Each package contributes its own sub-commands from its ``cli.py``; this module only mounts
them, and turns the packages' expected errors into one clear line and a non-zero exit code
instead of a traceback.
"""

from __future__ import annotations

import json
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

import contracts
import contracts.cli
import devnet.ipfs_cli
import inference_node.cli
import ledger.cli
import trainer.cli
from devnet.deploy import Deployment
from devnet.errors import DevnetError
from devnet.network import devnet_down, devnet_status, devnet_up
from devnet.settings import DEVNET_DIR, GymSettings
from ledger.errors import LedgerError
from trainer.errors import TrainerError

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
app.add_typer(devnet.ipfs_cli.app, name="ipfs")
app.add_typer(ledger.cli.app, name="ledger")
app.add_typer(ledger.cli.verify_app, name="verify")
app.command(name="audit")(ledger.cli.audit)
app.add_typer(trainer.cli.train_app, name="train")
app.add_typer(inference_node.cli.app, name="node")
app.command(name="eval")(trainer.cli.eval_library)

console = Console()
err_console = Console(stderr=True)

# Errors a user can cause and fix; anything else is a bug and keeps its traceback.
EXPECTED_ERRORS: tuple[type[Exception], ...] = (
    DevnetError,
    contracts.ArtifactError,
    contracts.ToolchainError,
    LedgerError,
    TrainerError,
)

SAMPLE_EXPERIENCES = DEVNET_DIR / "samples" / "experiences.jsonl"


def _version_callback(value: bool) -> None:
    if value:
        console.print(f"gym {version('zoo-gym')}")
        raise typer.Exit()


def ledger_runtime(settings: GymSettings) -> ledger.cli.LedgerRuntime:
    """The ledger commands' dependencies; the deployment is read only when one needs the chain."""

    def chain_config() -> ledger.cli.ChainConfig:
        deployment = Deployment.load(settings.deployment_file)
        ledger_contract = deployment.contracts.get("ExperienceLedger")
        if ledger_contract is None:
            raise DevnetError(f"{settings.deployment_file} has no ExperienceLedger: run "
                              "`gym devnet up --redeploy`")
        return ledger.cli.ChainConfig(
            rpc_url=settings.rpc_url or deployment.rpc_url,
            address=ledger_contract.address,
            abi=contracts.load_artifact("ExperienceLedger").abi,
            private_key=settings.publisher_key.get_secret_value(),
            chain_id=deployment.chain_id,
            deployment_block=deployment.deployment_block,
        )

    return ledger.cli.LedgerRuntime(
        database_url=settings.database_url,
        content_dir=settings.data_dir / "ipfs",
        ipfs_api=settings.ipfs_api,
        chain_config=chain_config,
    )


@app.callback()
def root(
    ctx: typer.Context,
    _version: Annotated[bool, typer.Option("--version", callback=_version_callback,
                                           is_eager=True, help="Print the version and exit.")] = False,
) -> None:
    """Gym Ledger: publish training results to IPFS, anchor them on an EVM chain, curate them
    by DAO vote, and serve them from inference nodes with proof-of-inference receipts.

    Settings come from GYM_* environment variables (GYM_RPC_URL, GYM_DATA_DIR, GYM_DB_URL,
    GYM_IPFS_API, GYM_PUBLISHER_KEY, ...); the defaults run everything locally.
    """
    ctx.obj = ledger_runtime(GymSettings())


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
    train: Annotated[bool, typer.Option(help="Run the Training-Free GRPO step (a few minutes "
                                        "on CPU with SmolLM2-135M).")] = True,
) -> None:
    """Run the whole flow on embedded defaults: devnet, publish, train, audit, tear down.

    Starts Anvil and deploys the contracts; publishes the sample experiences to a log in two
    anchored checkpoints and audits it from chain events and the content store alone; runs a
    short Training-Free GRPO on the bundled math set with SmolLM2-135M-Instruct, publishes the
    run and its experiences, and audits that log too; stops the devnet it started (unless
    --keep).
    """
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
        rt = ledger_runtime(settings)
        _demo_ledger(rt, SAMPLE_EXPERIENCES)
        if train:
            _demo_training(rt, settings.data_dir / "runs")
    finally:
        if result.started_anvil and not keep:
            devnet_down(settings)
            console.print("devnet stopped (use --keep to leave it running)")
    console.rule("demo finished")


def _demo_ledger(rt: ledger.cli.LedgerRuntime, samples: Path) -> None:
    """Create a log, publish the samples in two checkpoints (the second with a consistency
    proof), then audit the log from chain events and the content store."""
    from ledger.audit import audit_log
    from ledger.publish import append_entries, ensure_chain_log, publish, read_entry_files

    entries = read_entry_files([samples])
    name = f"demo/experiences-{time.strftime('%Y%m%d-%H%M%S')}"
    console.rule("2. ledger")
    rt.store.create_log(name)
    log_id = ensure_chain_log(rt.store, rt.contract, name)
    console.print(f"created log {name}: on-chain log id {log_id}", highlight=False)
    half = len(entries) // 2 + 1
    for batch in (entries[:half], entries[half:]):
        appended = append_entries(rt.store, rt.content, name, batch)
        console.print(f"appended {len(batch)} experiences: size {appended.old_size} -> "
                      f"{appended.size}")
        published = publish(rt.store, rt.content, rt.contract, name)
        console.print(f"published size {published.size} with a consistency proof of "
                      f"{published.proof_length} hashes from size {published.old_size}")
        console.print(f"  root 0x{published.root.hex()}\n  tx   {published.tx_hash}",
                      highlight=False)
    console.rule("3. audit")
    report = audit_log(rt.contract, rt.content, log_id, from_block=rt.chain.deployment_block)
    ledger.cli.print_audit_report(report)
    if not report.ok:
        raise DevnetError(f"the demo log failed its audit: {report.discrepancies[0].message}")


def _demo_training(rt: ledger.cli.LedgerRuntime, runs_dir: Path) -> None:
    """A demo-sized Training-Free GRPO run (trainer/configs/tfgrpo_demo.yaml), published to
    its own log with one experience entry per applied operation, then audited."""
    from ledger.audit import audit_log
    from trainer.publish import publish_run
    from trainer.tfgrpo_config import TFGRPOConfig
    from trainer.tfgrpo_trainer import TFGRPOTrainer

    console.rule("4. Training-Free GRPO")
    repo = Path(trainer.__file__).resolve().parent.parent
    stamp = time.strftime("%Y%m%d-%H%M%S")
    config = TFGRPOConfig.from_yaml(repo / "trainer" / "configs" / "tfgrpo_demo.yaml",
                                    output_dir=str(runs_dir / f"tfgrpo-{stamp}"))
    config.train_path = str(repo / config.train_path)
    config.eval_path = str(repo / config.eval_path)
    with console.status("loading SmolLM2-135M-Instruct (converted once from the GGUF)"):
        tfgrpo = TFGRPOTrainer(config)
    with trainer.cli.step_progress() as bar:
        task = bar.add_task("tfgrpo steps", total=config.epochs * tfgrpo.steps_per_epoch)
        report = json.loads(tfgrpo.train(
            on_step_end=lambda row: bar.update(task, completed=row["global_step"] + 1)).read_text())
    counters = ", ".join(f"{k} {v}" for k, v in report["counters"].items() if v)
    console.print(f"learned {report['library_size']} experiences from "
                  f"{report['operations_applied']} operations ({counters})", highlight=False)
    name = f"demo/tfgrpo-{stamp}"
    published = publish_run(config.output_dir, rt.store, rt.content, rt.contract, name)
    console.print(f"published run {published.run_cid} to {name}: size {published.size}, "
                  f"tx {published.tx_hash}", highlight=False)
    log_id = rt.store.get_log(name).chain_log_id
    report = audit_log(rt.contract, rt.content, log_id, from_block=rt.chain.deployment_block)
    ledger.cli.print_audit_report(report)
    if not report.ok:
        raise DevnetError(f"the training log failed its audit: {report.discrepancies[0].message}")


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except EXPECTED_ERRORS as exc:
        err_console.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
