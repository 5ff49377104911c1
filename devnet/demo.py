"""`gym demo`: the whole system on the devnet, one step per package, read top to bottom.

``run_demo`` is the table of contents; each step below it is a few calls into the package
that owns that hop (named in its heading), and the printing:

1. devnet: start Anvil, deploy every contract, check the chain holds the deployment
   (``devnet.network``);
2. ledger: create a log, append the sample experiences and publish them in two anchored
   checkpoints, the second with a consistency proof (``ledger.publish``);
3. audit: replay that log from chain events and the content store alone (``ledger.audit``);
4. Training-Free GRPO: learn experiences on the bundled math set (stage 2 through the
   operations' JSON schema), publish the run and its experiences, audit that log
   (``trainer.tfgrpo_trainer``, ``trainer.publish``, ``ledger.audit``);
4b. with ``--sft``, LoRA SFT: train a short adapter and publish it (``trainer.gradient.demo``);
5. inference node: start a registered node that signs receipts and follows the curated library
   (``inference_node.demo.running_node``);
6. evidence: measure, through that node, the experiences step 4 learned (the samples when it
   learned none) and a farmer's one experience against the base model on a small benchmark,
   publish each evaluation with its receipts, and verify them (``devnet.demo_evidence``);
7. DAO curation by evidence: propose each with its evaluation; the voters vote by the
   measured effect: a library that does not beat the baseline beyond its spread is voted
   down, one that does is queued and executed, and the curated library's on-chain root is
   checked (``governance.devnet_curation``);
8. inference node answers: once it follows the new curated library, ask it a question, grade
   the answer, verify the receipt, forge one and challenge it before the verifier committee
   (``inference_node.demo``);
9. verifier committee, the node still serving: three verifiers judge that challenge and one
   against the honest receipt; one aggregate signature settles each on chain, the appeal
   window passes, the node's stake and the bonds move; each verifier audits a fifth of the
   node's anchored receipts and publishes its reports (``committee.demo``);
10. rewards: the reward epoch the demo ran in ends; each verifier computes its table from the
   chain and the content endpoint and signs the root; one aggregate attests it; after the
   appeal window the account that earned most claims its line (``committee.rewards.demo``);

With ``node`` off (`gym demo --no-node`) there is no node to measure through: step 5 is the
DAO curating the learned experiences without evidence.

then stop the devnet it started (unless ``keep``).

The parties (researcher, auditor, node operator, verifiers) each run on a data directory and
database of their own (``<data dir>/parties/<name>``, SQLite unless ``GYM_DB_URL`` names a
database) and share only the chain and the content endpoint of the deployment (the service
``gym devnet up`` started, or ``GYM_IPFS_API``), as on separate machines (``party``). The voters
hold nothing local: their votes are signatures.
"""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Console

from contracts.gym_token import format_gym
from devnet.deploy import Deployment, GovernanceParams, print_deployment
from devnet.errors import DevnetError
from devnet.network import devnet_down, devnet_status, devnet_up
from devnet.runtime import governance_runtime, ledger_runtime
from devnet.settings import ANVIL_DEV_KEYS, DEVNET_DIR, GymSettings
from governance.runtime import GovernanceRuntime
from ledger.runtime import LedgerRuntime

SAMPLE_EXPERIENCES = DEVNET_DIR / "samples" / "experiences.jsonl"
TFGRPO_DEMO_CONFIG = Path("trainer") / "configs" / "tfgrpo_demo.yaml"  # in the repository
NODE_KEY = ANVIL_DEV_KEYS[4]  # not the demo's publisher (account 0) nor its voters (1..3)


