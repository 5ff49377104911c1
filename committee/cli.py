"""``gym verifier``: join the verifier committee, judge challenges, aggregate verdicts.

    gym verifier register [--stake 100] [--bls-key FILE] [--account N | --key-env VAR]
    gym verifier serve --model DIR --aggregator URL [--bls-key FILE] [--interval 2]
    gym verifier aggregate [--port 8470] [--interval 2]
    gym verifier challenge BUNDLE.json --reason TEXT
    gym verifier status [--json]

The verifier's account (it stakes GYM and is named in signed verdicts) signs by the
installation's rule (``contracts.signing``): ``--account N`` on the devnet, else the hex key in
``--key-env`` (default ``GYM_VERIFIER_KEY``), else on the devnet Anvil's account 0. Its BLS key
lives in ``--bls-key`` (default ``<data dir>/verifier/bls-key.json``, created by ``register``).
``serve`` runs ``committee.service.VerifierService``, ``aggregate``
``committee.aggregator.Aggregator`` behind its HTTP endpoint; docs/committee.md "Serving".
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from contracts.gym_token import GYM, format_gym, parse_gym
from ledger.tables import CliConsole, print_table

if TYPE_CHECKING:  # web3 and eth-account load when a command runs, not for `--help`
    from committee.client import VerifierCommittee

app = typer.Typer(help="The verifier committee: stake, judge challenges, aggregate verdicts.",
                  no_args_is_help=True)
console = CliConsole(stderr=True)
stdout_console = CliConsole()

KEY_ENV = "GYM_VERIFIER_KEY"
DEFAULT_AGGREGATOR_PORT = 8470
STATUS_CHALLENGES = 200  # the latest challenges `status` shows

KeyEnv = Annotated[str, typer.Option(
    "--key-env", help=f"Environment variable holding the account's hex key (default {KEY_ENV}).")]
Account_ = Annotated[int | None, typer.Option(
    "--account", help="Devnet only: sign with Anvil's public account N.")]
BlsKey = Annotated[Path | None, typer.Option(
    "--bls-key", help="The verifier's BLS key file (default: <data dir>/verifier/bls-key.json).",
    dir_okay=False)]


@app.callback()
def verifier() -> None:
    """The verifier committee: stake, judge challenges, aggregate verdicts."""


def _runtime(ctx: typer.Context) -> Any:
    if ctx.obj is None:
        raise typer.BadParameter("gym verifier needs the chain configuration: run it as `gym ...`")
    return ctx.obj


def _lookup(ctx: typer.Context, name: str) -> Any:
    lookup = ctx.meta.get(name)
    if lookup is None:
        raise typer.BadParameter(f"gym verifier needs {name}: run it as `gym verifier ...`")
    return lookup()


def _key(rt: Any, key_env: str, account: int | None) -> str:
    from contracts.signing import signing_key

    return signing_key(rt.contract.w3.eth.chain_id, key_env, os.environ.get(key_env) or None,
                       account)


def open_committee(ctx: typer.Context, key: str | None = None) -> VerifierCommittee:
    """The deployment's VerifierCommittee (``key``: to send transactions)."""
    from committee.client import VerifierCommittee

    rt = _runtime(ctx)
    address = os.environ.get("GYM_VERIFIER_COMMITTEE") or _lookup(ctx, "committee_address")
    return VerifierCommittee(rt.contract.w3, address, key, from_block=rt.chain.deployment_block)


def _bls_path(ctx: typer.Context, given: Path | None) -> Path:
    return given if given is not None else Path(_lookup(ctx, "data_dir")) / "verifier" / \
        "bls-key.json"


