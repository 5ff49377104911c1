"""The ``gym`` command: the root of the CLI and the ``gym devnet`` and ``gym demo`` commands.

Each package contributes its own sub-commands from its ``cli.py``; this module only mounts
them, and turns the packages' expected errors into one clear line and a non-zero exit code
instead of a traceback.
"""

from __future__ import annotations

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
import governance.cli
import governance.dashboard.cli
import inference_node.cli
import ledger.cli
import trainer.adapters.cli
import trainer.cli
import trainer.gradient.cli
from devnet.deploy import Deployment, GovernanceParams, connect
from devnet.errors import DevnetError
from devnet.network import devnet_down, devnet_status, devnet_up
from devnet.runtime import deployed_address, governance_runtime, ledger_runtime
from devnet.settings import ANVIL_DEV_KEYS, DEVNET_DIR, GymSettings
from governance.errors import GovernanceError
from governance.runtime import GovernanceRuntime
from inference_node.errors import InferenceNodeError
from ledger.errors import LedgerError
from ledger.runtime import LedgerRuntime
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
ledger.cli.verify_app.command("receipt")(inference_node.cli.verify_receipt)
app.add_typer(ledger.cli.verify_app, name="verify")
app.command(name="audit")(ledger.cli.audit)
trainer.gradient.cli.register(trainer.cli.train_app)
app.add_typer(trainer.cli.train_app, name="train")
app.add_typer(trainer.adapters.cli.app, name="adapter")
app.add_typer(inference_node.cli.app, name="node")
app.command(name="eval")(trainer.cli.eval_library)


def _governance_root(ctx: typer.Context) -> None:
    """The DAO: propose curations, vote, queue and execute."""
    ctx.obj = governance_runtime(GymSettings(), ctx.obj)


app.add_typer(governance.cli.app, name="gov", callback=_governance_root)
app.command(name="dashboard")(governance.dashboard.cli.dashboard)

console = Console()
err_console = Console(stderr=True)

# Errors a user can cause and fix; anything else is a bug and keeps its traceback.
EXPECTED_ERRORS: tuple[type[Exception], ...] = (
    DevnetError,
    contracts.ContractsError,
    LedgerError,
    TrainerError,
    GovernanceError,
    InferenceNodeError,
)

SAMPLE_EXPERIENCES = DEVNET_DIR / "samples" / "experiences.jsonl"


def _version_callback(value: bool) -> None:
    if value:
        console.print(f"gym {version('zoo-gym')}")
        raise typer.Exit()


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
    settings = GymSettings()
    ctx.obj = ledger_runtime(settings)
    # Commands outside `gym gov` that need the DAO (the dashboard) build it on demand.
    ctx.meta["governance_runtime"] = lambda: governance_runtime(settings, ctx.obj)
    ctx.meta["node_registry_address"] = lambda: deployed_address(settings, "NodeRegistry")


def _print_deployment(deployment: Deployment, rpc_url: str) -> None:
    table = Table("contract", "address", title=f"deployment on chain {deployment.chain_id}")
    for name, contract in deployment.contracts.items():
        table.add_row(name, contract.address)
    console.print(table)
    console.print(f"RPC: {rpc_url}  deployment block: {deployment.deployment_block}")


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


@devnet_app.command()
def mine(
    seconds: Annotated[int, typer.Option(min=0, help="Move the chain's clock this many seconds "
                                         "forward first.")] = 0,
    blocks: Annotated[int, typer.Option(min=1, help="Blocks to mine.")] = 1,
) -> None:
    """Devnet only: skip time and mine blocks (the governor's clock is block timestamps, and an
    idle Anvil mines none), e.g. past a proposal's voting period or the timelock delay."""
    from governance.devnet_time import advance_time

    settings = GymSettings()
    rpc_url = settings.rpc_url or Deployment.load(settings.deployment_file).rpc_url
    w3 = connect(rpc_url)
    before = w3.eth.get_block("latest")["timestamp"]
    head = advance_time(w3, seconds, blocks)
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(head["timestamp"]))
    console.print(f"mined {blocks} block{'s' if blocks != 1 else ''}: head block "
                  f"{head['number']}, chain time {when} (+{head['timestamp'] - before} s)",
                  highlight=False)


