"""What the pages and the JSON API show: proposals from the index, with what only the chain
knows now (state, quorum, the clock), and the proposal's actions decoded and verified."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from governance.client import ProposalState, VoteType
from governance.dashboard.curation import LeafCheck, ProposedAction, check_leaf, decode_action
from governance.dashboard.indexer import IndexedProposal
from governance.dashboard.runtime import DashboardRuntime


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
        "id": str(p.proposal_id), "title": p.title, "proposer": p.proposer,
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
