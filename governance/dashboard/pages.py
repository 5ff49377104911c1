"""Server-rendered pages: the proposal list, one proposal with its verified entries, the
curated library as the chain holds it, the verifier committee (its verifiers and
challenges), and the rewards (the distributor's epochs; one account's lines and claims).

A proposal is addressed by its full id or by its number in `gym gov list` (``/proposals/3``),
read as `gym gov` reads an argument: a number from 1 to ``MAX_PROPOSAL_NUMBER`` is a list
number (real ids are keccak hashes), anything else an id. The page leads with the decision
(what the entries say, the evidence, the proposer's reason, state and tally, the vote) and
folds the proofs and hashes below. Addresses read as names (``names``), the full address on
hover and behind a copy button."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from governance.client import ProposalState
from governance.dashboard.committee import committee_json
from governance.dashboard.curation import check_curated_leaves
from governance.dashboard.errors import DashboardInputError, UnknownProposalError
from governance.dashboard.indexer import IndexedProposal
from governance.dashboard.protocol import parse_address
from governance.dashboard.rewards import account_rewards_json, rewards_json
from governance.dashboard.runtime import DashboardRuntime
from governance.dashboard.views import (
    SUPPORT_LABELS,
    gym,
    plural,
    proposal_evidence,
    proposal_view,
    reason_paragraphs,
    when,
)
from governance.proposals import format_duration, format_split
from ledger.rfc9162 import root as merkle_root

router = APIRouter()
templates = Jinja2Templates(directory=Path(__file__).resolve().parent / "templates")


def runtime_of(request: Request) -> DashboardRuntime:
    return request.app.state.runtime


Runtime = Annotated[DashboardRuntime, Depends(runtime_of)]
MAX_PROPOSAL_NUMBER = 10**6  # as `gym gov` reads an id (governance/cli.py, _resolve_id)


def parse_proposal_id(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise DashboardInputError(f"a proposal id is a number, not {text[:80]!r}") from None
    if not 0 <= value < 2**256:
        raise DashboardInputError("a proposal id is a uint256")
    return value


def indexed_proposal(rt: DashboardRuntime, text: str) -> IndexedProposal:
    """The proposal with id, or `gym gov list` number, ``text``, after syncing the index;
    ``UnknownProposalError`` if none."""
    proposal_id = parse_proposal_id(text)
    rt.indexer.sync()
    if 1 <= proposal_id <= MAX_PROPOSAL_NUMBER:
        proposal = rt.indexer.numbered(proposal_id)
        if proposal is None:
            count = len(rt.indexer.proposals())
            raise UnknownProposalError(
                f"no proposal {proposal_id}: the governor has {plural(count, 'proposal')}"
                + (f", numbered 1 to {count} as `gym gov list` numbers them" if count else ""))
        return proposal
    proposal = rt.indexer.proposal(proposal_id)
    if proposal is None:
        raise UnknownProposalError(f"no proposal {proposal_id} on governor "
                                   f"{rt.client.governor.address}")
    return proposal


def _render(request: Request, rt: DashboardRuntime, template: str, context: dict
            ) -> HTMLResponse:
    now = rt.client.now()
    base = {"rt": rt, "head": rt.indexer.last_block, "now": now, "chain_id": rt.chain_id,
            "csrf_token": request.state.csrf_token, "gym": gym, "plural": plural,
            "addr": rt.names.html, "when": lambda t: when(t, now), "States": ProposalState,
            "support_labels": SUPPORT_LABELS}
    return templates.TemplateResponse(request, template, {**base, **context})


@router.get("/", response_class=HTMLResponse)
def index(request: Request, rt: Runtime) -> HTMLResponse:
    rt.indexer.sync()
    now = rt.client.now()
    views = [proposal_view(rt, p, now) for p in reversed(rt.indexer.proposals())]
    logs = [log for log in rt.store.list_logs() if log.chain_log_id is not None] \
        if rt.store is not None else []
    return _render(request, rt, "index.html", {"views": views, "logs": logs})


@router.get("/proposals/{proposal_id}", response_class=HTMLResponse)
def proposal_page(request: Request, rt: Runtime, proposal_id: str) -> HTMLResponse:
    proposal = indexed_proposal(rt, proposal_id)
    view = proposal_view(rt, proposal, rt.client.now(), verify=True)
    words, record = reason_paragraphs(proposal.description)
    return _render(request, rt, "proposal.html", {
        "view": view, "p": proposal, "reason": words, "record": record,
        "evidence": proposal_evidence(rt, view)})


@router.get("/library", response_class=HTMLResponse)
def library(request: Request, rt: Runtime) -> HTMLResponse:
    """The curated library: each leaf's entry re-hashed, and the RFC 9162 root recomputed from
    the appended leaves and compared with the root the contract computed on chain."""
    rt.indexer.sync()
    client = rt.client
    info = client.ledger.log_info(client.curated_log_id)
    leaves = rt.indexer.curated_leaves()
    recomputed = merkle_root([leaf.leaf_hash for leaf in leaves])
    by_tx = {p.executed_tx: p for p in rt.indexer.proposals() if p.executed_tx}
    rows = [(check, by_tx.get(check.leaf.tx_hash))
            for check in check_curated_leaves(rt.content, leaves, info.size, info.root)]
    root_ok = recomputed == info.root and len(leaves) == info.size
    return _render(request, rt, "library.html",
                   {"info": info, "rows": rows, "recomputed": recomputed, "root_ok": root_ok})


@router.get("/committee", response_class=HTMLResponse)
def committee_page(request: Request, rt: Runtime) -> HTMLResponse:
    """The verifier committee: its verifiers with their stakes, and its latest challenges with
    the settled verdict, the appeal window and, once finalized, what moved."""
    rt.indexer.sync()
    return _render(request, rt, "committee.html", {"c": committee_json(rt.client),
                                                   "duration": format_duration})


@router.get("/rewards", response_class=HTMLResponse)
def rewards_page(request: Request, rt: Runtime, account: str = "") -> HTMLResponse:
    """The reward distributor's latest epochs; with ``?account=`` (the wallet's, or one
    entered) that account's line of each attested table, where it came from, and a Claim
    button once the root is final."""
    rt.indexer.sync()
    now = rt.client.now()
    mine = None
    if account.strip():
        try:
            address = parse_address(account.strip())
        except ValueError as exc:
            raise DashboardInputError(str(exc)) from None
        mine = account_rewards_json(rt.client, rt.content, rt.reward_tables, address, now,
                                    rt.names.label)
    return _render(request, rt, "rewards.html", {
        "r": rewards_json(rt.client, now), "mine": mine, "account": account.strip(),
        "duration": format_duration, "split": format_split})