def run_demo(settings: GymSettings, console: Console, *, keep: bool = False, train: bool = True,
             sft: bool = False, node: bool = True) -> None:
    """Run every step (see the module docstring); ``train``, ``sft`` and ``node`` switch steps
    4, 4b and 5-9; ``keep`` leaves the devnet running."""
    console.rule("1. devnet")
    with console.status("starting Anvil and deploying the contracts"):
        up = devnet_up(settings)
    try:
        check_deployment(settings, console, up.deployment)
        endpoint = settings.ipfs_api or up.deployment.content_api
        researcher, auditor = party(settings, "researcher", endpoint), party(settings, "auditor",
                                                                             endpoint)
        console.print(f"each party on its own data directory under "
                      f"{settings.data_dir / PARTIES_DIR}, sharing only the chain and the "
                      f"content endpoint {endpoint}", highlight=False)
        rt, auditor_rt = ledger_runtime(researcher), ledger_runtime(auditor)
        runs_dir = researcher.data_dir / "runs"

        console.rule("2. ledger")
        log_name = publish_samples(rt, console, SAMPLE_EXPERIENCES)

        console.rule("3. audit")
        audit(auditor_rt, console, _chain_log_id(rt, log_name), what="the demo log")

        curate_log, curate_what = log_name, "The demo's sample experiences."
        if train:
            console.rule("4. Training-Free GRPO")
            training_log = train_tfgrpo(rt, console, runs_dir)
            audit(auditor_rt, console, _chain_log_id(rt, training_log), what="the training log")
            if experience_indices(rt, training_log):
                curate_log = training_log
                curate_what = "The experiences the demo's Training-Free GRPO run learned."
            else:
                console.print("[yellow]nothing was learned: the DAO curates the sample "
                              "experiences instead[/yellow]")

        if sft:
            from trainer.gradient.demo import demo_sft

            console.rule("4b. LoRA SFT")
            demo_sft(rt, runs_dir, console, log_name=f"demo/sft-{_stamp()}")

        if not node:
            console.rule("5. DAO curation")
            curate(governance_runtime(settings, rt), console, curate_log,
                   up.deployment.governance, description=curate_what)
        else:
            from eth_account import Account

            from committee.demo import (
                committee_challenger,
                demo_committee,
                register_demo_verifiers,
            )
            from devnet import demo_evidence
            from governance.devnet_time import advance_time
            from inference_node.demo import demo_node, running_node
            from trainer.backends import default_model_dir

            console.rule("5. inference node")
            committee = up.deployment.contracts["VerifierCommittee"].address
            operator, verifiers = party(settings, "node", endpoint), party(settings, "verifiers",
                                                                            endpoint)
            operator_rt, verifiers_rt = ledger_runtime(operator), ledger_runtime(verifiers)
            # the committee that will judge the node's challenges is the one of their opening
            register_demo_verifiers(verifiers, verifiers_rt, console, committee)
            gov = governance_runtime(settings, rt)
            with running_node(operator, operator_rt, console,
                              library_log_id=up.deployment.curated_log_id, curated=True,
                              model_dir=default_model_dir(), node_key=NODE_KEY) as served:
                console.rule("6. evidence")
                candidates = {"learned" if curate_log != log_name else "samples": curate_log,
                              "farm rules": demo_evidence.publish_farm_rules(rt, console)}
                measured = demo_evidence.measure(rt, console, served.url, served.model,
                                                 candidates)
                demo_evidence.check(auditor_rt, console, measured, served.registry)

                console.rule("7. DAO curation by evidence")
                demo_evidence.decide(
                    gov, console, measured, up.deployment.governance,
                    indices_of=lambda log: _uncurated_experiences(gov, log),
                    descriptions={measured[0].name: curate_what,
                                  "farm rules": "What the Gym farm's crates and trays hold."})

                console.rule("8. inference node answers")
                outcome = demo_node(operator, operator_rt, console,
                                    library_log_id=up.deployment.curated_log_id, curated=True,
                                    model_dir=default_model_dir(), node_key=NODE_KEY,
                                    challenger=committee_challenger(committee), node=served)
                console.rule("9. verifier committee")  # the node serves the auditors' reads
                demo_committee(verifiers, verifiers_rt, console, outcome=outcome,
                               model_dir=default_model_dir(), committee_address=committee,
                               node_operator=Account.from_key(NODE_KEY).address,
                               advance_time=advance_time)
            from committee.rewards.demo import demo_rewards

            console.rule("10. rewards")
            demo_rewards(verifiers, verifiers_rt, console,
                         distributor_address=up.deployment.contracts["RewardDistributor"].address,
                         committee_address=committee,
                         registry_address=up.deployment.contracts["NodeRegistry"].address,
                         advance_time=advance_time)
    finally:
        if up.started_anvil and not keep:
            devnet_down(settings)
            console.print("devnet stopped (use --keep to leave it running)")
    console.rule("demo finished")