@app.command()
def register(
    ctx: typer.Context,
    stake: Annotated[str, typer.Option(help="GYM to stake (at least the committee's minimum).")
                     ] = "100",
    bls_key: BlsKey = None,
    key_env: KeyEnv = KEY_ENV,
    account: Account_ = None,
) -> None:
    """Stake GYM and register a BLS key (created in --bls-key when the file does not exist)
    with its proof of possession. Prints the verifier's slot index."""
    from committee import keyfile

    amount = parse_gym(stake, "--stake", typer.BadParameter)
    rt = _runtime(ctx)
    committee = open_committee(ctx, _key(rt, key_env, account))
    path = _bls_path(ctx, bls_key)
    sk, created = keyfile.load_or_create(path)
    if created:
        console.print(f"created a BLS key in {path} (mode 0600: it signs for your stake)")
    minimum = committee.min_stake()
    if amount < minimum:
        raise typer.BadParameter(f"the committee's minimum stake is {format_gym(minimum)}",
                                 param_hint="--stake")
    with console.status(f"registering {committee.account.address} with "
                        f"{format_gym(amount)}"):
        index = committee.register(sk, amount)
    console.print(f"verifier {committee.account.address} registered at slot {index}, staking "
                  f"{format_gym(amount)}", highlight=False)
    print(index)


@app.command()
def status(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """The committee: its verifiers and its latest 200 challenges with their verdicts."""
    committee = open_committee(ctx)
    slots = committee.slots()
    count = committee.challenge_count()
    challenges = [committee.challenge(i) for i in range(max(1, count - STATUS_CHALLENGES + 1),
                                                        count + 1)]
    if as_json:
        print(json.dumps({
            "committee": committee.address, "active_stake": committee.active_stake(),
            "appeal_window": committee.appeal_window(),
            "verifiers": [{"index": s.index, "verifier": s.verifier, "stake": s.stake,
                           "state": ("free", "active", "unbonding")[s.state]} for s in slots],
            "challenges": [{"id": c.challenge_id, "status": c.status.label,
                            "verdict": c.verdict, "operator": c.operator,
                            "challenger": c.challenger, "signers": c.signers,
                            "settled_at": c.settled_at, "receipt_hash": "0x" + c.receipt_hash.hex()}
                           for c in challenges]}, indent=1))
        return
    from rich.table import Table

    table = Table(title=f"VerifierCommittee {committee.address}: active stake "
                        f"{format_gym(committee.active_stake())}")
    for column in ("slot", "verifier", "stake (GYM)", "state"):
        table.add_column(column)
    for s in slots:
        table.add_row(str(s.index), s.verifier, format_gym(s.stake),
                      ("free", "active", "unbonding")[s.state])
    print_table(table, stdout_console)
    table = Table(title="challenges")
    for column in ("id", "operator", "status", "verdict", "signers"):
        table.add_column(column)
    for c in challenges:
        verdict = {0: "-", 1: "upheld", 2: "rejected"}.get(c.verdict, str(c.verdict))
        table.add_row(str(c.challenge_id), c.operator, c.status.label, verdict,
                      ",".join(map(str, c.signers)) or "-")
    print_table(table, stdout_console)


class _Stopped(BaseException):
    """SIGINT/SIGTERM during a judgement (a BaseException: the judge's own error handling
    must not turn it into an abstention). The judgement was recorded before it started."""

    challenge: int | None = None


def _stop_event(service: Any = None, busy: Callable[[], bool] | None = None
                ) -> threading.Event:
    """An event SIGINT/SIGTERM set; with ``service`` (a ``VerifierService``, whose ``stop``
    it is) a signal during a judgement (or while ``busy()``: loading the judge) also
    interrupts it, so the process stops at once."""
    stop = service.stop if service is not None else threading.Event()

    def handler(*_: Any) -> None:
        stop.set()
        if service is not None and (service.judging is not None or (busy and busy())):
            _Stopped.challenge = service.judging
            raise _Stopped

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, handler)
    return stop


def _logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")


