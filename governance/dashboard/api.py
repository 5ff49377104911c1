"""The JSON API the page's script calls, and the devnet's ``/rpc`` proxy.

Reads: ``/health``, ``/api/proposals[/{id}]`` (one proposal with its ``evidence``: each
evaluation's cid, verdict, verdict line, summary, verified, badge, detail and command),
``/api/committee`` (verifiers and the latest challenges of the VerifierCommittee),
``/api/rewards`` (the RewardDistributor's latest epochs), ``/api/rewards/accounts/{address}``
(the account's line of each attested epoch's table, checked, with its source lines),
``/api/proposals/{id}/verify`` (422 when a proposed leaf fails),
``/api/proposals/{id}/ballot`` (typed data to sign),
``/api/proposals/{id}/voters/{address}`` (whether the account can vote, why not, or how it
voted: what the page shows the vote buttons by), ``/api/accounts/{address}``. A proposal is
named by its id or by its number in `gym gov list`. Writes, each behind the Origin and CSRF checks:
``/api/proposals/{id}/relay`` (a signed ballot, relayed), ``/api/delegate``,
``/api/proposals`` (propose), ``/api/proposals/{id}/queue|execute`` and
``/api/rewards/{epoch}/claim`` (unsigned transactions for the wallet), ``/api/devnet/advance``
and ``/rpc`` (devnet only). POST bodies are read
within ``protocol``'s limits (``JSONBodyRoute``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from governance.client import VoteType
from governance.dashboard import rpc_proxy
from governance.dashboard.ballots import ballot_for_wallet, check_voting_power, relay_ballot
from governance.dashboard.committee import committee_json
from governance.dashboard.errors import DashboardInputError
from governance.dashboard.pages import Runtime, indexed_proposal
from governance.dashboard.protocol import (
    MAX_REASON,
    AdvanceRequest,
    ClaimRequest,
    DelegateRequest,
    JSONBodyRoute,
    ProposeRequest,
    RelayRequest,
    SenderRequest,
    json_body,
    parse_address,
    parse_support,
)
from governance.dashboard.rewards import account_rewards_json, claim_tx, rewards_json
from governance.dashboard.runtime import DashboardRuntime
from governance.dashboard.transactions import (
    delegate_tx,
    execute_tx,
    propose_curation_tx,
    queue_tx,
)
from governance.dashboard.views import (
    evidence_json,
    proposal_evidence,
    proposal_json,
    proposal_view,
    voter_json,
    voter_status,
)
from governance.devnet_time import DEVNET_CHAIN_ID, NotDevnetError, advance_time

router = APIRouter(route_class=JSONBodyRoute)


def _devnet_only(rt: DashboardRuntime, what: str) -> None:
    if not rt.devnet:
        raise NotDevnetError(f"{what} exists only on the devnet (chain id {DEVNET_CHAIN_ID})")


def _input(check: Callable[[str], str], value: str) -> str:
    """``check(value)``, its ``ValueError`` turned into a 422 answer."""
    try:
        return check(value)
    except ValueError as exc:
        raise DashboardInputError(str(exc)) from None


@router.get("/health")
def health(rt: Runtime) -> dict:
    head = rt.indexer.sync()
    return {"ok": True, "chain_id": rt.chain_id, "head": head,
            "devnet": rt.devnet, "governor": rt.client.governor.address}


@router.get("/api/proposals")
def proposals(rt: Runtime) -> dict:
    rt.indexer.sync()
    now = rt.client.now()
    return {"proposals": [proposal_json(proposal_view(rt, p, now))
                          for p in rt.indexer.proposals()]}


@router.get("/api/proposals/{proposal_id}")
def proposal(rt: Runtime, proposal_id: str) -> dict:
    """The proposal with its actions, its leaves verified and its measured evidence."""
    view = proposal_view(rt, indexed_proposal(rt, proposal_id), rt.client.now(), verify=True)
    return {**proposal_json(view),
            "evidence": [evidence_json(item) for item in proposal_evidence(rt, view)]}


@router.get("/api/proposals/{proposal_id}/verify")
def verify(rt: Runtime, proposal_id: str) -> JSONResponse:
    """The dashboard's verdict on every proposed leaf: 200 when all verify, 422 when one fails."""
    view = proposal_view(rt, indexed_proposal(rt, proposal_id), rt.client.now(), verify=True)
    data = proposal_json(view)
    body = {"id": data["id"], "verified": view.verified, "leaves": data.get("leaves", [])}
    if view.verified is False:
        failed = next(c for c in view.checks if not c.verified)
        body["error"] = {"message": f"leaf {failed.leaf.leaf_index} of log "
                                    f"{failed.leaf.source_log_id} FAILED: {failed.reason}",
                         "type": "VerificationError", "code": None}
    return JSONResponse(body, 422 if view.verified is False else 200)


@router.get("/api/proposals/{proposal_id}/ballot")
def ballot(rt: Runtime, proposal_id: str, voter: str, support: str, reason: str = "") -> dict:
    """Typed data for ``eth_signTypedData_v4``; refused early if the vote could not count."""
    pid = indexed_proposal(rt, proposal_id).proposal_id
    voter, support = _input(parse_address, voter), _input(parse_support, support)
    if len(reason) > MAX_REASON:
        raise DashboardInputError(f"a reason is at most {MAX_REASON} characters")
    check_voting_power(rt.client, pid, voter, reach_snapshot=False)
    return ballot_for_wallet(rt.client, pid, support, voter, reason)