PARTIES_DIR = "parties"


def party(settings: GymSettings, name: str, endpoint: str | None) -> GymSettings:
    """Party ``name``'s settings: the chain and deployment of ``settings``; its own data
    directory (``<data dir>/parties/<name>``) and so its own SQLite database, unless
    ``GYM_DB_URL`` names a database server; content through ``endpoint``."""
    return settings.model_copy(update={"data_dir": settings.data_dir / PARTIES_DIR / name,
                                       "ipfs_api": endpoint})


def _chain_log_id(rt: LedgerRuntime, log_name: str) -> int:
    """What a researcher tells its auditors: the on-chain id of its log ``log_name``."""
    return rt.store.get_log(log_name).chain_log_id


def _stamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S")


def check_deployment(settings: GymSettings, console: Console, deployment: Deployment) -> None:
    """1. Show the deployment; fail unless the chain holds it (``devnet_status``)."""
    print_deployment(console, deployment, deployment.rpc_url)
    state = devnet_status(settings)
    if not state.healthy:
        raise DevnetError("deployment check failed: " + "; ".join(state.problems))
    console.print(f"[green]chain at block {state.block_number}; deployment verified[/green]")


def publish_samples(rt: LedgerRuntime, console: Console, samples: Path) -> str:
    """2. Create a log and publish ``samples`` to it in two checkpoints (the second with a
    consistency proof); returns the log's name."""
    from ledger.publish import append_entries, ensure_chain_log, publish, read_entry_files

    entries = read_entry_files([samples])
    name = f"demo/experiences-{_stamp()}"
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
    return name


def audit(rt: LedgerRuntime, console: Console, log_id: int, *, what: str) -> None:
    """3. Replay on-chain log ``log_id`` from chain events and the content store alone (``rt``:
    an auditor's, holding nothing of the log); fail on any discrepancy (``what`` names the log
    in the error)."""
    from ledger.audit import audit_log, print_audit_report

    report = audit_log(rt.contract, rt.content, log_id, from_block=rt.chain.deployment_block)
    print_audit_report(report, console)
    if not report.ok:
        raise DevnetError(f"{what} failed its audit: {report.discrepancies[0].message}")


def train_tfgrpo(rt: LedgerRuntime, console: Console, runs_dir: Path) -> str:
    """4. A demo-sized Training-Free GRPO run (``trainer/configs/tfgrpo_demo.yaml``), published
    to its own log with one experience entry per applied operation; returns the log's name."""
    import trainer
    from trainer._json import read_json_file
    from trainer.publish import publish_run
    from trainer.reports import step_progress
    from trainer.tfgrpo_config import TFGRPOConfig
    from trainer.tfgrpo_trainer import TFGRPOTrainer

    repo = Path(trainer.__file__).resolve().parent.parent
    stamp = _stamp()
    config = TFGRPOConfig.from_yaml(repo / TFGRPO_DEMO_CONFIG,
                                    output_dir=str(runs_dir / f"tfgrpo-{stamp}"))
    config.train_path = str(repo / config.train_path)
    config.eval_path = str(repo / config.eval_path)
    with console.status("loading SmolLM2-135M-Instruct (converted once from the GGUF)"):
        tfgrpo = TFGRPOTrainer(config)
    with step_progress(console) as bar:  # as `gym train tfgrpo`
        task = bar.add_task("tfgrpo steps", total=config.epochs * tfgrpo.steps_per_epoch)
        report = read_json_file(tfgrpo.train(
            on_step_end=lambda row: bar.update(task, completed=row["global_step"] + 1)))
    counters = ", ".join(f"{k} {v}" for k, v in report["counters"].items() if v)
    size, ops = report["library_size"], report["operations_applied"]
    console.print(f"learned {size} experience{'' if size == 1 else 's'} from {ops} "
                  f"operation{'' if ops == 1 else 's'} ({counters})", highlight=False)
    library = read_json_file(Path(config.output_dir) / "library.json")
    for experience in library["experiences"]:
        console.print(f"  [{experience['prompt_id']}] {experience['text']}", highlight=False,
                      markup=False)
    name = f"demo/tfgrpo-{stamp}"
    published = publish_run(config.output_dir, rt.store, rt.content, rt.contract, name)
    console.print(f"published run {published.run_cid} to {name}: size {published.size}, "
                  f"tx {published.tx_hash}", highlight=False)
    return name


