"""``gym gov``: the DAO from the command line, thin over ``GovernanceClient``.

Commands take their dependencies from ``ctx.obj``, a ``governance.runtime.GovernanceRuntime``
(the ledger runtime plus the DAO of the deployment), built by the CLI root. Keys:
``GYM_VOTER_KEY`` signs; on the devnet (chain id 31337) ``--account N`` picks Anvil's public
dev account N instead. Times are the chain's (the governor's clock), shown in UTC and relative
to the chain's now, which on the devnet runs ahead of the wall clock once time was skipped.

    gym gov delegate [--to ADDR]
    gym gov propose-curation --from-log alice/math --indices 0,2 [--description TEXT]
    gym gov list
    gym gov show ID                 # ID: the full proposal id, or its number in `gym gov list`
    gym gov vote ID for|against|abstain [--reason TEXT] [--account N]
    gym gov ballot ID for --voter ADDR > ballot.json   # EIP-712 typed data to sign
    gym gov relay ID for --voter ADDR --signature 0x...   # castVoteBySig, gas paid by the relayer
    gym gov queue ID
    gym gov execute ID
    gym gov cancel ID               # the proposer withdraws a Pending proposal
    gym gov propose-params --voting-period 600 --quorum-percent 5 [--timelock-delay 120 ...]
    gym gov propose-params --reward-budget 150 --reward-split 40,30,15,15 --reward-appeal-window 10m
    gym gov propose-slash 0xOPERATOR --amount 50 --reason TEXT [--challenge 1]
    gym gov propose-appeal-window 1d [--description TEXT]   # the committee's appeal window
    gym gov propose-reverse 3 --reason TEXT   # reverse committee challenge 3's settlement
    gym gov propose-reverse-rewards 2 --reason TEXT   # reverse reward epoch 2's attested root
    gym devnet mine --seconds 301   # devnet: end the voting period / the timelock delay

The NodeRegistry that ``propose-slash`` targets is the deployment's; ``GYM_NODE_REGISTRY``
names another. ``propose-reverse`` and ``propose-appeal-window`` target the deployment's
VerifierCommittee; ``propose-reverse`` is refused when the challenge's appeal window would end
before the proposal could execute (voting delay + voting period + timelock delay from now).
The reward options of ``propose-params`` and ``propose-reverse-rewards`` target the
deployment's RewardDistributor (docs/rewards.md), ``propose-reverse-rewards`` refused likewise
when the root's appeal window ends too soon.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from contracts.devnet_accounts import DEVNET_CHAIN_ID
from contracts.gym_token import format_gym, parse_gym
from governance.errors import GovernanceError, ParameterError
from ledger.tables import print_table

if TYPE_CHECKING:  # web3 loads when a command runs, not for `--help`
    from governance.client import GovernanceClient, Proposal
    from governance.runtime import GovernanceRuntime
    from ledger.evm import TxResult

console = Console()
err_console = Console(stderr=True)


def _runtime(ctx: typer.Context) -> GovernanceRuntime:
    """The command's ``GovernanceRuntime`` (imported here: it loads pydantic-settings, which
    `gym gov --help` does not need)."""
    from governance.runtime import runtime_of

    return runtime_of(ctx)


def _resolve_id(client: GovernanceClient, text: str) -> int:
    """A proposal id, from the full id (decimal or 0x hex) or its number in `gym gov list`."""
    try:
        value = int(text, 0)
    except ValueError:
        raise GovernanceError(f"a proposal id is a number, not {text!r}") from None
    if 1 <= value <= 10**6:  # real ids are keccak hashes; small numbers are list positions
        ids = client.proposal_ids()
        if value > len(ids):
            raise GovernanceError(f"there are {len(ids)} proposals; no number {value} "
                                  "(see `gym gov list`)")
        return ids[value - 1]
    return value


def _label(client: GovernanceClient, proposal_id: int) -> str:
    """``proposal 1``: the number `gym gov list` shows and commands take (``proposal 1234...``
    for an id the list does not hold)."""
    ids = client.proposal_ids()
    return (f"proposal {ids.index(proposal_id) + 1}" if proposal_id in ids
            else f"proposal {proposal_id}")


def _when(timestamp: int, now: int) -> str:
    from governance.devnet_time import utc

    at = utc(timestamp)
    delta = timestamp - now
    span = f"{abs(delta) // 60} min {abs(delta) % 60} s" if abs(delta) >= 60 else f"{abs(delta)} s"
    return f"{at} ({'in ' + span if delta > 0 else span + ' ago' if delta else 'now'})"


def _gym(amount: int) -> str:  # tallies and vote weights, as the dashboard shows them
    return format_gym(amount, rounded=True)


def _next_step(proposal: Proposal, now: int, devnet: bool) -> str:
    """What happens next to ``proposal`` and when, as one line."""
    from governance.client import ProposalState

    state = proposal.state
    mine = (lambda seconds: f"; on the devnet: `gym devnet mine --seconds {seconds}`") if devnet \
        else (lambda seconds: "")
    if state == ProposalState.PENDING:
        return f"voting opens after {_when(proposal.snapshot, now)}"
    if state == ProposalState.ACTIVE:
        return (f"voting closes at {_when(proposal.deadline, now)}"
                + mine(max(proposal.deadline - now + 1, 1)))
    if state == ProposalState.SUCCEEDED:
        return "passed: queue it with `gym gov queue`"
    if state == ProposalState.QUEUED:
        ready = proposal.eta <= now
        return ("ready: execute it with `gym gov execute`" if ready else
                f"executable at {_when(proposal.eta, now)}" + mine(proposal.eta - now))
    return {ProposalState.DEFEATED: "defeated: nothing more happens",
            ProposalState.CANCELED: "canceled", ProposalState.EXPIRED: "expired unexecuted",
            ProposalState.EXECUTED: "nothing more to do"}[state]


def _print_status(client: GovernanceClient, proposal_id: int) -> None:
    proposal = client.proposal(proposal_id)
    now = client.now()
    devnet = client.w3.eth.chain_id == DEVNET_CHAIN_ID
    console.print(f"{_label(client, proposal_id)}: [bold]{proposal.state.label}[/bold]; "
                  f"{_next_step(proposal, now, devnet)}", highlight=False)


def _print_proposed(client: GovernanceClient, description: str, proposal_id: int, tx) -> None:
    console.print(description, highlight=False, markup=False)
    console.print(f"proposed {_label(client, proposal_id)} (id {proposal_id}; tx {tx.tx_hash})",
                  highlight=False)
    _print_status(client, proposal_id)


def _print_effects(client: GovernanceClient, proposal: Proposal) -> None:
    """What an executed proposal changed, read back from the chain."""
    from governance.proposals import format_duration, format_parameter

    actions = client.describe_actions(proposal)
    called = {action.function for action in actions}
    if called & {"appendManyFromLog", "appendFromLog"}:
        info = client.ledger.log_info(client.curated_log_id)
        console.print(f"curated library {info.name!r} (log {info.log_id}): size {info.size}, "
                      f"root 0x{info.root.hex()}", highlight=False)
    if called & {"setVotingDelay", "setVotingPeriod", "setProposalThreshold",
                 "updateQuorumNumerator", "updateDelay"}:
        params = client.governance_parameters()
        console.print("governance parameters now: " + ", ".join(
            f"{name.replace('_', ' ')} {format_parameter(name, value)}"
            for name, value in vars(params).items()), highlight=False)
    if any(a.contract == "RewardDistributor" and a.function in ("setBudget", "setAppealWindow")
           for a in actions):
        from governance.proposals import format_split

        rewards = client.reward_parameters()
        console.print(f"reward budget now {format_gym(rewards.budget)} per epoch from epoch "
                      f"{rewards.current_epoch}, split {format_split(rewards.pool_bps)}; reward "
                      f"appeal window {format_duration(rewards.appeal_window)}", highlight=False)
    for action in actions:
        if action.function == "reverse" and action.contract == "RewardDistributor":
            standing = client.reward_distributor.epoch_root(action.args["epoch"])
            console.print(f"reward epoch {standing.epoch}: root 0x{standing.root.hex()} "
                          f"{standing.status.name.lower()}", highlight=False)
        if action.function == "reverse" and action.contract == "VerifierCommittee":
            challenge = client.committee_challenge(action.args["challengeId"])
            slots = {slot.index: slot for slot in client.committee_slots()}
            stakes = ", ".join(f"slot {i} ({slots[i].verifier}) {format_gym(slots[i].stake)}"
                               for i in challenge.signers if i in slots)
            console.print(f"committee challenge {challenge.challenge_id}: "
                          f"{challenge.status.label}; signers' stakes now {stakes}",
                          highlight=False)
        if action.function == "setAppealWindow" and action.contract == "VerifierCommittee":
            console.print("committee appeal window now "
                          f"{format_duration(client.committee.appeal_window())}", highlight=False)
        if action.function == "slash":
            node = client.node(action.args["operator"])
            console.print(f"node {node.operator}: stake now {format_gym(node.stake)}",
                          highlight=False)


app = typer.Typer(help="The DAO: propose curations, parameter changes, slashing and "
                       "committee reversals; vote, queue, execute, cancel.",
                  no_args_is_help=True)

AccountOption = Annotated[int | None, typer.Option(
    "--account", "--key-index",
    help="Devnet only: sign with Anvil's public account N (default: GYM_VOTER_KEY).")]
ProposalArgument = Annotated[str, typer.Argument(help="Id or list number.")]
SupportArgument = Annotated[str, typer.Argument(help="for, against or abstain.")]
VoterOption = Annotated[str, typer.Option(help="The voter's address.")]


@app.command()
def delegate(
    ctx: typer.Context,
    to: Annotated[str | None, typer.Option(help="Address to delegate to (default: yourself).")] = None,
    account: AccountOption = None,
) -> None:
    """Delegate your GYM votes (to yourself by default): only delegated tokens vote."""
    client = _runtime(ctx).client(account)
    tx = client.delegate(to)
    who = client.account.address
    console.print(f"{who} delegated to {to or 'itself'}; votes of {to or who} now "
                  f"{_gym(client.votes(to or who))} (tx {tx.tx_hash})", highlight=False)


@app.command("propose-curation")
def propose_curation(
    ctx: typer.Context,
    from_log: Annotated[str, typer.Option(
        "--from-log", help="The publisher log to curate from: its name or on-chain id. A log "
                           "in the local store is read there; any other published log is "
                           "read from the chain and the content endpoint (GYM_IPFS_API).")],
    indices: Annotated[str, typer.Option(help="Leaf indices, comma-separated: 0,1,2.")],
    description: Annotated[str, typer.Option(help="Why these entries belong in the library.")] = "",
    evidence: Annotated[list[str] | None, typer.Option(
        help="The CID of an evaluation of exactly these entries (`gym eval --library-log LOG "
             "--publish ...` prints it): voters see its measured effect. Repeatable.")] = None,
    account: AccountOption = None,
) -> None:
    """Propose to append leaves of an anchored publisher log to the curated library, with the
    evaluations that measured what they do (--evidence)."""
    try:
        wanted = [int(part) for part in indices.split(",") if part.strip()]
    except ValueError:
        raise GovernanceError(f"--indices is comma-separated leaf numbers, not {indices!r}") from None
    rt = _runtime(ctx)
    client = rt.client(account)
    if rt.ledger.store.has_log(from_log):  # a cache: any published log is read from chain
        plan = client.build_curation(rt.ledger.store, rt.ledger.content, from_log, wanted,
                                     description, evidence=evidence or ())
    else:
        with _replay_progress(from_log) as progress:
            plan = client.build_curation_from_chain(rt.ledger.content, from_log, wanted,
                                                    description, progress=progress,
                                                    evidence=evidence or ())
    proposal_id, tx = client.propose(plan)
    _print_proposed(client, plan.description, proposal_id, tx)


@contextmanager
def _replay_progress(log: str):
    """A progress bar over the leaves of ``log`` replayed from the chain and the endpoint."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    with Progress(TextColumn(f"reading log {log} from the chain and the content endpoint"),
                  BarColumn(), MofNCompleteColumn(), console=err_console, transient=True,
                  disable=not err_console.is_terminal) as bar:
        task = bar.add_task("replay", total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


@app.command("propose-params")
def propose_params(
    ctx: typer.Context,
    voting_delay: Annotated[int | None, typer.Option(
        help="Seconds from a proposal to its snapshot, when voting opens.")] = None,
    voting_period: Annotated[int | None, typer.Option(
        help="Seconds voting stays open (at least 1).")] = None,
    proposal_threshold: Annotated[str | None, typer.Option(
        help="GYM of votes a proposer needs, e.g. 10 or 0.5.")] = None,
    quorum_percent: Annotated[int | None, typer.Option(
        help="Percent of the supply (1..100) that For + Abstain must reach.")] = None,
    timelock_delay: Annotated[int | None, typer.Option(
        help="Seconds a passed proposal waits in the timelock before it can execute.")] = None,
    reward_budget: Annotated[str | None, typer.Option(
        help="GYM the RewardDistributor pays per reward epoch, e.g. 150, from the epoch the "
             "proposal executes in.")] = None,
    reward_split: Annotated[str | None, typer.Option(
        help="The budget's split into the data, compute, verification and availability "
             "pools: percent summing to 100 (40,30,15,15) or basis points summing to "
             "10000.")] = None,
    reward_appeal_window: Annotated[str | None, typer.Option(
        metavar="SECONDS_OR_DURATION",
        help="How long after an attestation the DAO may reverse a reward root: seconds or "
             "30s, 5m, 2h, 1d (at most 7d; for roots attested after execution).")] = None,
    description: Annotated[str, typer.Option(help="Why the change is wanted.")] = "",
    account: AccountOption = None,
) -> None:
    """Propose to change the DAO's own parameters or the reward distributor's (executed by
    the timelock).

    Each given option becomes one action: the governor's setVotingDelay, setVotingPeriod,
    setProposalThreshold or updateQuorumNumerator, the timelock's updateDelay, the
    RewardDistributor's setBudget (budget and split together) or setAppealWindow. Values are
    checked before anything is sent; the description says what changes from what.
    """
    from governance.proposals import parse_duration, parse_split

    client = _runtime(ctx).client(account)
    threshold = (None if proposal_threshold is None
                 else parse_gym(proposal_threshold, "--proposal-threshold", ParameterError))
    budget = (None if reward_budget is None
              else parse_gym(reward_budget, "--reward-budget", ParameterError))
    split = None if reward_split is None else parse_split(reward_split)
    window = (None if reward_appeal_window is None
              else parse_duration(reward_appeal_window, "the reward appeal window"))
    plan = client.build_params_change(
        voting_delay=voting_delay, voting_period=voting_period, proposal_threshold=threshold,
        quorum_numerator=quorum_percent, timelock_delay=timelock_delay, reward_budget=budget,
        reward_split=split, reward_appeal_window=window, description=description)
    proposal_id, tx = client.propose(plan)
    _print_proposed(client, plan.description, proposal_id, tx)


@app.command("propose-slash")
def propose_slash(
    ctx: typer.Context,
    node: Annotated[str, typer.Argument(help="The node's operator address (0x...).")],
    amount: Annotated[str, typer.Option(help="GYM to take from the node's stake, e.g. 50.")],
    reason: Annotated[str, typer.Option(help="Why: what the node did (voters read this).")],
    challenge: Annotated[int | None, typer.Option(
        help="The NodeRegistry challenge this answers (default: the node's one open challenge).")
    ] = None,
    beneficiary: Annotated[str | None, typer.Option(
        help="Who receives the slashed GYM: an address, or 'challenger' (default: the DAO "
             "timelock, its treasury).")] = None,
    account: AccountOption = None,
) -> None:
    """Propose to slash a node's stake in the NodeRegistry (only the timelock can slash).

    Refused before anything is sent: an unknown node, an amount above its stake, a challenge
    that is unknown, against another node or dismissed.
    """
    client = _runtime(ctx).client(account)
    plan = client.build_slash(node, parse_gym(amount, "--amount", ParameterError), reason,
                              challenge_id=challenge, beneficiary=beneficiary)
    proposal_id, tx = client.propose(plan)
    _print_proposed(client, plan.description, proposal_id, tx)


@app.command("propose-reverse")
def propose_reverse(
    ctx: typer.Context,
    challenge: Annotated[int, typer.Argument(help="The committee challenge id.")],
    reason: Annotated[str, typer.Option(help="Why the settlement is wrong (voters read it).")],
    account: AccountOption = None,
) -> None:
    """Propose to reverse a VerifierCommittee settlement (slashes the verifiers that signed).

    Refused before anything is sent: an unknown challenge, one that is not Settled, and one
    whose appeal window ends before a proposal made now could execute (voting delay + voting
    period + timelock delay): raise the window first with propose-appeal-window.
    """
    client = _runtime(ctx).client(account)
    plan = client.build_reverse(challenge, reason)
    proposal_id, tx = client.propose(plan)
    _print_proposed(client, plan.description, proposal_id, tx)


@app.command("propose-reverse-rewards")
def propose_reverse_rewards(
    ctx: typer.Context,
    epoch: Annotated[int, typer.Argument(min=0, help="The reward epoch whose attested root to "
                                         "reverse (`gym rewards status`).")],
    reason: Annotated[str, typer.Option(help="Why the epoch's table is wrong (voters read it).")],
    account: AccountOption = None,
) -> None:
    """Propose to reverse a reward epoch's attested root on the RewardDistributor (nothing is
    paid from it; the epoch may be attested again).

    Refused before anything is sent: an epoch with no attested root, and one whose appeal
    window (fixed when it was attested) ends before a proposal made now could execute.
    """
    client = _runtime(ctx).client(account)
    plan = client.build_root_reverse(epoch, reason)
    proposal_id, tx = client.propose(plan)
    _print_proposed(client, plan.description, proposal_id, tx)


@app.command("propose-appeal-window")
def propose_appeal_window(
    ctx: typer.Context,
    window: Annotated[str, typer.Argument(
        metavar="SECONDS_OR_DURATION", help="Seconds, or a duration: 30s, 5m, 2h, 1d, 1h30m.")],
    description: Annotated[str, typer.Option(help="Why the change is wanted.")] = "",
    account: AccountOption = None,
) -> None:
    """Propose to set the VerifierCommittee's appeal window (at most MAX_APPEAL_WINDOW)."""
    from governance.proposals import parse_duration
    client = _runtime(ctx).client(account)
    plan = client.build_appeal_window(parse_duration(window, "the appeal window"), description)
    proposal_id, tx = client.propose(plan)
    _print_proposed(client, plan.description, proposal_id, tx)


@app.command("list")
def list_proposals(ctx: typer.Context,
                   as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False
                   ) -> None:
    """Every proposal with its state and tally."""
    client = _runtime(ctx).client()
    proposals = client.proposals()
    if as_json:
        typer.echo(json.dumps({"chain_time": client.now(), "proposals": [
            {"n": n, "id": str(p.proposal_id), "title": p.title, "state": p.state.label,
             "for": str(p.votes_for), "against": str(p.votes_against),
             "abstain": str(p.votes_abstain), "quorum": str(p.quorum), "deadline": p.deadline,
             "actions": [a.short for a in client.describe_actions(p)]}
            for n, p in enumerate(proposals, 1)]}, indent=2))
        return
    if not proposals:
        console.print("no proposals yet: `gym gov propose-curation`")
        return
    now = client.now()
    table = Table("#", "title", "state", "for", "against", "abstain", "quorum", "deadline",
                  "actions", title=f"proposals (chain time {_when(now, now)})")
    for n, p in enumerate(proposals, 1):
        actions = "; ".join(action.short for action in client.describe_actions(p))
        table.add_row(str(n), p.title, p.state.label, _gym(p.votes_for), _gym(p.votes_against),
                      _gym(p.votes_abstain), _gym(p.quorum), _when(p.deadline, now), actions)
    print_table(table, console)


@app.command()
def show(ctx: typer.Context, proposal: ProposalArgument,
         as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
         check: Annotated[bool, typer.Option(
             help="Re-check each evaluation the proposal names from the chain and the content "
                  "endpoint (every receipt and figure; --no-check shows them unchecked).")
         ] = True,
         verifier: Annotated[list[str] | None, typer.Option(
             help="Run this verifier when an evaluation names it (python:module:function is "
                  "code: only math and exact run unless named). Repeatable.")] = None) -> None:
    """One proposal: its evidence (the measured effect of what it adds, and whether that
    evidence verified), description, its actions decoded, state, tally, quorum, timeline."""
    from governance.evidence import EvidenceError, proposal_evidence

    rt = _runtime(ctx)
    client = rt.client()
    p = client.proposal(_resolve_id(client, proposal))
    actions = client.describe_actions(p)
    now = client.now()
    try:
        with err_console.status("checking the proposal's evidence"):
            evidence = proposal_evidence(rt.ledger, p.document_cid, check=check,
                                         registry=getattr(client, "registry", None),
                                         trusted_verifiers=set(verifier or ()),
                                         leaves=_curated_leaves(client, p))
    except EvidenceError as exc:
        evidence, evidence_error = [], str(exc)
    else:
        evidence_error = None
    if as_json:
        console.print_json(json.dumps({
            "id": str(p.proposal_id), "proposer": p.proposer, "state": p.state.label,
            "title": p.title, "document_cid": p.document_cid, "snapshot": p.snapshot,
            "deadline": p.deadline, "eta": p.eta, "for": str(p.votes_for),
            "against": str(p.votes_against), "abstain": str(p.votes_abstain),
            "quorum": str(p.quorum), "description": p.description,
            "evidence": [{"cid": e.cid, "summary": e.summary_lines, "verdict": e.verdict,
                          "verified": e.verified, "detail": e.verify_detail}
                         for e in evidence],
            "actions": [{"target": a.target, "contract": a.contract, "function": a.function,
                         "summary": a.summary} for a in actions]}))
        return
    _print_evidence(p, evidence, evidence_error)
    console.print(p.description, highlight=False, markup=False)
    console.print("\nactions:", highlight=False)
    for n, action in enumerate(actions, 1):
        console.print(f"  {n}. {action.summary}", highlight=False, markup=False)
    console.print(f"\nid {p.proposal_id}\nproposer {p.proposer}\nstate {p.state.label}\n"
                  f"for {_gym(p.votes_for)}, against {_gym(p.votes_against)}, abstain "
                  f"{_gym(p.votes_abstain)}; quorum {_gym(p.quorum)} (for + abstain)\n"
                  f"snapshot {_when(p.snapshot, now)}\ndeadline {_when(p.deadline, now)}"
                  + (f"\neta {_when(p.eta, now)}" if p.eta else ""), highlight=False)
    _print_status(client, p.proposal_id)


def _curated_leaves(client: GovernanceClient, p) -> list[tuple[int, str]]:
    """``(source log id, entry CID)`` of every leaf the proposal's calldata appends: what its
    document, and so its evidence, must be about (``governance.evidence``)."""
    from governance.dashboard.curation import decode_action

    leaves = []
    for target, calldata in zip(p.targets, p.calldatas, strict=True):
        action = decode_action(target, calldata, client.ledger.address, client.decoder)
        leaves += [(leaf.source_log_id, leaf.entry_cid) for leaf in action.leaves or ()]
    return leaves


def _print_evidence(p, evidence: list, error: str | None) -> None:
    """The measured effect first: what a voter should read before the description."""
    if p.document_cid is None:
        return
    if error is not None:
        console.print(f"evidence: cannot be read: {error}\n", highlight=False, markup=False)
        return
    if not evidence:
        console.print("evidence: none. Nothing measured says whether these entries help "
                      "(`gym eval --library-log LOG --publish ...` measures it).\n",
                      highlight=False)
        return
    for e in evidence:
        status = {True: "verified", False: "does NOT verify", None: "not checked"}[e.verified]
        console.print(f"evidence {e.cid} ({status}; {e.verify_detail})", highlight=False,
                      markup=False)
        for line in e.summary_lines:
            console.print(f"  {line}", highlight=False, markup=False)
        if e.cli_command:
            console.print(f"  re-run generations yourself: {e.cli_command}", highlight=False,
                          markup=False)
    console.print("")


@app.command()
def vote(
    ctx: typer.Context,
    proposal: ProposalArgument,
    support: SupportArgument,
    reason: Annotated[str, typer.Option(help="Recorded on chain with the vote.")] = "",
    account: AccountOption = None,
) -> None:
    """Vote on an Active proposal with your own key."""
    from governance.client import VoteType
    client = _runtime(ctx).client(account)
    proposal_id = _resolve_id(client, proposal)
    choice = VoteType.parse(support)
    tx = client.vote(proposal_id, choice, reason)
    snapshot = client.proposal(proposal_id).snapshot
    console.print(f"{client.account.address} voted {choice.name.lower()} with "
                  f"{_gym(client.votes(client.account.address, snapshot))} (tx {tx.tx_hash})",
                  highlight=False)
    _print_status(client, proposal_id)


@app.command()
def ballot(
    ctx: typer.Context,
    proposal: ProposalArgument,
    support: SupportArgument,
    voter: VoterOption,
) -> None:
    """Print the EIP-712 ballot for a wallet to sign; then `gym gov relay` the signature.

    The JSON is eth_signTypedData_v4's, uint256 values as decimal strings; sign it without a
    browser with `cast wallet sign --data --from-file ballot.json --private-key KEY`.
    """
    client = _runtime(ctx).client()
    typed = client.ballot_typed_data(_resolve_id(client, proposal), support, voter)
    print(json.dumps(typed, indent=2))


@app.command()
def relay(
    ctx: typer.Context,
    proposal: ProposalArgument,
    support: SupportArgument,
    voter: VoterOption,
    signature: Annotated[str, typer.Option(help="The voter's signature of the ballot (0x hex).")],
    account: AccountOption = None,
) -> None:
    """Submit a voter's signed ballot (castVoteBySig); your key pays the gas, theirs voted."""
    from governance.client import VoteType
    client = _runtime(ctx).client(account)
    proposal_id = _resolve_id(client, proposal)
    tx = client.cast_vote_by_sig(proposal_id, support, voter, signature)
    console.print(f"relayed {voter}'s vote {VoteType.parse(support).name.lower()} "
                  f"(tx {tx.tx_hash})", highlight=False)
    _print_status(client, proposal_id)


def _send(ctx: typer.Context, proposal: str, account: int | None,
          send: str, done: str
          ) -> tuple[GovernanceClient, int]:
    """Send ``proposal``'s transaction with the client's method ``send`` (queue, execute,
    cancel) and print ``done`` with its hash."""
    client = _runtime(ctx).client(account)
    proposal_id = _resolve_id(client, proposal)
    tx: TxResult = getattr(client, send)(proposal_id)
    console.print(f"{done} (tx {tx.tx_hash})", highlight=False)
    return client, proposal_id


@app.command()
def queue(ctx: typer.Context, proposal: ProposalArgument, account: AccountOption = None) -> None:
    """Queue a Succeeded proposal in the timelock."""
    _print_status(*_send(ctx, proposal, account, "queue", "queued"))


@app.command()
def execute(ctx: typer.Context, proposal: ProposalArgument, account: AccountOption = None
            ) -> None:
    """Execute a Queued proposal whose timelock delay has passed."""
    client, proposal_id = _send(ctx, proposal, account, "execute", "executed")
    _print_effects(client, client.proposal(proposal_id))
    _print_status(client, proposal_id)


@app.command()
def cancel(ctx: typer.Context, proposal: ProposalArgument, account: AccountOption = None) -> None:
    """Withdraw your own proposal while it is Pending, before voting opens."""
    _print_status(*_send(ctx, proposal, account, "cancel", "canceled"))