@app.command()
def serve(
    ctx: typer.Context,
    model: Annotated[Path, typer.Option(help="The model the receipts name (a checkpoint "
                                             "directory), to re-run their prefill.",
                                        exists=True, file_okay=False)],
    aggregator: Annotated[list[str], typer.Option(
        help="An aggregator's URL, e.g. http://127.0.0.1:8470; repeat it to send every verdict "
             "to several (any that gathers two thirds settles).")],
    bls_key: BlsKey = None,
    interval: Annotated[float, typer.Option(min=0.2, help="Seconds between polls.")] = 2.0,
    state: Annotated[Path | None, typer.Option(
        help="Where decisions and the block cursor are kept (default: next to the BLS key).",
        dir_okay=False)] = None,
    audit_rate: Annotated[int, typer.Option(
        min=0, max=10_000, help="Random audits: basis points of every registered node's newly "
                                "anchored receipts to fetch and check (0: off); a failed one "
                                "opens a committee challenge, bonded by this account.")] = 500,
    audit_evaluation_log: Annotated[list[str] | None, typer.Option(
        "--audit-evaluation-log", metavar="LOG",
        help="Also audit the receipts of every evaluation anchored on this log (its name or "
             "on-chain id; repeat for several): --audit-rate of each evaluation's "
             "generations, at least 1 and at most 32, fetched from the content endpoint and "
             "re-run; a failing receipt is challenged like any.")] = None,
    audit_evaluation: Annotated[list[str] | None, typer.Option(
        "--audit-evaluation", metavar="CID",
        help="Also audit this evaluation entry's receipts once (its CID, e.g. a proposal's "
             "evidence; repeat for several).")] = None,
    judge_deadline: Annotated[float, typer.Option(
        min=1, help="Seconds one judgement (or one audit's check) may take; past it the judge "
                    "process is killed and the evidence rejected as too costly.")] = 300.0,
    judge_memory: Annotated[int, typer.Option(
        min=64, help="MiB of memory one judgement may add to the judge process (Linux); past "
                     "it, likewise.")] = 4096,
    swarm_data: Annotated[Path | None, typer.Option(
        help="Judge challenges of staked swarm volunteers too: a run's dataset (a file, or a "
             "directory holding it: the file whose sha256 is the run's) to re-compute a failed "
             "work check with the run's own trainer (docs/swarm.md).", exists=True)] = None,
    swarm_model: Annotated[Path | None, typer.Option(
        help="With --swarm-data: the runs' base weights (default: the base/ a run published, "
             "a tiny model's).", exists=True, file_okay=False)] = None,
    publish_audits: Annotated[bool, typer.Option(
        help="Publish a report of each audited checkpoint to this verifier's gym-audits log "
             "and anchor it: reports that the chain agrees with are paid from the reward "
             "epoch's verification pool and decide its availability pool "
             "(docs/rewards.md).")] = True,
    rewards: Annotated[bool, typer.Option(
        help="Also compute the table of every ended reward epoch with no attested root, sign "
             "its root and send it to the aggregators (docs/rewards.md).")] = True,
    once: Annotated[bool, typer.Option("--once", help="Poll once and exit.")] = False,
    key_env: KeyEnv = KEY_ENV,
    account: Account_ = None,
) -> None:
    """Watch the committee's challenges; judge each with the full receipt verification
    (`gym verify receipt --model`); sign the verdict with the BLS key and send it to the
    aggregator (with --swarm-data, also a staked swarm volunteer's failed work check, re-computed
    with the run's own trainer). Also audit the nodes' anchored receipts at random (--audit-rate), with
    randomness fixed by a block mined after each anchor, and the receipts of evaluations
    (--audit-evaluation-log, --audit-evaluation). Stops on SIGINT/SIGTERM."""
    from functools import partial

    from committee import keyfile
    from committee.judge_worker import JudgeBounds, JudgeWorker
    from committee.service import Fanout, VerifierService, post_verdict, verifier_ops, worker_judges
    from ledger.entries import is_content_cid

    rt = _runtime(ctx)
    if (audit_evaluation_log or audit_evaluation) and not audit_rate:
        raise typer.BadParameter("evaluations are audited at --audit-rate: it is 0",
                                 param_hint="--audit-rate")
    for cid in audit_evaluation or ():
        if not is_content_cid(cid):
            raise typer.BadParameter(f"{cid[:80]!r} is not an entry CID",
                                     param_hint="--audit-evaluation")
    evaluation_logs = [_log_id(rt, log) for log in audit_evaluation_log or ()]
    key = _key(rt, key_env, account)
    committee = open_committee(ctx, key)
    path = _bls_path(ctx, bls_key)
    sk = keyfile.load(path)
    registry = _lookup(ctx, "node_registry_address")
    # the judgements run in a worker process under these bounds (docs/committee.md "Judging
    # under bounds"); it rebuilds this deployment's runtime from the same settings
    worker = JudgeWorker(partial(verifier_ops, ctx.meta["ledger_runtime"], str(model), registry,
                                 swarm_data and str(swarm_data),
                                 swarm_model and str(swarm_model)),
                         JudgeBounds(deadline_s=judge_deadline, memory_mib=judge_memory))
    judge_challenge, judge_evidence = worker_judges(worker)
    service = VerifierService(
        committee, sk, judge_challenge=judge_challenge,
        send=Fanout({url: partial(post_verdict, url, account=committee.account)
                     for url in dict.fromkeys(aggregator)}),
        state_file=state or path.with_name(f"state-{committee.address.lower()}.json"),
        report=lambda line: console.print(line, highlight=False, markup=False),
        stop=threading.Event())
    index, address = service.identity()  # before the model loads: a wrong key fails at once
    stop = _stop_event(service, busy=lambda: worker.starting)
    try:
        with console.status(f"loading {model} in the judge process"):
            worker.start()
        console.print(f"verifier {address} (slot {index}) judging challenges of committee "
                      f"{committee.address}; verdicts to {', '.join(aggregator)}; each "
                      f"judgement within {judge_deadline:g} s and {judge_memory} MiB",
                      highlight=False)
        auditors = []
        if audit_rate:
            auditors.append(_auditor(rt, committee, judge_evidence, audit_rate,
                                     path.with_name(f"audit-{committee.address.lower()}.json"),
                                     key if publish_audits else None))
            console.print(f"auditing {audit_rate / 100:g}% of newly anchored receipts"
                          + (", each checkpoint's report published" if publish_audits else ""),
                          highlight=False)
        if evaluation_logs or audit_evaluation:
            auditors.append(_evaluation_auditor(
                rt, committee, judge_evidence, audit_rate, evaluation_logs, audit_evaluation or [],
                path.with_name(f"audit-evaluations-{committee.address.lower()}.json")))
            console.print(f"auditing {audit_rate / 100:g}% of the generations of the "
                          f"evaluations on logs {', '.join(map(str, evaluation_logs)) or '-'} "
                          f"and of {len(audit_evaluation or [])} named", highlight=False)
        if rewards:
            auditors += _root_signer(ctx, rt, committee, sk, list(dict.fromkeys(aggregator)))
        while not stop.is_set():
            service.tick()
            for auditor in auditors:
                auditor.tick()
            if once or stop.wait(interval):
                break
    except _Stopped:
        if _Stopped.challenge is not None:
            console.print(f"stopped while judging challenge {_Stopped.challenge}: it is "
                          "judged again at the next start", highlight=False)
    finally:
        worker.close()
    console.print("verifier stopped")