def experience_indices(rt: LedgerRuntime, log_name: str) -> list[int]:
    """Indices of the experience entries of local log ``log_name`` (a training log also holds
    its run entry)."""
    from ledger.entries import ExperienceEntry, decode_entry

    return [leaf.index for leaf in rt.store.leaves(log_name)
            if isinstance(decode_entry(rt.content.cat(leaf.cid)), ExperienceEntry)]


def _uncurated_experiences(gov: GovernanceRuntime, log_name: str) -> list[int]:
    """The experience leaves of ``log_name`` the curated library does not hold yet."""
    from governance.devnet_curation import uncurated_indices

    experiences = set(experience_indices(gov.ledger, log_name))
    return [i for i in uncurated_indices(gov.client(), gov.ledger.store, log_name)
            if i in experiences]


def curate(gov: GovernanceRuntime, console: Console, log_name: str,
           params: GovernanceParams, *, description: str = "The demo's sample experiences."
           ) -> None:
    """5. The DAO curates the demo log (``governance.devnet_curation.curate_on_devnet``: propose,
    three votes, one a relayed EIP-712 signature, skip the voting period and the timelock delay,
    queue, execute); then the curated library's on-chain root must be the RFC 9162 root of its
    leaves."""
    from governance.devnet_curation import curate_on_devnet, uncurated_indices
    from governance.devnet_time import is_devnet

    client = gov.client()
    if not is_devnet(client.w3):
        console.print("not the devnet: skipping the DAO step (its votes need devnet keys)")
        return
    experiences = set(experience_indices(gov.ledger, log_name))
    indices = [i for i in uncurated_indices(client, gov.ledger.store, log_name)
               if i in experiences]
    if not indices:  # a kept devnet that ran the demo before already holds these entries
        console.print(f"the curated library already holds every experience of {log_name}")
        return
    done = curate_on_devnet(client, gov.ledger.store, gov.ledger.content, log_name, indices,
                            description,
                            voting_period=params.voting_period,
                            timelock_delay=params.timelock_min_delay)
    tally, library = done.tally, done.library
    console.print(f"proposed curating {len(indices)} entries of {log_name} (document "
                  f"{done.plan.document_cid})", highlight=False)
    console.print(f"votes: for {format_gym(tally.votes_for)} (one by signature, relayed), "
                  f"abstain {format_gym(tally.votes_abstain)}, against "
                  f"{format_gym(tally.votes_against)}; quorum {format_gym(tally.quorum)}")
    console.print(f"executed: curated library {library.name!r} size {library.size}, on-chain "
                  f"root 0x{library.root.hex()}", highlight=False)
    if library.root != done.leaves_root:
        raise DevnetError(f"the curated library's on-chain root 0x{library.root.hex()} is not "
                          f"the RFC 9162 root 0x{done.leaves_root.hex()} of its leaves")
    console.print("[green]on-chain root matches the RFC 9162 root of the curated leaves[/green]")