@app.command()
def demo(
    keep: Annotated[bool, typer.Option(help="Leave the devnet running afterwards.")] = False,
    train: Annotated[bool, typer.Option(help="Run the Training-Free GRPO step (a few minutes "
                                        "on CPU with SmolLM2-135M).")] = True,
    sft: Annotated[bool, typer.Option("--sft", help="Also train and publish a short LoRA SFT "
                                      "adapter (SmolLM2, about a minute on CPU).")] = False,
    node: Annotated[bool, typer.Option(help="Serve the curated library from an inference node, "
                                       "ask it a question and verify the receipt.")] = True,
) -> None:
    """Run the whole flow on embedded defaults: devnet, publish, train, audit, curate, tear down.

    Starts Anvil and deploys the contracts; publishes the sample experiences to a log in two
    anchored checkpoints and audits it from chain events and the content store alone; runs a
    short Training-Free GRPO on the bundled math set with SmolLM2-135M-Instruct, publishes the
    run and its experiences, and audits that log too; with --sft, trains a short LoRA SFT
    adapter through TRL + PEFT and publishes it (adapter files on IPFS, `run` and `adapter`
    entries anchored); has the DAO curate the sample
    experiences (propose, three votes, one an EIP-712 signature relayed by another account,
    voting period and timelock delay skipped on the devnet, queue, execute) and checks the
    curated library's on-chain root; starts an inference node that registers in the
    NodeRegistry and serves the curated library, asks it a question through the openai SDK and
    verifies the receipt (signature, registration, library root, log inclusion, anchoring,
    activations); stops the devnet it started (unless --keep).
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
        log_name = _demo_ledger(rt, SAMPLE_EXPERIENCES)
        if train:
            _demo_training(rt, settings.data_dir / "runs")
        if sft:
            from trainer.gradient.demo import demo_sft

            console.rule("4b. LoRA SFT")
            demo_sft(rt, settings.data_dir / "runs", console,
                     log_name=f"demo/sft-{time.strftime('%Y%m%d-%H%M%S')}")
        _demo_governance(governance_runtime(settings, rt), log_name,
                         result.deployment.governance)
        if node:
            from inference_node.demo import demo_node
            from trainer.backends import default_model_dir

            # Anvil account 4: not the demo's publisher (0) nor its voters (1..3)
            demo_node(settings, rt, console, library_log_id=result.deployment.curated_log_id,
                      curated=True, model_dir=default_model_dir(), node_key=ANVIL_DEV_KEYS[4])
    finally:
        if result.started_anvil and not keep:
            devnet_down(settings)
            console.print("devnet stopped (use --keep to leave it running)")
    console.rule("demo finished")


def _demo_ledger(rt: LedgerRuntime, samples: Path) -> str:
    """Create a log, publish the samples in two checkpoints (the second with a consistency
    proof), then audit the log from chain events and the content store; returns its name."""
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
    return name


def _demo_governance(gov: GovernanceRuntime, log_name: str,
                     params: GovernanceParams) -> None:
    """The DAO curates the demo log: propose, three votes (one a relayed EIP-712 signature),
    skip the voting period and the timelock delay on the devnet, queue, execute, and check the
    curated library's on-chain root against the RFC 9162 root of the curated leaves."""
    from eth_account import Account

    from governance.devnet_time import is_devnet
    from ledger.rfc9162 import root as merkle_root

    console.rule("5. DAO curation")
    client = gov.client()
    if not is_devnet(client.w3):
        console.print("not the devnet: skipping the DAO step (its votes need devnet keys)")
        return
    store, content, curated = gov.ledger.store, gov.ledger.content, client.curated_log_id
    leaves = list(store.leaves(log_name))
    indices = [leaf.index for leaf in leaves
               if not client.ledger.is_curated(curated, leaf.leaf_hash)]
    if not indices:  # a kept devnet that ran the demo before already holds these entries
        console.print("the curated library already holds every sample experience")
        return
    plan = client.build_curation(store, content, log_name, indices,
                                 "The demo's sample experiences.")
    proposal_id, _ = client.propose(plan, key=ANVIL_DEV_KEYS[0])
    console.print(f"proposed curating {len(indices)} entries of {log_name} (document "
                  f"{plan.document_cid})", highlight=False)
    client.vote(proposal_id, "for", "clear and general", key=ANVIL_DEV_KEYS[1])
    client.vote(proposal_id, "abstain", key=ANVIL_DEV_KEYS[2])
    voter = Account.from_key(ANVIL_DEV_KEYS[3])
    typed = client.ballot_typed_data(proposal_id, "for", voter.address)
    signature = Account.sign_typed_data(voter.key, full_message=typed).signature
    client.cast_vote_by_sig(proposal_id, "for", voter.address, signature, key=ANVIL_DEV_KEYS[0])
    tally = client.proposal(proposal_id)
    console.print(f"votes: for {tally.votes_for // 10**18} GYM (one by signature, relayed), "
                  f"abstain {tally.votes_abstain // 10**18} GYM, against "
                  f"{tally.votes_against // 10**18} GYM; quorum {tally.quorum // 10**18} GYM")
    client.advance_time(params.voting_period + 1)
    client.queue(proposal_id, key=ANVIL_DEV_KEYS[0])
    client.advance_time(params.timelock_min_delay + 1)
    client.execute(proposal_id, key=ANVIL_DEV_KEYS[0])
    info = client.ledger.log_info(curated)
    appended = client.ledger.leaves_appended(curated, from_block=gov.ledger.chain.deployment_block)
    expected = merkle_root([event.leaf_hash for event in appended])
    console.print(f"executed: curated library {info.name!r} size {info.size}, on-chain root "
                  f"0x{info.root.hex()}", highlight=False)
    if info.root != expected:
        raise DevnetError(f"the curated library's on-chain root 0x{info.root.hex()} is not the "
                          f"RFC 9162 root 0x{expected.hex()} of its leaves")
    console.print("[green]on-chain root matches the RFC 9162 root of the curated leaves[/green]")


def _demo_training(rt: LedgerRuntime, runs_dir: Path) -> None:
    """A demo-sized Training-Free GRPO run (trainer/configs/tfgrpo_demo.yaml), published to
    its own log with one experience entry per applied operation, then audited."""
    from ledger.audit import audit_log
    from trainer._json import read_json_file
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
        report = read_json_file(tfgrpo.train(
            on_step_end=lambda row: bar.update(task, completed=row["global_step"] + 1)))
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
