"""The ``gym`` command: the root of the CLI and the ``gym devnet`` and ``gym demo`` commands
(the demo's steps are ``devnet/demo.py``).

Each package contributes its own sub-commands from its ``cli.py``; this module only mounts
them, and turns the packages' expected errors into one clear line and a non-zero exit code
instead of a traceback.
"""

from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path
from typing import Annotated

import typer

import committee.cli
import committee.rewards.cli
import content_endpoint.cli
import contracts
import contracts.cli
import governance.cli
import governance.dashboard.cli
import inference_node.cli
import inference_node.volunteer
import ledger.cli
import trainer.adapters.cli
import trainer.cli
import trainer.gradient.cli
import trainer.swarm.cli
from content_endpoint.errors import ContentEndpointError
from contracts.signing import held_notices
from devnet.errors import DevnetError
from devnet.help import GymGroup
from governance.errors import GovernanceError
from inference_node.errors import InferenceNodeError
from ledger.errors import LedgerError
from ledger.tables import CliConsole
from trainer.errors import TrainerError

app = typer.Typer(
    name="gym",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain help, readable at 80 columns: see devnet/help.py.
    rich_markup_mode=None,
    cls=GymGroup,
)
devnet_app = typer.Typer(help="Run the local network: Anvil plus every contract, deployed.",
                         no_args_is_help=True)
app.add_typer(devnet_app, name="devnet")
app.add_typer(contracts.cli.app, name="contracts")
app.add_typer(content_endpoint.cli.app, name="ipfs")
app.add_typer(ledger.cli.app, name="ledger")
ledger.cli.verify_app.command("receipt")(inference_node.cli.verify_receipt)
ledger.cli.verify_app.command("evaluation")(inference_node.cli.verify_evaluation)
app.add_typer(ledger.cli.verify_app, name="verify")
trainer.gradient.cli.register(trainer.cli.train_app)
app.add_typer(trainer.cli.train_app, name="train")
app.add_typer(trainer.adapters.cli.app, name="adapter")
trainer.swarm.cli.app.command("register")(inference_node.volunteer.register)
app.add_typer(trainer.swarm.cli.app, name="swarm")
app.add_typer(inference_node.cli.app, name="node")
app.add_typer(committee.cli.app, name="verifier")
app.add_typer(committee.rewards.cli.app, name="rewards")
app.command(name="eval")(trainer.cli.eval_library)


def _governance_root(ctx: typer.Context) -> None:
    """The DAO: propose curations, vote, queue and execute."""
    from devnet.runtime import governance_runtime
    from devnet.settings import GymSettings

    ctx.obj = governance_runtime(GymSettings(), ctx.obj)


app.add_typer(governance.cli.app, name="gov", callback=_governance_root)
app.command(name="dashboard")(governance.dashboard.cli.dashboard)

console = CliConsole()
err_console = CliConsole(stderr=True)

# Errors a user can cause and fix; anything else is a bug and keeps its traceback.
EXPECTED_ERRORS: tuple[type[Exception], ...] = (
    DevnetError,
    ContentEndpointError,
    contracts.ContractsError,
    LedgerError,
    TrainerError,
    GovernanceError,
    InferenceNodeError,
)


def _version_callback(value: bool) -> None:
    if value:
        from importlib.metadata import version

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
    from devnet.runtime import deployed_address, governance_runtime, ledger_runtime
    from devnet.settings import GymSettings

    settings = GymSettings()
    ctx.obj = ledger_runtime(settings)
    # Commands outside `gym gov` that need the DAO (the dashboard) build it on demand.
    ctx.meta["governance_runtime"] = lambda: governance_runtime(settings, ctx.obj)
    ctx.meta["node_registry_address"] = lambda: deployed_address(settings, "NodeRegistry")
    ctx.meta["committee_address"] = lambda: deployed_address(settings, "VerifierCommittee")
    ctx.meta["distributor_address"] = lambda: deployed_address(settings, "RewardDistributor")
    ctx.meta["data_dir"] = lambda: settings.data_dir
    # picklable: `gym verifier serve`'s judge process rebuilds the runtime with it
    ctx.meta["ledger_runtime"] = partial(ledger_runtime, settings)