@router.get("/api/proposals/{proposal_id}/voters/{address}")
def voter(rt: Runtime, proposal_id: str, address: str) -> dict:
    """Whether ``address`` can vote on the proposal now; if not, why (Pending, closed, no votes
    at the snapshot, already voted: then how)."""
    address = _input(parse_address, address)
    view = proposal_view(rt, indexed_proposal(rt, proposal_id), rt.client.now())
    return voter_json(voter_status(rt, view, address))


@router.post("/api/proposals/{proposal_id}/relay")
def relay(rt: Runtime, proposal_id: str, body: RelayRequest) -> dict:
    pid = indexed_proposal(rt, proposal_id).proposal_id
    if rt.relayer_key is None:
        raise DashboardInputError("this dashboard relays no ballots (no relayer key): send the "
                                  "vote from your wallet, or `gym gov relay`")
    tx = relay_ballot(rt.client, rt.relayer_key, pid, body.support, body.voter,
                      bytes.fromhex(body.signature[2:]), body.reason)
    rt.indexer.sync()
    weight = next((v.weight for v in rt.indexer.proposal(pid).votes if v.voter == body.voter), 0)
    return {"tx_hash": tx.tx_hash, "block": tx.block_number, "voter": body.voter,
            "support": VoteType.parse(body.support).name.lower(), "weight": str(weight),
            "relayer": rt.relayer_address}


@router.post("/api/delegate")
def delegate(rt: Runtime, body: DelegateRequest) -> dict:
    return delegate_tx(rt.client, body.sender, body.to)


@router.post("/api/proposals")
def propose(rt: Runtime, body: ProposeRequest) -> dict:
    if rt.store is None:
        raise DashboardInputError("this dashboard has no local publisher logs to propose from")
    tx, plan = propose_curation_tx(rt.client, rt.store, rt.content, body.sender, body.log,
                                   body.indices, body.description)
    return {**tx, "document_cid": plan.document_cid, "description": plan.description}


@router.post("/api/proposals/{proposal_id}/queue")
def queue(rt: Runtime, proposal_id: str, body: SenderRequest) -> dict:
    return queue_tx(rt.client, body.sender, indexed_proposal(rt, proposal_id).proposal_id)


@router.post("/api/proposals/{proposal_id}/execute")
def execute(rt: Runtime, proposal_id: str, body: SenderRequest) -> dict:
    return execute_tx(rt.client, body.sender, indexed_proposal(rt, proposal_id).proposal_id)


@router.get("/api/committee")
def committee(rt: Runtime) -> dict:
    """The VerifierCommittee: parameters, verifiers, the latest challenges (newest first)."""
    return committee_json(rt.client)


@router.get("/api/rewards")
def rewards(rt: Runtime) -> dict:
    """The RewardDistributor: parameters and the latest epochs (newest first)."""
    return rewards_json(rt.client, rt.client.now())


@router.get("/api/rewards/accounts/{address}")
def account_rewards(rt: Runtime, address: str) -> dict:
    """``address``'s line of each attested epoch's table (fetched by its attested CID and
    checked against the attested root), with the source lines that paid it."""
    address = _input(parse_address, address)
    return account_rewards_json(rt.client, rt.content, rt.reward_tables, address,
                                rt.client.now(), rt.names.label)


@router.post("/api/rewards/{epoch}/claim")
def claim(rt: Runtime, epoch: int, body: ClaimRequest) -> dict:
    """``claim(epoch, account, amount, proof)`` for the wallet to send, the proof computed from
    the checked table."""
    if not 0 <= epoch < 2**64:
        raise DashboardInputError(f"a reward epoch is a number from 0, not {epoch}")
    return claim_tx(rt.client, rt.content, rt.reward_tables, body.sender, epoch, body.account)


@router.get("/api/accounts/{address}")
def account(rt: Runtime, address: str) -> dict:
    address = _input(parse_address, address)
    token = rt.client.token.functions
    with rt.client.rpc_errors():
        balance = token.balanceOf(address).call()
        delegate_to = token.delegates(address).call()
    return {"address": address, "balance": str(balance), "votes": str(rt.client.votes(address)),
            "delegate": None if int(delegate_to, 16) == 0 else delegate_to}


@router.post("/api/devnet/advance")
def advance(rt: Runtime, body: AdvanceRequest) -> dict:
    _devnet_only(rt, "advancing time")
    head = advance_time(rt.client.w3, body.seconds, body.blocks)
    rt.indexer.sync()
    return {"block": head["number"], "timestamp": head["timestamp"]}


@router.post("/rpc")
def rpc(rt: Runtime, request: Annotated[Any, Depends(json_body)]) -> JSONResponse:
    """Any JSON: what is not a request the proxy forwards gets a JSON-RPC error answer."""
    _devnet_only(rt, "the JSON-RPC proxy to Anvil's dev accounts")
    return JSONResponse(rpc_proxy.forward(request, rt.rpc_url, rt.client))
