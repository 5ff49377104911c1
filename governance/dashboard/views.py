"""What the pages and the JSON API show: proposals from the index, with what only the chain
knows now (state, quorum, the clock), and the proposal's actions decoded and verified; what
one account may do on a proposal (``voter_status``: vote, or why not, or how it voted); the
proposer's reason as paragraphs (``reason_paragraphs``); and the proposal's measured evidence
(``proposal_evidence``: each evaluation's verdict, figures per seed, badge and command)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

from eth_utils import to_checksum_address

from contracts.gym_token import format_gym
from governance.client import ProposalState, VoteType
from governance.curation import document_cid_of
from governance.dashboard.curation import LeafCheck, ProposedAction, check_leaf, decode_action
from governance.dashboard.evidence import LedgerReader, read_evidence
from governance.dashboard.indexer import IndexedProposal, IndexedVote
from governance.dashboard.runtime import DashboardRuntime
from governance.evidence import Evidence, task_line
from ledger.evaluations import effect


@dataclass
class ProposalView:
    indexed: IndexedProposal
    state: ProposalState
    quorum: int  # For + Abstain needed
    quorum_final: bool  # False while the snapshot is ahead: then it is today's quorum
    now: int  # chain time the view was made at
    actions: list[ProposedAction] = field(default_factory=list)
    checks: list[LeafCheck] = field(default_factory=list)

    @property
    def proposal_id(self) -> int:
        return self.indexed.proposal_id

    @property
    def number(self) -> int:
        return self.indexed.number

    @property
    def quorum_reached(self) -> bool:
        return self.indexed.votes_for + self.indexed.votes_abstain >= self.quorum

    @property
    def verified(self) -> bool | None:
        """All proposed leaves verify (None: the proposal curates nothing)."""
        return all(c.verified for c in self.checks) if self.checks else None

    @property
    def wait_seconds(self) -> int | None:
        """Seconds until the next step can happen (voting opens or closes, eta), if any."""
        p = self.indexed
        target = {ProposalState.PENDING: p.snapshot, ProposalState.ACTIVE: p.deadline,
                  ProposalState.QUEUED: p.eta}.get(self.state)
        if target is None or (self.state == ProposalState.QUEUED and target <= self.now):
            return None
        return max(target - self.now + 1, 1)

    @property
    def next_step(self) -> str:
        p, state = self.indexed, self.state
        if state == ProposalState.PENDING:
            return f"voting opens after {when(p.snapshot, self.now)}"
        if state == ProposalState.ACTIVE:
            return f"voting closes at {when(p.deadline, self.now)}"
        if state == ProposalState.SUCCEEDED:
            return "passed: queue it in the timelock"
        if state == ProposalState.QUEUED:
            return ("ready: execute it" if (p.eta or 0) <= self.now
                    else f"executable at {when(p.eta or 0, self.now)}")
        return {ProposalState.DEFEATED: "defeated: nothing more happens",
                ProposalState.CANCELED: "canceled", ProposalState.EXPIRED: "expired unexecuted",
                ProposalState.EXECUTED: "executed: nothing more to do"}[state]

    def timeline(self) -> list[tuple[str, int | None]]:
        p = self.indexed
        return [("created", p.created_at), ("snapshot (voting opens after)", p.snapshot),
                ("voting ends", p.deadline), ("queued", p.queued_at), ("eta", p.eta),
                ("executed", p.executed_at), ("canceled", p.canceled_at)]


def plural(count: int, singular: str, plural_form: str | None = None) -> str:
    """``1 leaf``, ``2 leaves``: the count and its noun, singular for exactly one."""
    return f"{count} {singular if count == 1 else plural_form or singular + 's'}"


def gym(amount: int) -> str:
    """An amount as the pages show it (``format_gym``'s rounded form, ``12,345 GYM``)."""
    return format_gym(amount, rounded=True)


def when(timestamp: int | None, now: int) -> str:
    if timestamp is None:
        return "-"
    at = datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    delta = timestamp - now
    span = f"{abs(delta) // 60} min {abs(delta) % 60} s" if abs(delta) >= 60 else f"{abs(delta)} s"
    return f"{at} ({'in ' + span if delta > 0 else span + ' ago' if delta else 'now'})"


def proposal_view(dash: DashboardRuntime, proposal: IndexedProposal, now: int, *,
                  verify: bool = False) -> ProposalView:
    """State and quorum from the governor; with ``verify`` the actions decoded and every
    proposed leaf checked (``check_leaf``)."""
    functions = dash.client.governor.functions
    with dash.client.rpc_errors():
        state = ProposalState(functions.state(proposal.proposal_id).call())
        final = proposal.snapshot < now
        quorum = functions.quorum(proposal.snapshot if final else now - 1).call()
    view = ProposalView(proposal, state, quorum, final, now)
    if verify:
        ledger = dash.client.ledger
        for target, calldata in zip(proposal.targets, proposal.calldatas):
            action = decode_action(target, calldata, ledger.address, dash.client.decoder)
            view.actions.append(action)
            view.checks += [check_leaf(ledger, dash.content, dash.client.curated_log_id, leaf)
                            for leaf in action.leaves]
    return view


def proposal_json(view: ProposalView) -> dict:
    """A proposal for the JSON API: token amounts and ids as decimal strings (exact in JS)."""
    p = view.indexed
    data = {
        "id": str(p.proposal_id), "number": p.number, "title": p.title, "proposer": p.proposer,
        "state": view.state.label, "next_step": view.next_step,
        "tally": {"for": str(p.votes_for), "against": str(p.votes_against),
                  "abstain": str(p.votes_abstain)},
        "quorum": str(view.quorum), "quorum_final": view.quorum_final,
        "quorum_reached": view.quorum_reached,
        "timeline": dict(view.timeline()),
        "votes": [{"voter": v.voter, "support": v.support.name.lower(), "weight": str(v.weight),
                   "reason": v.reason, "block": v.block_number, "tx": v.tx_hash} for v in p.votes],
        "description": p.description,
    }
    if view.actions:
        data["actions"] = [{"target": a.target, "contract": a.contract, "function": a.function,
                            "summary": a.summary, "curated_log_id": a.curated_log_id}
                           for a in view.actions]
        data["verified"] = view.verified
        data["leaves"] = [leaf_json(c) for c in view.checks]
    return data


def leaf_json(check: LeafCheck) -> dict:
    leaf = check.leaf
    return {
        "source_log_id": leaf.source_log_id, "source_log": check.source_name,
        "source_size": leaf.source_size, "index": leaf.leaf_index, "entry_cid": leaf.entry_cid,
        "leaf_hash": "0x" + leaf.leaf_hash.hex(),
        "proof": ["0x" + h.hex() for h in leaf.inclusion_proof],
        "anchored_root": "0x" + check.anchored_root.hex() if check.anchored_root else None,
        "verified": check.verified, "reason": check.reason, "curated": check.curated,
        "entry": check.entry,
    }


SUPPORT_LABELS = {VoteType.FOR: "For", VoteType.AGAINST: "Against", VoteType.ABSTAIN: "Abstain"}


# -- what one account may do ------------------------------------------------------------------


@dataclass(frozen=True)
class VoterStatus:
    """What ``address`` may do on a proposal now, and the line the page says about it."""

    address: str
    can_vote: bool  # Active, votes at the snapshot, not voted yet: the vote buttons show
    weight: int  # its votes at the snapshot (while Pending: its votes now)
    vote: IndexedVote | None  # how it voted, if it did
    message: str


def voter_status(dash: DashboardRuntime, view: ProposalView, address: str) -> VoterStatus:
    """Whether ``address`` can vote on ``view``'s proposal, from the index (its vote) and the
    token (its votes at the snapshot); when it cannot, the reason in words it can act on."""
    p, state, now = view.indexed, view.state, view.now
    address = to_checksum_address(address)
    who = dash.names.label(address)
    vote = next((v for v in p.votes if v.voter == address), None)
    if vote is not None:
        said = f": \u201c{vote.reason}\u201d" if vote.reason else ""
        return VoterStatus(address, False, vote.weight, vote,
                           f"{who} voted {SUPPORT_LABELS[vote.support]} with "
                           f"{gym(vote.weight)}{said}")
    client = dash.client
    if state == ProposalState.PENDING:
        votes = client.votes(address)
        return VoterStatus(address, False, votes, None,
                           f"Voting opens with the first block after {when(p.snapshot, now)}. "
                           f"{who} will vote with the votes delegated to it at that moment "
                           f"(the snapshot; now {gym(votes)}).")
    if state != ProposalState.ACTIVE:
        return VoterStatus(address, False, 0, None, f"Voting is closed: the proposal is "
                           f"{state.label}. {who} did not vote.")
    weight = client.votes(address, p.snapshot)
    if weight:
        return VoterStatus(address, True, weight, None,
                           f"{who} votes with {gym(weight)}, its votes at the snapshot.")
    return VoterStatus(address, False, 0, None,
                       f"{who} cannot vote on this proposal: it had no votes at the snapshot "
                       f"({when(p.snapshot, now)}). {_why_no_votes(dash, address)}")


def _why_no_votes(dash: DashboardRuntime, address: str) -> str:
    client = dash.client
    votes = client.votes(address)
    if votes:
        return (f"Its {gym(votes)} of votes were delegated to it after the snapshot: they count "
                "on proposals made from now on.")
    with client.rpc_errors():
        balance = client.token.functions.balanceOf(address).call()
        delegate = client.token.functions.delegates(address).call()
    if balance and int(delegate, 16) == 0:
        return (f"It holds {gym(balance)} but has not delegated them, so they carry no votes: "
                "delegate to itself (or to someone) to vote on later proposals.")
    if balance and to_checksum_address(delegate) != address:
        return (f"It delegated its {gym(balance)} to {dash.names.label(delegate)}, who votes "
                "with them.")
    return "It holds no GYM and nobody delegated votes to it."


def voter_json(status: VoterStatus) -> dict:
    vote = status.vote
    return {"address": status.address, "can_vote": status.can_vote, "weight": str(status.weight),
            "vote": None if vote is None else {"support": vote.support.name.lower(),
                                               "weight": str(vote.weight), "reason": vote.reason},
            "message": status.message}


# -- the proposer's reason, and the evidence ----------------------------------------------------

_RECORD = re.compile(r"^(Source: publisher log |Evidence:|Proposal document: ipfs://)")


def reason_paragraphs(description: str) -> tuple[list[list[str]], list[list[str]]]:
    """The description, less its title line, as paragraphs of lines (Markdown-lite: a blank
    line ends a paragraph, a newline is a line break; the template escapes every line, so no
    HTML from a description is ever rendered). Returned split in two: the proposer's words,
    and the record `gym gov propose-curation` writes after them (source checkpoint, entry CIDs,
    the evidence it names, proposal document: ``governance.curation``), which the page folds
    with the proofs (the evidence has its own section)."""
    lines = description.strip().splitlines()
    if lines and lines[0].startswith("#"):
        lines = lines[1:]
    paragraphs: list[list[str]] = [[]]
    for line in lines:
        if line.strip():
            paragraphs[-1].append(line.rstrip())
        elif paragraphs[-1]:
            paragraphs.append([])
    paragraphs = [para for para in paragraphs if para]
    words = [para for para in paragraphs if not _RECORD.match(para[0])]
    return words, [para for para in paragraphs if _RECORD.match(para[0])]


VERDICT_WORDS = {"helps": "the library helps", "no clear effect": "the library does not "
                 "clearly help", "hurts": "the library hurts"}


@dataclass(frozen=True)
class EvidenceView:
    """One evaluation a proposal cites, as ``templates/evidence.html`` shows it: the verdict
    line first, then whether it verified, the figures per seed, the task, the command."""

    cid: str
    headline: str  # "Measured: the library helps — Mean@4 +0.250 ± 0.050 over 3 seeds"
    verdict: str | None  # helps, hurts, no clear effect; None: not evidence for this proposal
    verified: bool | None  # None: a local run (nothing to check) or not checked
    badge: str  # verified with receipts | FAILS | unverified: a local run | not checked
    status: str  # the item's CSS class: verified, failed, local, unchecked
    verify_detail: str
    cli_command: str = ""
    metric: str = ""  # "Mean@4": what ``seeds`` compare
    arm: str = ""
    baseline: str = ""
    seeds: tuple[tuple[int, float, float, float], ...] = ()  # seed, arm, baseline, difference
    pass_line: str = ""  # the same effect on Pass@k
    task: str = ""
    summary_lines: tuple[str, ...] = ()  # every line `gym gov show` prints for it


def evidence_view(evidence: Evidence) -> EvidenceView:
    """``evidence`` (``governance.evidence.Evidence``) in the words the page uses."""
    entry, verified = evidence.entry, evidence.verified
    local = entry is not None and entry.receipts == "none"
    badge, status = (("verified with receipts", "verified") if verified else
                      ("FAILS", "failed") if verified is False else
                      ("unverified: a local run", "local") if local else
                      ("not checked", "unchecked"))
    if entry is None:
        return EvidenceView(evidence.cid, "Not measured evidence for this proposal", None,
                            verified, badge, status, evidence.verify_detail)
    k = entry.sampling.k
    main = effect(entry)
    said = "Claimed, but it does not verify" if verified is False else "Measured"
    headline = (f"{said}: {VERDICT_WORDS[main.verdict]} \u2014 Mean@{k} {main.mean:+.3f} "
                f"\u00b1 {main.std:.3f} over {plural(len(main.seeds), 'seed')}")
    detail = ("a run on the evaluator's own model, without receipts: nobody else can check "
              "these figures; re-run it to see for yourself") if local else evidence.verify_detail
    return EvidenceView(
        evidence.cid, headline, main.verdict, verified, badge, status, detail,
        evidence.cli_command, f"Mean@{k}", main.arm, main.baseline,
        tuple(zip(main.seeds, main.arm_figures, main.baseline_figures, main.differences,
                  strict=True)),
        effect(entry, metric="pass_at_k").summary(k), task_line(entry),
        tuple(evidence.summary_lines))


def proposal_evidence(dash: DashboardRuntime, view: ProposalView) -> list[EvidenceView]:
    """The measured evidence a curation proposal carries: the evaluations its document names,
    each checked against the leaves its calldata appends and verified from the chain and the
    content store (``governance.dashboard.evidence``; outcomes cached per evaluation). []
    when the proposal curates nothing or names no document; ``view`` must be verified (its
    actions decoded)."""
    document_cid = document_cid_of(view.indexed.description)
    leaves = [(leaf.source_log_id, leaf.entry_cid)
              for action in view.actions if action.is_curation for leaf in action.leaves]
    if document_cid is None or not leaves:
        return []
    client = dash.client
    reader = LedgerReader.of(dash.content, client.ledger, client.from_block)
    return [evidence_view(e) for e in read_evidence(
        reader, document_cid, leaves, dash.evidence_cache, registry=client.registry,
        trusted_verifiers=dash.trusted_verifiers)]


def evidence_json(item: EvidenceView) -> dict:
    """One evaluation for the JSON API (``gym gov show --json``'s fields, and the verdict
    line, the badge and the command)."""
    return {"cid": item.cid, "verdict": item.verdict, "headline": item.headline,
            "summary": list(item.summary_lines), "verified": item.verified,
            "badge": item.badge, "detail": item.verify_detail, "command": item.cli_command}