@app.command(name="audit")
def audit(
    ctx: typer.Context,
    log: Annotated[str | None, typer.Argument(
        help="Log name as created on chain (gym/curated: the DAO's curated library), or an "
             "on-chain log id.")] = None,
    log_id: Annotated[int | None, typer.Option("--log-id", help="On-chain log id.")] = None,
    from_block: Annotated[int | None, typer.Option(help="First block to scan (default: the "
                                                   "deployment block).")] = None,
    model: Annotated[Path | None, typer.Option(
        help="Receipt log with --sample: recheck each sampled receipt's activations, "
             "termination and sampling with this model. With --recompute: the swarm run's "
             "base weights (default: the base/ the run published, a tiny model's).",
        exists=True, file_okay=False)
    ] = None,
    recompute: Annotated[Path | None, typer.Option(
        help="Swarm runs: re-compute each failed work check a ban names, with the run's own "
             "trainer on this copy of its dataset (refused unless its sha256 is the run's); a "
             "ban that does not re-compute is a discrepancy.", exists=True, dir_okay=False)
    ] = None,
    sample: Annotated[int | None, typer.Option(
        min=1, help="Receipt log: fetch this many receipts' bundles, chosen at random, from the "
                    "node and check each in full.")] = None,
    node: Annotated[str | None, typer.Option(
        help="The node's URL for --sample; default: its endpoint in the NodeRegistry.")
    ] = None,
    seed: Annotated[int | None, typer.Option(
        help="Seed of the --sample choice (the same seed samples the same receipts).")
    ] = None,
    key_env: Annotated[str | None, typer.Option(
        help="With --sample: the environment variable holding the hex key of a registered "
             "verifier, which signs the bundle reads (nodes serve their users' requests and "
             "answers to verifiers only).")] = None,
    account: Annotated[int | None, typer.Option(
        "--account", help="With --sample on the devnet: Anvil's account N signs the bundle "
                          "reads instead of --key-env.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON (every "
                                          "value in full); the exit code is the same.")] = False,
    resume: Annotated[bool, typer.Option(
        "--resume", help="Continue the last audit of this log where it stopped (its state is "
                         "saved under GYM_DATA_DIR/audits as it goes; a later --resume also "
                         "replays only the checkpoints anchored since).")] = False,
) -> None:
    """Replay a log from chain events and the content store alone; exit 1 on any discrepancy.

    Through a Kubo endpoint (GYM_IPFS_API) entries arrive a thousand per request, as the CARs
    of their batch's entries DAG; the report names the first bad entry (leaf and CID).

    When the log holds receipts (a node's receipt log), also check every receipt's signature
    under this deployment's domain and that one signer (the node) signed them all, naming each
    failure; with --sample N, check N random receipts in full from the bundles the node keeps
    (a bundle past the node's retention is reported as not retained, not as a failure).

    When the log holds swarm runs, re-check each ban a run lists from its published evidence
    and each contribution's credit against the run's bans and work checks; with --recompute
    DATASET, re-compute each failed work check with the run's own trainer.
    """
    import dataclasses
    import json
    import tempfile

    from inference_node.receipt_audit import ReceiptCollector
    from ledger.audit import audit_report_json
    from ledger.runtime import runtime_of
    from trainer.swarm.audit import SwarmCollector, check_swarm, print_swarm_audit, recomputer

    collector, runs = ReceiptCollector(), SwarmCollector()

    def on_entry(index: int, cid: str, data: bytes) -> None:
        collector(index, cid, data)
        runs(index, cid, data)

    report = ledger.cli.replay_log(ctx, log, log_id, from_block, on_entry=on_entry,
                                   as_json=as_json, resume=resume,
                                   receipts=lambda: len(collector.receipts))
    ok, receipts, swarm = report.ok, None, None
    if runs.runs or runs.contributions:
        content = runtime_of(ctx).content
        with tempfile.TemporaryDirectory(prefix="gym-audit-") as scratch:
            again = (None if recompute is None
                     else recomputer(recompute, model, Path(scratch), content))
            swarm = check_swarm(runs, content, whole=not resume, recompute=again)
        if not as_json:
            print_swarm_audit(swarm, console)
        ok = swarm.ok and ok
    if collector.receipts:
        receipts = inference_node.cli.audit_receipt_log(ctx, collector, owner=report.owner,
                                                        model=model, sample=sample, node=node,
                                                        seed=seed, quiet=as_json,
                                                        key_env=key_env,
                                                        reader_account=account)
        ok = receipts.ok and ok
    elif (sample is not None or node is not None or account is not None
          or (model is not None and recompute is None)):
        raise typer.BadParameter("--model, --sample, --node and --account apply to a log of "
                                 "receipts (--model also with --recompute); "
                                 f"log {report.log_id} holds none")
    if recompute is not None and not runs.runs:
        raise typer.BadParameter(f"--recompute applies to a log of swarm runs; log "
                                 f"{report.log_id} holds none")
    if as_json:
        data = audit_report_json(report)
        data["receipts"] = (None if receipts is None
                            else {**dataclasses.asdict(receipts), "ok": receipts.ok})
        data["swarm"] = None if swarm is None else {**dataclasses.asdict(swarm), "ok": swarm.ok}
        data["ok"] = ok
        typer.echo(json.dumps(data, indent=2))
    if not ok:
        raise typer.Exit(1)