def _root_signer(ctx: typer.Context, rt: Any, committee: VerifierCommittee, sk: Any,
                 urls: list[str]) -> list[Any]:
    """[the ``RootSigner`` of this verifier], or [] when the deployment has no distributor."""
    from committee.rewards.distributor import RewardDistributor
    from committee.rewards.facts import sources_from
    from committee.rewards.pool import RootSigner, post_root

    try:
        address = os.environ.get("GYM_REWARD_DISTRIBUTOR") or _lookup(ctx, "distributor_address")
    except RuntimeError as exc:  # an older deployment
        console.print(f"not signing reward roots: {exc}", highlight=False)
        return []
    sources = sources_from(rt, _lookup(ctx, "node_registry_address"), committee.address)
    signer = RootSigner(sources, RewardDistributor(rt.contract.w3, address), committee, sk,
                        committee.account.address, post_root(urls, committee.account),
                        report=lambda line: console.print(line, highlight=False, markup=False))
    console.print(f"signing the roots of ended reward epochs of {address}", highlight=False)
    return [signer]


class _PersistentAuditor:
    """``committee.audits.Auditor`` (or ``committee.evaluation_audits.EvaluationAuditor``)
    with its cursor kept in ``cursor_file``, printing every finding but the verified ones."""

    def __init__(self, auditor: Any, cursor_file: Path, what: str = "audit",
                 publisher: Any = None) -> None:
        self.auditor, self.cursor_file, self.what = auditor, cursor_file, what
        self.publisher = publisher  # a committee.audit_reports.AuditPublisher, or None

    def tick(self) -> None:
        from committee.audit_reports import MAX_PENDING_REPORTS
        from committee.audits import VERIFIED

        result = self.auditor.run_once()
        if self.publisher is not None:
            try:
                published = self.publisher.publish(result)
                if published:
                    console.print(f"{self.what}: {len(published)} checkpoint report"
                                  f"{'' if len(published) == 1 else 's'} published to "
                                  f"{self.publisher.log}", highlight=False)
            except Exception as exc:  # noqa: BLE001 - the RPC or the endpoint: kept, retried
                kept = self.publisher.pending
                console.print(f"{self.what}: {len(kept)} report{'' if len(kept) == 1 else 's'} "
                              f"not published yet ({exc}); kept in "
                              f"{self.publisher.pending_file} and tried again next poll",
                              highlight=False, markup=False)
            if self.publisher.dropped:
                console.print(f"{self.what}: {self.publisher.dropped} unpublished reports "
                              f"dropped, the oldest beyond {MAX_PENDING_REPORTS}",
                              highlight=False, markup=False)
                self.publisher.dropped = 0
        checked = sum(1 for f in result.findings if f.outcome == VERIFIED)
        for f in result.findings:
            if f.outcome != VERIFIED:
                opened = f" -> challenge {f.challenge_id}" if f.challenge_id else ""
                console.print(f"{self.what} of {f.where()}: {f.outcome} {f.reason} "
                              f"{f.detail[:200]}{opened}", highlight=False, markup=False)
        if checked:
            console.print(f"{self.what}: {checked} sampled receipts verified", highlight=False)
        tmp = self.cursor_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.auditor.cursor.to_json()))
        tmp.replace(self.cursor_file)