@devnet_app.command()
def up(
    port: Annotated[int | None, typer.Option(help="Anvil's port (0: a free one). "
                                             "Default: GYM_ANVIL_PORT or 8545.")] = None,
    redeploy: Annotated[bool, typer.Option(help="Deploy again even if the chain holds the "
                                           "recorded deployment.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the deployment as JSON.")
                       ] = False,
) -> None:
    """Start Anvil (unless running or GYM_RPC_URL is set) and deploy every contract; start the
    content service beside it (`gym ipfs serve` on GYM_IPFS_PORT, default 5001, over the
    local store) unless GYM_IPFS_API names one.

    Writes the deployment manifest (devnet/deployment.json), with the content endpoint that
    other parties point GYM_IPFS_API at. Idempotent: run it again and it only redeploys when
    the chain no longer holds the recorded deployment.
    """
    from devnet.deploy import deployment_json, print_deployment
    from devnet.network import devnet_up
    from devnet.settings import GymSettings

    settings = GymSettings()
    with err_console.status("starting the devnet"):
        result = devnet_up(settings, port=port, redeploy=redeploy)
    if as_json:
        typer.echo(json.dumps({"deployed": result.deployed, "reason": result.reason,
                               "anvil_pid": result.anvil and result.anvil.pid,
                               "content_pid": result.content and result.content.pid,
                               "manifest_cid": result.manifest_cid,
                               "deployment_file": str(settings.deployment_file),
                               **deployment_json(result.deployment,
                                                 result.deployment.rpc_url)}, indent=2))
        return
    deployment = result.deployment
    if result.anvil is not None:
        verb = "started" if result.started_anvil else "already running"
        console.print(f"anvil {verb}: pid {result.anvil.pid}, {deployment.rpc_url}",
                      highlight=False)
    if result.content is not None:
        verb = "started" if result.started_content else "already running"
        console.print(f"content service {verb}: pid {result.content.pid}, "
                      f"{deployment.content_api} (store {result.content.store_dir})",
                      highlight=False, soft_wrap=True)
    for note in result.notes:
        err_console.print(f"note: {note}", highlight=False, soft_wrap=True)
    if result.deployed:
        console.print(f"deployed contracts ({result.reason}); wrote {settings.deployment_file}")
    else:
        console.print(f"contracts already deployed ({result.reason})")
    print_deployment(console, deployment, deployment.rpc_url)
    console.print(f"manifest published: {result.manifest_cid}   another party joins with "
                  f"`GYM_RPC_URL={deployment.rpc_url} GYM_IPFS_API={deployment.content_api} "
                  f"gym devnet join {result.manifest_cid}`", highlight=False, soft_wrap=True)


@devnet_app.command()
def status(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False
           ) -> None:
    """Report what runs and whether the chain still holds the recorded deployment.

    Exits non-zero when the devnet is down or the deployment does not match the chain.
    """
    from devnet.deploy import deployment_json, print_deployment
    from devnet.network import devnet_status
    from devnet.settings import GymSettings

    settings = GymSettings()
    result = devnet_status(settings)
    if as_json:
        typer.echo(json.dumps({"healthy": result.healthy, "problems": result.problems,
                               "anvil_pid": result.anvil and result.anvil.pid,
                               "content_pid": result.content and result.content.pid,
                               "block_number": result.block_number,
                               **(deployment_json(result.deployment, result.rpc_url)
                                  if result.deployment else {})},
                              indent=2))
        if not result.healthy:
            raise typer.Exit(1)
        return
    if result.anvil is not None:
        console.print(f"anvil: running, pid {result.anvil.pid}, {result.anvil.rpc_url}")
    else:
        console.print(f"anvil: not started by gym; using {result.rpc_url}")
    if result.content is not None:
        console.print(f"content service: running, pid {result.content.pid}, "
                      f"{result.content.url}", highlight=False)
    elif result.content_api:
        console.print(f"content endpoint: {result.content_api} (not started by gym here)",
                      highlight=False)
    console.print(f"chain head: block {result.block_number}")
    print_deployment(console, result.deployment, result.rpc_url)
    if not result.healthy:
        for problem in result.problems:
            err_console.print(f"[red]problem:[/red] {problem}", highlight=False, soft_wrap=True)
        if result.advice:
            err_console.print(result.advice, highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    console.print("[green]deployment matches the chain; the content endpoint answers[/green]"
                  if result.content_api else "[green]deployment matches the chain[/green]")


@devnet_app.command()
def down() -> None:
    """Stop the Anvil and the content service that `gym devnet up` started (never any other
    process)."""
    from devnet.network import devnet_down
    from devnet.settings import GymSettings

    anvil, content = devnet_down(GymSettings())
    if anvil is None and content is None:
        console.print("no devnet started by gym is running")
    if anvil is not None:
        console.print(f"stopped anvil (pid {anvil.pid}, {anvil.rpc_url})")
    if content is not None:
        console.print(f"stopped the content service (pid {content.pid}, {content.url})",
                      highlight=False)


@app.command(name="deploy")
def deploy(
    expect_chain_id: Annotated[int, typer.Option(
        "--expect-chain-id", help="The chain id GYM_RPC_URL must report (e.g. 11155111 for "
                                  "Sepolia); anything else is refused before a transaction.")],
    holder: Annotated[list[str], typer.Option(
        "--holder", metavar="ADDRESS", help="An address that receives the initial GYM (tokens_per_holder each); "
                         "repeat it. Holders delegate their votes themselves later.")],
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Run the deployment on a local Anvil fork of the network: print "
                          "the addresses and the gas; send nothing.")] = False,
    params: Annotated[Path | None, typer.Option(
        help="JSON of the DAO's parameters (devnet/deploy.py GovernanceParams: timelock delay, "
             "voting period, stakes, ...); default: the devnet's short ones.",
        exists=True, dir_okay=False)] = None,
    key_env: Annotated[str | None, typer.Option(
        help="Environment variable holding the deployer's hex key.")] = "GYM_DEPLOYER_KEY",
    keystore: Annotated[Path | None, typer.Option(
        help="Encrypted JSON keystore of the deployer (instead of --key-env).",
        exists=True, dir_okay=False)] = None,
    password_env: Annotated[str, typer.Option(
        help="Environment variable holding the keystore's password.")] = "GYM_KEYSTORE_PASSWORD",
) -> None:
    """Deploy every contract to the EVM network at GYM_RPC_URL (not the devnet) with your own
    key, and write the same manifest as `gym devnet up` (GYM_DEPLOYMENT_FILE), published to
    GYM_IPFS_API for others to `gym devnet join`. Run it with --dry-run first."""
    from eth_utils import is_address, to_checksum_address

    from devnet.deploy import GovernanceParams, connect, print_deployment
    from devnet.remote import check_target, deploy_remote, plan_deployment
    from devnet.settings import GymSettings
    from inference_node.launch import load_key
    from ledger.json_input import parse_json

    settings = GymSettings()
    if not settings.rpc_url:
        raise typer.BadParameter("set GYM_RPC_URL to the network's JSON-RPC endpoint",
                                 param_hint="GYM_RPC_URL")
    bad = [h for h in holder if not is_address(h)]
    if bad:
        raise typer.BadParameter(f"not an address: {bad[0]!r:.60}", param_hint="--holder")
    holders = tuple(dict.fromkeys(to_checksum_address(h) for h in holder))
    governance = GovernanceParams()
    if params is not None:
        if params.stat().st_size > 64 * 1024:
            raise typer.BadParameter(f"{params} is over 64 KiB: not a parameters file",
                                     param_hint="--params")
        try:
            governance = GovernanceParams.model_validate(parse_json(
                params.read_bytes(), max_bytes=64 * 1024, max_depth=4, what=str(params)))
        except ValueError as exc:  # JSONInputError and pydantic's ValidationError
            raise typer.BadParameter(f"{params}: {str(exc).splitlines()[0]}",
                                     param_hint="--params") from None
    key = load_key(None if keystore else key_env, keystore, password_env)
    if key is None:
        raise typer.BadParameter("give the deployer's key: --key-env VAR or --keystore FILE")
    check_target(connect(settings.rpc_url), expect_chain_id, key)
    if dry_run:
        with err_console.status("deploying on a local fork of the network"):
            plan = plan_deployment(settings.rpc_url, key, governance, holders)
        from rich.table import Table

        from ledger.tables import print_table

        table = Table("contract", "address", title=f"dry run on chain {plan.chain_id} "
                                                     f"(deployer {plan.deployer})")
        for name, address in plan.addresses.items():
            table.add_row(name, address)
        print_table(table, console)
        gwei = plan.gas_price_wei / 1e9
        console.print(f"{len(plan.spent)} transactions, {plan.total_gas:,} gas; at {gwei:g} "
                      f"gwei now: {plan.cost_wei / 1e18:.6f} ETH (the deployer holds "
                      f"{plan.balance_wei / 1e18:.6f} ETH); nothing was sent", highlight=False)
        if plan.balance_wei < plan.cost_wei:
            err_console.print("[yellow]warning:[/yellow] the deployer cannot pay for it yet")
        return
    if settings.deployment_file.exists():
        raise typer.BadParameter(f"{settings.deployment_file} exists: move it away or set "
                                 "GYM_DEPLOYMENT_FILE, so no manifest is overwritten",
                                 param_hint="GYM_DEPLOYMENT_FILE")
    from ledger.addresses import without_credentials

    with err_console.status(f"deploying to chain {expect_chain_id}"):
        deployment = deploy_remote(settings.rpc_url, key, governance, holders)
        deployment.content_api = settings.ipfs_api and without_credentials(settings.ipfs_api)
        deployment.save(settings.deployment_file)
    print_deployment(console, deployment, deployment.rpc_url)
    console.print(f"wrote {settings.deployment_file}", highlight=False)
    if settings.ipfs_api:
        from ledger.content import open_content_store

        cid = open_content_store(settings.ipfs_api, settings.data_dir / "ipfs").add_file(
            deployment.model_dump_json(indent=2).encode(), pin=True)
        console.print(f"manifest published: {cid}   others join with `gym devnet join {cid}`",
                      highlight=False)