def _log_id(rt: Any, name: str) -> int:
    from ledger.chain import resolve_log_id

    return resolve_log_id(rt.contract, name, from_block=rt.chain.deployment_block,
                          curated_log_id=rt.chain.curated_log_id)


def _audit_challenger(rt: Any, committee: VerifierCommittee) -> tuple[Any, Callable[..., int]]:
    """The deployment's NodeRegistry, and ``open_challenge(bundle, reason)`` for the audits:
    a committee challenge against the node that signed the bundle, bonded by this verifier."""
    from committee.challenges import open_committee_challenge
    from inference_node.challenges import challenged_receipt
    from inference_node.receipts import ReceiptDomain
    from inference_node.registry import NodeRegistry

    registry = NodeRegistry(rt.contract.w3, committee.value("registry"),
                            from_block=rt.chain.deployment_block)
    here = ReceiptDomain(rt.contract.w3.eth.chain_id, rt.contract.address.lower())

    def open_challenge(bundle: dict, reason: str) -> int:
        return open_committee_challenge(challenged_receipt(bundle), f"random audit: {reason}",
                                        committee=committee, registry=registry,
                                        content=rt.content, domain=here).id

    return registry, open_challenge


def _read_cursor(cursor_file: Path) -> Any:
    from committee.audits import AuditCursor

    return AuditCursor.from_json(cursor_file.read_bytes()) if cursor_file.exists() else None