@devnet_app.command()
def join(
    cid: Annotated[str, typer.Argument(help="The CID of the deployment manifest `gym devnet up` "
                                            "published.")],
) -> None:
    """Join a deployment from its published manifest alone: fetch it from GYM_IPFS_API, check
    it against the chain at GYM_RPC_URL (its blocks, every contract's code against this build,
    how they are wired), and write it to GYM_DEPLOYMENT_FILE."""
    from devnet.deploy import print_deployment
    from devnet.network import devnet_join
    from devnet.settings import GymSettings

    settings = GymSettings()
    deployment = devnet_join(settings, cid)
    print_deployment(console, deployment, deployment.rpc_url)
    console.print(f"joined: the chain holds deployment {cid} (this build's code, wired as "
                  f"deployed); wrote {settings.deployment_file}", highlight=False)


@devnet_app.command()
def mine(
    seconds: Annotated[int, typer.Option(min=0, help="Move the chain's clock this many seconds "
                                         "forward first.")] = 0,
    blocks: Annotated[int, typer.Option(min=1, help="Blocks to mine.")] = 1,
) -> None:
    """Devnet only: skip time and mine blocks (the governor's clock is block timestamps, and an
    idle Anvil mines none), e.g. past a proposal's voting period or the timelock delay."""
    from devnet.deploy import Deployment, connect
    from devnet.settings import GymSettings
    from governance.devnet_time import advance_time, utc

    settings = GymSettings()
    rpc_url = settings.rpc_url or Deployment.load(settings.deployment_file).rpc_url
    w3 = connect(rpc_url)
    before = w3.eth.get_block("latest")["timestamp"]
    head = advance_time(w3, seconds, blocks)
    # An idle Anvil's head block can be minutes old and its next block takes the wall clock's
    # time plus the skip: then the chain moves by more than --seconds, and the line says why.
    moved = head["timestamp"] - before
    why = (f": {seconds} s skipped, {moved - seconds} s the devnet idled since its previous "
           "block" if moved != seconds else "")
    console.print(f"mined {blocks} block{'s' if blocks != 1 else ''} (head block "
                  f"{head['number']}); chain time {utc(head['timestamp'])} (+{moved} s{why})",
                  highlight=False)


@app.command()
def demo(
    keep: Annotated[bool, typer.Option(help="Leave the devnet running afterwards.")] = False,
    train: Annotated[bool, typer.Option(help="Run the Training-Free GRPO step (a few minutes "
                                        "on CPU with SmolLM2-135M).")] = True,
    sft: Annotated[bool, typer.Option("--sft", help="Also train and publish a short LoRA SFT "
                                      "adapter (SmolLM2, about a minute on CPU).")] = False,
    node: Annotated[bool, typer.Option(help="Serve the curated library from an inference node, "
                                       "ask it a question, verify the receipt and catch a "
                                       "forged one.")] = True,
) -> None:
    """Run the whole flow on embedded defaults: devnet, publish, train, audit, measure, curate
    by evidence, serve, verify, judge, tear down.

    Starts Anvil and deploys the contracts; publishes the sample experiences to a log in two
    anchored checkpoints and audits it from chain events and the content store alone; runs a
    short Training-Free GRPO on the bundled math set with SmolLM2-135M-Instruct (its stage-2
    answers constrained to the operations' JSON schema), prints what it learned, publishes the
    run and its experiences, and audits that log too; with --sft, trains a short LoRA SFT
    adapter through TRL + PEFT and publishes it. Then starts an inference node that registers
    in the NodeRegistry and signs receipts, and measures through it, before any vote, what the
    run learned (the samples when it learned none) and a farmer's one experience against the
    base model on a small benchmark (every generation's receipt published with the
    evaluation, which is then verified); the DAO votes on each by its evidence: a library that
    does not beat the baseline beyond its spread is voted down, one that does is queued and
    executed (three votes, one an EIP-712 signature relayed by another account, voting period
    and timelock delay skipped on the devnet). The node then serves the new curated library:
    it answers a question through the openai SDK, the receipt is verified (signature,
    registration, library root, log inclusion, anchoring, activations, termination,
    sampling), a dishonest node's forged answer fails verification by name and is challenged,
    and the verifier committee judges it. Stops the devnet it started (unless --keep). Each
    party keeps its own data directory and database under <GYM_DATA_DIR>/parties/ and shares
    only the chain and the content endpoint. With --no-node the DAO curates without evidence.
    """
    from devnet.demo import run_demo
    from devnet.settings import GymSettings

    run_demo(GymSettings(), console, keep=keep, train=train, sft=sft, node=node)


def main() -> None:
    """Console-script entry point."""
    with held_notices() as notices:  # which key signed: said once the command succeeded
        try:
            app()
        except EXPECTED_ERRORS as exc:
            from rich.markup import escape  # a message may hold brackets: "[pair.cc:553] ..."

            err_console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False,
                              soft_wrap=True)
            sys.exit(1)
        except SystemExit as done:
            if done.code in (0, None):
                for line in notices:
                    print(line, file=sys.stderr, flush=True)
            raise


if __name__ == "__main__":
    main()