def _auditor(rt: Any, committee: VerifierCommittee, judge_evidence: Any, rate_bps: int,
             cursor_file: Path, key: str | None) -> _PersistentAuditor:
    """The receipt-log auditor; with ``key`` (the verifier's), it publishes its reports."""
    from functools import partial

    from committee.audit_reports import AuditPublisher
    from committee.audits import Auditor
    from inference_node.bundle_sources import fetch_bundle
    from ledger.chain import LedgerContract

    publisher = None
    if key is not None:
        contract = LedgerContract(rt.contract.w3, rt.contract.address, rt.contract.abi, key)
        # reports not published yet, kept across restarts beside the cursor they follow
        publisher = AuditPublisher(rt.store, rt.content, contract, rate_bps, cursor_file.with_name(
            f"{cursor_file.stem}-reports-{contract.account.address.lower()}.json"))

    registry, open_challenge = _audit_challenger(rt, committee)
    # nodes serve their users' bundles to registered verifiers, who sign their reads
    return _PersistentAuditor(Auditor(rt.contract, registry, rt.content,
                                      from_block=rt.chain.deployment_block,
                                      judge_evidence=judge_evidence,
                                      open_challenge=open_challenge, rate_bps=rate_bps,
                                      cursor=_read_cursor(cursor_file),
                                      fetch=partial(fetch_bundle, account=committee.account)),
                              cursor_file, publisher=publisher)


def _evaluation_auditor(rt: Any, committee: VerifierCommittee, judge_evidence: Any,
                        rate_bps: int, logs: list[int], named: list[str], cursor_file: Path
                        ) -> _PersistentAuditor:
    from committee.evaluation_audits import EvaluationAuditor

    _, open_challenge = _audit_challenger(rt, committee)
    auditor = EvaluationAuditor(rt.contract, rt.content, from_block=rt.chain.deployment_block,
                                logs=logs, named=named, judge_evidence=judge_evidence,
                                open_challenge=open_challenge, rate_bps=rate_bps,
                                cursor=_read_cursor(cursor_file))
    return _PersistentAuditor(auditor, cursor_file, "evaluation audit")


@app.command()
def aggregate(
    ctx: typer.Context,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on.")
                    ] = DEFAULT_AGGREGATOR_PORT,
    interval: Annotated[float, typer.Option(min=0.2, help="Seconds between settlement passes.")
                        ] = 2.0,
    finalize: Annotated[bool, typer.Option(help="Also finalize settled challenges when their "
                                                "appeal window is over, and claim the signers' "
                                                "rewards.")] = True,
    key_env: KeyEnv = KEY_ENV,
    account: Account_ = None,
) -> None:
    """Collect signed verdicts over HTTP (POST /v1/verdicts), check each against the
    committee, and settle a challenge with one aggregate signature once signers hold two
    thirds of the stake; likewise attest the root of a reward epoch (POST /v1/roots). Stops
    on SIGINT/SIGTERM."""
    from committee.aggregator import Aggregator, make_http_server, run_forever
    from ledger.addresses import listening_urls

    rt = _runtime(ctx)
    committee = open_committee(ctx, _key(rt, key_env, account))
    report = lambda line: console.print(line, highlight=False, markup=False)
    agg = Aggregator(committee, finalize=finalize, report=report,
                     roots=_root_pool(ctx, rt, committee, report))
    server = make_http_server(agg, host, port)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    console.print(f"aggregating verdicts for committee {committee.address} on "
                  f"{listening_urls(host, server.server_address[1])} (sender "
                  f"{committee.account.address})", highlight=False)
    stop = _stop_event()
    try:
        run_forever(agg, interval, stop)
    finally:
        server.shutdown()
    console.print("aggregator stopped")


def _root_pool(ctx: typer.Context, rt: Any, committee: VerifierCommittee,
               report: Callable[[str], None]) -> Any:
    """The reward roots' pool, its attestations sent by the aggregator's account; None when
    the deployment has no distributor."""
    from committee.rewards.distributor import RewardDistributor
    from committee.rewards.pool import RootPool

    try:
        address = os.environ.get("GYM_REWARD_DISTRIBUTOR") or _lookup(ctx, "distributor_address")
    except RuntimeError as exc:  # an older deployment
        console.print(f"collecting no reward roots: {exc}", highlight=False)
        return None
    distributor = RewardDistributor(rt.contract.w3, address)
    distributor.account = committee.account  # the aggregator's sender attests too
    return RootPool(distributor, committee, report)


@app.command()
def challenge(
    ctx: typer.Context,
    bundle_file: Annotated[Path, typer.Argument(
        help="The receipt bundle to challenge (as for `gym verify receipt`).", exists=True,
        dir_okay=False)],
    reason: Annotated[str, typer.Option(help="Why the receipt is wrong (stored with the "
                                             "evidence).")],
    key_env: KeyEnv = KEY_ENV,
    account: Account_ = None,
) -> None:
    """Open a committee challenge against the node that signed a receipt, bonding the
    committee's challenge bond (returned with a share of the node's slash if the verifiers
    uphold it, forfeited to them if they reject it). Prints the challenge id."""
    from committee.challenges import open_committee_challenge
    from inference_node.challenges import challenged_receipt
    from inference_node.receipts import ReceiptDomain
    from inference_node.registry import NodeRegistry
    from inference_node.verify import read_bundle

    challenged = challenged_receipt(read_bundle(bundle_file), what=str(bundle_file))
    rt = _runtime(ctx)
    committee = open_committee(ctx, _key(rt, key_env, account))
    registry = NodeRegistry(rt.contract.w3, _lookup(ctx, "node_registry_address"),
                            from_block=rt.chain.deployment_block)
    here = ReceiptDomain(rt.contract.w3.eth.chain_id, rt.contract.address.lower())
    bond = committee.challenge_bond()
    with console.status(f"opening the challenge (bond {format_gym(bond)})"):
        opened = open_committee_challenge(challenged, reason, committee=committee,
                                          registry=registry, content=rt.content, domain=here)
    console.print(f"committee challenge {opened.id} opened against operator {opened.operator} "
                  f"(receipt 0x{opened.receipt_hash.hex()}, evidence {opened.evidence_cid}, "
                  f"bond {format_gym(bond)})", highlight=False)
    print(opened.id)


@app.command("challenge-work")
def challenge_work(
    ctx: typer.Context,
    run: Annotated[str, typer.Argument(help="The CID of the published run entry that bans the "
                                            "peer (gym ledger show LOG N --json: entry_cid).")],
    peer: Annotated[str, typer.Argument(help="The banned peer's id (its ban must be for a "
                                             "failed work check).")],
    key_env: KeyEnv = KEY_ENV,
    account: Account_ = None,
) -> None:
    """Open a committee challenge against a staked swarm volunteer banned for a failed work
    check: its signed contribution record (which the run keeps) is challenged, the run is the
    evidence, and each verifier re-computes the step (gym verifier serve --swarm-data). Bonds
    the committee's challenge bond, as `gym verifier challenge`. Prints the challenge id."""
    from committee.work_judge import open_work_challenge
    from inference_node.registry import NodeRegistry

    rt = _runtime(ctx)
    committee = open_committee(ctx, _key(rt, key_env, account))
    registry = NodeRegistry(rt.contract.w3, _lookup(ctx, "node_registry_address"),
                            from_block=rt.chain.deployment_block)
    bond = committee.challenge_bond()
    with console.status(f"opening the challenge (bond {format_gym(bond)})"):
        opened = open_work_challenge(run, peer, committee=committee, registry=registry,
                                     content=rt.content)
    console.print(f"committee challenge {opened.id} opened against volunteer {opened.operator} "
                  f"(peer {peer}, record 0x{opened.record_hash.hex()} signed by "
                  f"{opened.contributor}, evidence {opened.evidence_cid}, bond "
                  f"{format_gym(bond)})", highlight=False)
    print(opened.id)


__all__ = ["GYM", "app"]
