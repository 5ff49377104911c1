"""The dashboard's app through FastAPI's TestClient, against a real Anvil with the DAO deployed.

One devnet per module (``gym devnet up`` takes seconds); each test runs between an
``evm_snapshot`` and an ``evm_revert``, so every test starts from the same chain: the DAO
deployed and publisher log ``alice/math`` (3 entries) anchored.
"""

from __future__ import annotations

import doctest
import html
import json
import re
from dataclasses import dataclass, replace

import httpx
import pytest
from eth_account import Account
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from web3 import Web3

from contracts import load_artifact
from contracts.devnet_accounts import devnet_account_key
from contracts.gym_token import GYM, format_gym
from devnet.deploy import Deployment
from devnet.settings import ANVIL_DEV_KEYS
from governance import GovernanceClient, ProposalState, SourcedLeaf, VoteType
from governance.client import CurationProposal
from governance.dashboard import DashboardRuntime, decode_action
from governance.dashboard.app import create_app
from governance.dashboard.curation import APPEND_ONE_SIGNATURE
from governance.dashboard.evidence import (
    LedgerReader,
    VerificationCache,
    failure,
    read_evidence,
)
from governance.dashboard.names import address_book
from governance.dashboard.pages import templates
from governance.dashboard.rpc_proxy import ALLOWED_METHODS
from governance.dashboard.security import CsrfTokens, request_origin, served_origins
from governance.dashboard.views import evidence_view, reason_paragraphs
from governance.evidence import Evidence, summarize
from governance.proposals import ActionDecoder
from ledger import ExperienceEntry, LocalBlockStore, LogStore, Provenance, encode_entry
from ledger.chain import LedgerContract
from ledger.entries import EvaluationEntry, entry_cid
from ledger.rfc9162 import root as merkle_root

ORIGIN = "http://testserver"
NO_GYM = 7  # Anvil's account 7 holds ether but no GYM

Account.enable_unaudited_hdwallet_features()


def dev_account(index: int):
    return Account.from_mnemonic("test test test test test test test test test test test junk",
                                 account_path=f"m/44'/60'/0'/0/{index}")


def experiences(count: int) -> list[bytes]:
    return [encode_entry(ExperienceEntry(
        text=f"Rule {i}: check the units of every quantity before answering.", domain="math",
        op="add", provenance=Provenance(method="tfgrpo", base_model="SmolLM2-135M-Instruct",
                                        step=i)))
        for i in range(count)]


# -- fixtures ---------------------------------------------------------------------------------


@dataclass
class Devnet:
    deployment: Deployment
    store: LogStore
    content: LocalBlockStore
    w3: Web3

    def rpc(self, method: str, params: list | None = None):
        answer = self.w3.provider.make_request(method, params or [])
        assert "error" not in answer, answer
        return answer["result"]

    def client(self) -> GovernanceClient:
        d = self.deployment
        ledger = LedgerContract(self.w3, d.contracts["ExperienceLedger"].address,
                                load_artifact("ExperienceLedger").abi, ANVIL_DEV_KEYS[0])
        return GovernanceClient(
            self.w3, d.contracts["GymGovernor"].address, load_artifact("GymGovernor").abi,
            d.contracts["GymToken"].address, load_artifact("GymToken").abi, ledger,
            d.contracts["TimelockController"].address, load_artifact("TimelockController").abi,
            curated_log_id=d.curated_log_id, private_key=ANVIL_DEV_KEYS[0],
            from_block=d.deployment_block,
            committee_address=d.contracts["VerifierCommittee"].address,
            reward_distributor_address=d.contracts["RewardDistributor"].address)


@pytest.fixture(scope="module")
def devnet(tmp_path_factory, shared_devnet):
    """The worker's deployed devnet with alice/math published, for the whole module (each test
    reverts to this state: `dash`); reverted to the deployment at the end."""
    from ledger.publish import append_entries, publish

    base = tmp_path_factory.mktemp("dashboard-devnet")
    shared_devnet.ensure()
    try:
        deployment = Deployment.load(shared_devnet.deployment_file)
        w3 = Web3(Web3.HTTPProvider(deployment.rpc_url))
        store = LogStore(f"sqlite:///{base / 'ledger.sqlite'}")
        content = LocalBlockStore(base / "content")
        net = Devnet(deployment, store, content, w3)
        ledger = net.client().ledger
        store.create_log("alice/math")
        append_entries(store, content, "alice/math", experiences(3))
        publish(store, content, ledger, "alice/math")
        yield net
        store.engine.dispose()
    finally:
        shared_devnet.restore()


@dataclass
class Dashboard:
    http: TestClient
    token: str
    net: Devnet
    client: GovernanceClient
    runtime: DashboardRuntime

    def post(self, path: str, body: dict, **headers: str) -> httpx.Response:
        sent = {"Origin": ORIGIN, "X-CSRF-Token": self.token, **headers}
        return self.http.post(path, json=body, headers={k: v for k, v in sent.items() if v})

    def rpc(self, method: str, params: list) -> dict:
        """An EIP-1193 request as the page's DevnetProvider makes it."""
        return self.post("/rpc", {"jsonrpc": "2.0", "id": 1, "method": method,
                                  "params": params}).json()

    def send(self, tx: dict) -> str:
        """Send a transaction the API returned, as the page does (eth_sendTransaction)."""
        answer = self.rpc("eth_sendTransaction", [{k: tx[k] for k in ("from", "to", "data")}])
        assert "result" in answer, answer
        receipt = self.net.w3.eth.wait_for_transaction_receipt(answer["result"])
        assert receipt["status"] == 1
        return answer["result"]

    def vote(self, proposal_id: int, account: int, support: str, reason: str = ""
             ) -> httpx.Response:
        """Vote as the page does: typed data from the server, signed by Anvil, relayed."""
        voter = dev_account(account).address
        typed = self.http.get(f"/api/proposals/{proposal_id}/ballot",
                              params={"voter": voter, "support": support, "reason": reason})
        if typed.status_code != 200:
            return typed
        signed = self.rpc("eth_signTypedData_v4", [voter, typed.text])
        return self.post(f"/api/proposals/{proposal_id}/relay",
                         {"voter": voter, "support": support, "reason": reason,
                          "signature": signed["result"]})

    def advance(self, seconds: int) -> None:
        assert self.post("/api/devnet/advance", {"seconds": seconds}).status_code == 200


@pytest.fixture
def dash(devnet):
    snapshot = devnet.rpc("evm_snapshot")
    client = devnet.client()
    runtime = DashboardRuntime(client=client, content=devnet.content,
                               rpc_url=devnet.deployment.rpc_url, origins=(ORIGIN,),
                               relayer_key=ANVIL_DEV_KEYS[0], store=devnet.store)
    with TestClient(create_app(runtime), base_url=ORIGIN) as http:
        page = http.get("/")
        assert page.status_code == 200, page.text
        token = re.search(r'<meta name="csrf-token" content="([0-9a-f]{64})">', page.text).group(1)
        yield Dashboard(http, token, devnet, client, runtime)
    assert devnet.rpc("evm_revert", [snapshot])


def propose(dash: Dashboard, indices=(0, 2), **changes) -> tuple[int, CurationProposal]:
    plan = dash.client.build_curation(dash.net.store, dash.net.content, "alice/math",
                                      list(indices), description="Rules worth keeping.")
    if changes:
        plan = replace(plan, **changes)
    proposal_id, _ = dash.client.propose(plan)
    return proposal_id, plan


def error_of(response: httpx.Response) -> dict:
    return response.json()["error"]


# -- tests --------------------------------------------------------------------------------------


def test_package_docstring_example_runs():
    import governance.dashboard

    result = doctest.testmod(governance.dashboard, verbose=False)
    assert result.attempted > 0 and result.failed == 0


def test_csrf_tokens_bind_to_their_session_and_origins_to_the_served_ones():
    tokens = CsrfTokens()
    mine, theirs = tokens.new_session(), tokens.new_session()
    assert tokens.check(mine, tokens.token_for(mine))
    assert not tokens.check(theirs, tokens.token_for(mine))
    assert not tokens.check(None, tokens.token_for(mine)) and not tokens.check(mine, "")
    assert not CsrfTokens().check(mine, tokens.token_for(mine))  # another server start
    assert served_origins("127.0.0.1", 8600, ["https://DAO.example/proposals"]) == (
        "http://127.0.0.1:8600", "http://localhost:8600", "https://dao.example")
    assert served_origins("10.0.0.2", 80) == ("http://10.0.0.2:80",)
    assert request_origin({"origin": "http://127.0.0.1:8600"}) == "http://127.0.0.1:8600"
    assert request_origin({"referer": "http://localhost:8600/proposals/1"}) == \
        "http://localhost:8600"
    assert request_origin({"origin": "null"}) is None and request_origin({}) is None


def test_curation_calldata_decodes_back_to_its_leaves():
    leaves = tuple(SourcedLeaf(3, 5, i, bytes([i]) * 32,
                               "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku",
                               tuple(bytes([i + 1]) * 32 for _ in range(i + 1)))
                   for i in range(2))
    ledger = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
    plan = CurationProposal(ledger, 1, leaves, "", "", "alice/math")
    decoder = ActionDecoder({ledger: ("ExperienceLedger", load_artifact("ExperienceLedger").abi)})
    action = decode_action(ledger, plan.calldata, ledger, decoder)
    assert (action.function, action.curated_log_id, action.leaves) == ("appendManyFromLog", 1,
                                                                        leaves)
    assert action.summary == ("ExperienceLedger: curate 2 leaves into log 1 (leaf 0 of log 3, "
                              "leaf 1 of log 3), each proof verified on execution")
    from eth_abi import encode
    from eth_utils import keccak

    leaf = leaves[1]
    single = keccak(text=APPEND_ONE_SIGNATURE)[:4] + encode(
        ["uint256", "uint256", "uint64", "uint64", "bytes32", "bytes", "bytes32[]"],
        [1, *leaf.as_abi()[:5], list(leaf.inclusion_proof)])
    assert decode_action(ledger, single, ledger, decoder).leaves == (leaf,)
    other = decode_action("0x" + "11" * 20, plan.calldata, ledger, decoder)  # not the ledger
    assert not other.is_curation and other.function is None
    assert "unknown contract" in other.summary


@pytest.mark.anvil
def test_non_curation_actions_read_as_gym_gov_show_reads_them(dash):
    """A parameter change on the proposal page and in the API: the CLI's decoder's words."""
    period = dash.client.governor.functions.votingPeriod().call()
    plan = dash.client.build_params_change(voting_period=period + 60, description="Longer votes")
    proposal_id, _ = dash.client.propose(plan)
    expected = [a.summary for a in dash.client.describe_actions(dash.client.proposal(proposal_id))]
    assert expected and "voting period" in expected[0]
    shown = dash.http.get(f"/api/proposals/{proposal_id}").json()
    assert [a["summary"] for a in shown["actions"]] == expected
    assert shown["actions"][0]["function"] == "setVotingPeriod"
    page = dash.http.get(f"/proposals/{proposal_id}").text
    assert f'<p class="summary">{html.escape(expected[0])}</p>' in page


@pytest.mark.anvil
def test_lifecycle_through_the_api_with_tallies_equal_to_the_chain(dash):
    proposal_id, plan = propose(dash)
    listed = dash.http.get("/api/proposals").json()["proposals"]
    assert [p["id"] for p in listed] == [str(proposal_id)] and listed[0]["state"] == "Pending"

    assert dash.vote(proposal_id, 1, "for", reason="general and correct").status_code == 200
    assert dash.vote(proposal_id, 2, "against").status_code == 200  # castVoteBySig, no reason
    assert dash.vote(proposal_id, 3, "abstain", reason="unsure").status_code == 200
    dash.client.vote(proposal_id, "for", key=ANVIL_DEV_KEYS[4])  # outside the dashboard

    dash.runtime.indexer.sync()
    indexed = dash.runtime.indexer.proposal(proposal_id)
    on_chain = dash.client.governor.functions.proposalVotes(proposal_id).call()
    assert (indexed.votes_against, indexed.votes_for, indexed.votes_abstain) == tuple(on_chain)
    assert tuple(on_chain) == (1000 * 10**18, 2000 * 10**18, 1000 * 10**18)
    assert [(v.voter, v.support, v.reason) for v in indexed.votes] == [
        (dev_account(1).address, VoteType.FOR, "general and correct"),
        (dev_account(2).address, VoteType.AGAINST, ""),
        (dev_account(3).address, VoteType.ABSTAIN, "unsure"),
        (dev_account(4).address, VoteType.FOR, "")]
    shown = dash.http.get(f"/api/proposals/{proposal_id}").json()
    assert shown["tally"] == {"for": str(2000 * 10**18), "against": str(1000 * 10**18),
                              "abstain": str(1000 * 10**18)}
    assert shown["quorum"] == str(dash.client.governor.functions.quorum(indexed.snapshot).call())
    page = dash.http.get(f"/proposals/{proposal_id}").text
    assert "general and correct" in page and '<span id="state" class="state state-active">' in page

    queue = {"from": dev_account(4).address}
    refused = dash.post(f"/api/proposals/{proposal_id}/queue", queue)
    assert refused.status_code == 409 and error_of(refused)["code"] == \
        "GovernorUnexpectedProposalState"
    dash.advance(indexed.deadline - dash.client.now() + 1)
    assert dash.http.get("/api/proposals").json()["proposals"][0]["state"] == "Succeeded"
    dash.send(dash.post(f"/api/proposals/{proposal_id}/queue", queue).json())
    early = dash.post(f"/api/proposals/{proposal_id}/execute", queue)
    assert early.status_code == 409 and error_of(early)["code"] == \
        "TimelockUnexpectedOperationState" and "not ready" in error_of(early)["message"]
    dash.advance(dash.net.deployment.governance.timelock_min_delay + 1)
    dash.send(dash.post(f"/api/proposals/{proposal_id}/execute", queue).json())

    dash.runtime.indexer.sync()
    done = dash.runtime.indexer.proposal(proposal_id)
    assert done.eta and done.executed_at and done.executed_tx
    assert dash.client.proposal(proposal_id).state == ProposalState.EXECUTED
    info = dash.client.ledger.log_info(dash.client.curated_log_id)
    expected = [leaf.leaf_hash for leaf in plan.leaves]
    assert [leaf.leaf_hash for leaf in dash.runtime.indexer.curated_leaves()] == expected
    assert (info.size, info.root) == (2, merkle_root(expected))
    library = dash.http.get("/library").text
    assert "VERIFIED: the RFC 9162 root of the 2 appended leaves" in library
    assert library.count("<span class=\"verdict\">VERIFIED</span>") == 2
    assert "Rule 2: check the units" in library


@pytest.mark.anvil
def test_proposal_page_verifies_every_entry_against_the_anchored_root(dash):
    proposal_id, plan = propose(dash)
    page = dash.http.get(f"/proposals/{proposal_id}")
    assert page.status_code == 200
    assert "All 2 proposed entries VERIFIED" in page.text
    assert page.text.count('<span class="verdict">VERIFIED</span>') == 2
    assert "Rule 0: check the units of every quantity before answering." in page.text
    root = dash.client.ledger.root_at(plan.leaves[0].source_log_id, 3)
    assert f"0x{root.hex()}" in page.text and "alice/math (on-chain log" in page.text
    verdict = dash.http.get(f"/api/proposals/{proposal_id}/verify")
    assert verdict.status_code == 200 and verdict.json()["verified"] is True
    leaves = verdict.json()["leaves"]
    assert [(x["index"], x["source_log"], x["anchored_root"]) for x in leaves] == [
        (0, "alice/math", "0x" + root.hex()), (2, "alice/math", "0x" + root.hex())]


@pytest.mark.anvil
@pytest.mark.parametrize("forgery, reason", [
    ("proof", (r"the inclusion proof of leaf 1 does not verify against the root anchored for "
               r"log \d+ at size 3: inclusion proof leads to a different root \(expected root")),
    ("unknown-log", "unknown log 99: no log with this id exists on chain"),
    ("unanchored-size", (r"has no anchored checkpoint of size 2 "
                         r"\(ExperienceLedgerUnknownCheckpoint\)")),
    ("other-entry", r"the leaf hash in the calldata \(0x[0-9a-f]{64}\) is not the hash of entry"),
])
def test_a_forged_leaf_is_shown_failed_with_its_reason(dash, forgery, reason):
    plan = dash.client.build_curation(dash.net.store, dash.net.content, "alice/math", [1])
    leaf, other = plan.leaves[0], dash.net.store.leaf("alice/math", 2)
    forged = {
        "proof": replace(leaf, inclusion_proof=(bytes(32),) + leaf.inclusion_proof[1:]),
        "unknown-log": replace(leaf, source_log_id=99),
        "unanchored-size": replace(leaf, source_size=2),
        "other-entry": replace(leaf, entry_cid=other.cid),
    }[forgery]
    proposal_id, _ = dash.client.propose(replace(plan, leaves=(forged,)))

    page = dash.http.get(f"/proposals/{proposal_id}")
    assert page.status_code == 200
    assert "FAILED: the proposed entry does not verify." in page.text
    failed = re.search(r'<p class="reason">(.*?)</p>', page.text, re.DOTALL).group(1)
    assert re.search(reason, failed), failed
    verdict = dash.http.get(f"/api/proposals/{proposal_id}/verify")
    assert verdict.status_code == 422 and verdict.json()["verified"] is False
    assert re.search(reason, verdict.json()["leaves"][0]["reason"])

    if forgery == "proof":  # passed anyway: execution is refused with the ledger's named error
        for account in (1, 2, 3):
            dash.client.vote(proposal_id, "for", key=ANVIL_DEV_KEYS[account])
        dash.advance(dash.net.deployment.governance.voting_period + 1)
        dash.client.queue(proposal_id)
        dash.advance(dash.net.deployment.governance.timelock_min_delay + 1)
        refused = dash.post(f"/api/proposals/{proposal_id}/execute",
                            {"from": dev_account(1).address})
        assert refused.status_code == 409
        assert error_of(refused)["code"] == "ExperienceLedgerInvalidInclusionProof"
        assert "bad proof" in error_of(refused)["message"]


@pytest.mark.anvil
def test_votes_that_cannot_count_are_refused_with_named_errors(dash):
    proposal_id, _ = propose(dash)
    no_gym = dev_account(NO_GYM)
    refused = dash.vote(proposal_id, NO_GYM, "for")  # refused before the wallet is asked
    assert refused.status_code == 403 and error_of(refused)["type"] == "VotingPowerError"
    dash.advance(2)  # past the snapshot: now the relay itself must refuse too
    typed = dash.client.ballot_typed_data(proposal_id, "for", no_gym.address)
    signature = Account.sign_typed_data(no_gym.key, full_message=typed).signature.to_0x_hex()
    relay = {"voter": no_gym.address, "support": "for", "signature": signature}
    refused = dash.post(f"/api/proposals/{proposal_id}/relay", relay)
    assert refused.status_code == 403 and error_of(refused)["type"] == "VotingPowerError"
    assert f"{no_gym.address} had no votes at the proposal's snapshot" in \
        error_of(refused)["message"]

    voter = dev_account(2).address
    ballot = dash.http.get(f"/api/proposals/{proposal_id}/ballot",
                           params={"voter": voter, "support": "for", "reason": "first"}).text
    signed = dash.rpc("eth_signTypedData_v4", [voter, ballot])["result"]
    relay = {"voter": voter, "support": "for", "reason": "first", "signature": signed}
    first = dash.post(f"/api/proposals/{proposal_id}/relay", relay)
    assert first.status_code == 200 and first.json()["weight"] == str(1000 * 10**18)
    replayed = dash.post(f"/api/proposals/{proposal_id}/relay", relay)
    assert replayed.status_code == 409 and error_of(replayed)["code"] == "GovernorInvalidSignature"
    assert "already used" in error_of(replayed)["message"]
    forged = dash.post(f"/api/proposals/{proposal_id}/relay",
                       {**relay, "voter": dev_account(3).address})  # account 2 signed it
    assert forged.status_code == 409 and error_of(forged)["code"] == "GovernorInvalidSignature"
    again = dash.vote(proposal_id, 2, "against")  # a fresh ballot, at the voter's new nonce
    assert again.status_code == 409 and error_of(again)["code"] == "GovernorAlreadyCastVote"
    assert dash.client.governor.functions.proposalVotes(proposal_id).call() == [
        0, 1000 * 10**18, 0]

    bad = dash.post(f"/api/proposals/{proposal_id}/relay",
                    {**relay, "support": "maybe", "signature": "0x1234"})
    assert bad.status_code == 422
    assert "a vote is for, against or abstain, not 'maybe'" in error_of(bad)["message"]
    assert "a signature is 65 bytes" in error_of(bad)["message"]
    unknown = dash.http.get("/proposals/12345")
    assert unknown.status_code == 404 and "no proposal 12345" in unknown.text
    assert dash.http.get("/api/proposals/twelve").status_code == 422


@pytest.mark.anvil
def test_a_replayed_ballot_is_refused_by_the_governor(dash):
    """The same signed ballot relayed twice: the governor's nonce refuses the second."""
    proposal_id, _ = propose(dash)
    voter = dev_account(1).address
    typed = dash.http.get(f"/api/proposals/{proposal_id}/ballot",
                          params={"voter": voter, "support": "for", "reason": "yes"}).text
    signed = dash.rpc("eth_signTypedData_v4", [voter, typed])["result"]
    relay = {"voter": voter, "support": "for", "reason": "yes", "signature": signed}
    assert dash.post(f"/api/proposals/{proposal_id}/relay", relay).status_code == 200
    # Another proposal: same voter, who has not voted on it; the signature is for the first.
    second, _ = propose(dash, indices=(1,))
    replayed = dash.post(f"/api/proposals/{second}/relay", relay)
    assert replayed.status_code == 409
    assert error_of(replayed)["code"] == "GovernorInvalidSignature"
    assert f"does not recover to {voter}" in error_of(replayed)["message"]


@pytest.mark.anvil
def test_state_changing_requests_need_the_origin_and_the_sessions_csrf_token(dash):
    now = dash.client.now()
    body = {"seconds": 3600}
    assert error_of(dash.post("/api/devnet/advance", body, **{"X-CSRF-Token": ""}))["type"] == \
        "CsrfError"
    wrong = dash.post("/api/devnet/advance", body, **{"X-CSRF-Token": "0" * 64})
    assert wrong.status_code == 403 and "reload the page" in error_of(wrong)["message"]
    with TestClient(create_app(dash.runtime), base_url=ORIGIN) as other:  # another session
        other.get("/")
        stolen = other.post("/api/devnet/advance", json=body,
                            headers={"Origin": ORIGIN, "X-CSRF-Token": dash.token})
        assert stolen.status_code == 403 and error_of(stolen)["type"] == "CsrfError"
    cross = dash.post("/api/devnet/advance", body, Origin="http://evil.example")
    assert cross.status_code == 403 and error_of(cross)["type"] == "CrossOriginError"
    assert "http://evil.example is not the dashboard's origin" in error_of(cross)["message"]
    assert dash.post("/api/devnet/advance", body, Origin="").status_code == 403  # no Origin
    assert dash.post("/rpc", {"method": "eth_accounts"}, Origin="http://evil.example"
                     ).status_code == 403
    assert dash.client.now() - now < 3600  # nothing was advanced
    assert dash.post("/api/devnet/advance", body).status_code == 200
    assert dash.client.now() - now >= 3600

    preflight = {"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"}
    answer = dash.http.options("/api/devnet/advance", headers=preflight)
    assert answer.status_code == 400 and "access-control-allow-origin" not in answer.headers
    own = dash.http.options("/api/devnet/advance", headers={**preflight, "Origin": ORIGIN})
    assert own.headers["access-control-allow-origin"] == ORIGIN
    assert dash.http.get("/", headers={"Host": "evil.example"}).status_code == 400  # rebinding

    fresh = TestClient(create_app(dash.runtime), base_url=ORIGIN).get("/")
    cookie = fresh.headers["set-cookie"].lower()
    assert "samesite=strict" in cookie and "httponly" in cookie and "path=/" in cookie
    csp = fresh.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    for page in (fresh.text, dash.http.get("/library").text):  # nothing the CSP would block
        assert not re.search(r"<script(?![^>]*\bsrc=)", page)
        assert not re.search(r"\son[a-z]+\s*=", page) and "<style" not in page


@pytest.mark.anvil
def test_proposing_from_the_page_refuses_unknown_logs_and_accounts_without_votes(dash):
    proposer = dev_account(1).address
    unknown = dash.post("/api/proposals", {"from": proposer, "log": "bob/none", "indices": [0]})
    assert unknown.status_code == 422 and error_of(unknown)["type"] == "CurationError"
    assert "unknown log 'bob/none' (logs here: alice/math)" in error_of(unknown)["message"]
    unanchored = dash.post("/api/proposals", {"from": proposer, "log": "alice/math",
                                              "indices": [5]})
    assert unanchored.status_code == 422
    assert "log 'alice/math' has no leaf 5: it has 3 leaves (0-2)" in error_of(unanchored)["message"]
    poor = dash.post("/api/proposals", {"from": dev_account(NO_GYM).address, "log": "alice/math",
                                        "indices": [0]})
    assert poor.status_code == 403 and "proposing needs 1" in error_of(poor)["message"]
    assert dash.client.proposal_ids() == []

    tx = dash.post("/api/proposals", {"from": proposer, "log": "alice/math", "indices": [1],
                                      "description": "<script>alert(1)</script>"})
    assert tx.status_code == 200, tx.text
    dash.send(tx.json())
    (proposal_id,) = dash.client.proposal_ids()
    assert dash.client.proposal(proposal_id).proposer == proposer
    page = dash.http.get(f"/proposals/{proposal_id}").text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert" not in page
    assert "Curate 1 entry from alice/math" in dash.http.get("/").text


@pytest.mark.anvil
def test_the_rpc_proxy_forwards_only_what_the_page_needs(dash):
    accounts = dash.rpc("eth_accounts", [])["result"]
    assert [Web3.to_checksum_address(a) for a in accounts[:3]] == [dev_account(i).address
                                                                  for i in range(3)]
    refused = dash.rpc("anvil_setBalance", [accounts[0], "0x1"])
    assert refused["error"]["code"] == 4200 and "not forwarded" in refused["error"]["message"]
    elsewhere = dash.rpc("eth_sendTransaction", [{"from": accounts[1], "to": accounts[2],
                                                  "value": "0x1"}])
    assert "go to the governor, the token or the reward distributor only" in \
        elsewhere["error"]["message"]
    distributor = dash.client.reward_distributor.address
    attest = dash.rpc("eth_sendTransaction", [{"from": accounts[1], "to": distributor,
                                               "data": "0xdeadbeef"}])
    assert "the reward distributor's claim only" in attest["error"]["message"]
    typed = {"domain": {"verifyingContract": dash.client.token.address}, "types": {},
             "message": {}, "primaryType": "Permit"}
    signed = dash.rpc("eth_signTypedData_v4", [accounts[1], json.dumps(typed)])
    assert "only ballots of its governor" in signed["error"]["message"]

    delegate = dash.post("/api/delegate", {"from": dev_account(NO_GYM).address}).json()
    assert delegate["to"] == dash.client.token.address
    dash.send(delegate)
    account = dash.http.get(f"/api/accounts/{dev_account(NO_GYM).address}").json()
    assert account == {"address": dev_account(NO_GYM).address, "balance": "0", "votes": "0",
                       "delegate": dev_account(NO_GYM).address}


# JSON values of every kind, with the numbers and strings a quantity parser trips on.
EDGE_VALUES = [0, -1, 2**256, 10**80, 1e308, -0.0, "", "0x", "0x1", "0xzz", "lots", "1e3",
               "0x" + "f" * 65, "9" * 4000, "١٢", " 1", "1_0", True, None]
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12)
    | st.sampled_from(EDGE_VALUES),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=3),
    max_leaves=12)


def rpc_bodies(governor: str, token: str) -> st.SearchStrategy[bytes]:
    """Bodies for /rpc: requests of allowed and refused methods with params of every type, and
    bytes that are not one request (deep, unbalanced, batches, not JSON, huge numbers)."""
    address = st.sampled_from([governor, token, governor.lower(), dev_account(1).address])
    tx = st.fixed_dictionaries({}, optional={
        "to": address | JSON_VALUES, "from": address | JSON_VALUES,
        "value": st.sampled_from(EDGE_VALUES) | JSON_VALUES, "data": JSON_VALUES})
    request = st.fixed_dictionaries(
        {"method": st.sampled_from(sorted(ALLOWED_METHODS) + ["anvil_mine", "eth_sign"])
         | JSON_VALUES},
        optional={"jsonrpc": st.just("2.0"), "id": JSON_VALUES,
                  "params": st.lists(tx | JSON_VALUES, max_size=3) | JSON_VALUES})
    depth = st.integers(1, 50_000)
    return st.one_of(
        request.map(lambda r: json.dumps(r).encode()),
        JSON_VALUES.map(lambda v: json.dumps(v).encode()),
        st.lists(request, max_size=3).map(lambda batch: json.dumps(batch).encode()),
        depth.map(lambda n: b'{"method": "eth_call", "params": ' + b"[" * n + b"]" * n + b"}"),
        depth.map(lambda n: b"{\"a\":" * n + b"1" + b"}" * n),
        depth.map(lambda n: b"[" * n),
        st.binary(max_size=40),
        st.sampled_from([b"", b"null", b'{"id": "\\ud800", "method": "eth_chainId"}',
                         b'{"id": 1, "method": "eth_call", "params": [{"value": '
                         + b"9" * 5000 + b"}]}",
                         b'{"id": 1, "method": "eth_chainId", "method": "eth_accounts"}']))


@pytest.mark.anvil
@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_every_rpc_body_gets_a_json_rpc_answer_never_a_5xx(dash, data):
    body = data.draw(rpc_bodies(dash.client.governor.address, dash.client.token.address))
    answer = dash.http.post("/rpc", content=body, headers={
        "Origin": ORIGIN, "X-CSRF-Token": dash.token, "Content-Type": "application/json"})
    assert answer.status_code < 500, answer.text
    reply = answer.json()
    assert reply["jsonrpc"] == "2.0" and "id" in reply
    assert ("result" in reply) != ("error" in reply), reply
    if "error" in reply:
        assert isinstance(reply["error"]["code"], int), reply
        assert isinstance(reply["error"]["message"], str), reply
    else:
        assert answer.status_code == 200


@pytest.mark.anvil
def test_rpc_params_of_the_wrong_type_are_json_rpc_errors(dash):
    governor = dash.client.governor.address
    sender = dev_account(1).address
    for method in ("eth_sendTransaction", "eth_call"):
        for value in ("lots", 1.5, [], "0x", "-1", True):
            reply = dash.rpc(method, [{"from": sender, "to": governor, "value": value}])
            assert reply["id"] == 1 and reply["error"]["code"] == -32602, reply
            assert "value must be a quantity (0x-prefixed hex)" in reply["error"]["message"]
    call = {"from": sender, "to": governor, "value": "0x0",
            "data": dash.client.governor.encode_abi("votingDelay", args=[])}
    assert "result" in dash.rpc("eth_call", [call, "latest"])  # a real quantity still passes
    assert dash.rpc("eth_sendTransaction", [{"from": sender, "to": governor, "value": "0x5"}]
                    )["error"]["message"] == "transactions through the dashboard carry no value"
    assert dash.rpc("eth_sendTransaction", [{"to": 5}])["error"]["code"] == 4200
    assert dash.rpc("eth_sendTransaction", ["0x12"])["error"]["code"] == -32602
    assert dash.rpc("eth_signTypedData_v4", [sender, "[" * 100])["error"]["code"] == -32602
    not_one = dash.post("/rpc", [{"method": "eth_chainId"}]).json()  # a batch
    assert not_one["error"]["code"] == -32600 and not_one["id"] is None
    bad_id = dash.post("/rpc", {"id": {"x": 1}, "method": "eth_chainId"}).json()
    assert bad_id["error"]["code"] == -32600 and bad_id["id"] is None
    assert dash.post("/rpc", {"id": "a", "method": "eth_chainId"}).json() == {
        "jsonrpc": "2.0", "id": "a", "result": "0x7a69"}


@pytest.mark.anvil
def test_the_indexer_reads_only_new_blocks_and_starts_over_when_the_chain_changes(dash):
    indexer = dash.runtime.indexer
    ranges: list[tuple[int, int]] = []
    read_logs = indexer._logs
    indexer._logs = lambda start, end: ranges.append((start, end)) or read_logs(start, end)
    head = indexer.sync()
    assert indexer.last_block == head and indexer.proposals() == []
    snapshot = dash.net.rpc("evm_snapshot")
    proposal_id, _ = propose(dash)
    new_head = indexer.sync()
    assert new_head > head and [p.proposal_id for p in indexer.proposals()] == [proposal_id]
    assert ranges[-1] == (head + 1, new_head)  # only the blocks it had not seen
    assert indexer.sync() == new_head and ranges[-1] == (head + 1, new_head)  # nothing new
    assert indexer.last_block == new_head and len(indexer.proposals()) == 1  # nothing twice

    assert dash.net.rpc("evm_revert", [snapshot])  # the proposal never happened
    dash.net.rpc("anvil_mine", [hex(new_head - head + 1)])
    indexer.sync()
    assert indexer.proposals() == []


@pytest.mark.anvil
def test_the_committee_page_shows_the_verifiers_and_a_finalized_settlement(dash):
    from committee_world import CHALLENGER_KEY, VERIFIER_KEYS, VERIFIER_STAKE, committee_world

    from contracts.gym_token import GYM

    world = committee_world(dash.net.deployment)
    first, digest = world.open(1)
    world.settle(first, digest, signers=(0, 2), reason="sampling")
    second, _ = world.open(2)  # stays open
    committee = world.client(ANVIL_DEV_KEYS[0])
    settled_at = committee.challenge(first).settled_at
    window = committee.appeal_window()
    dash.advance(window + 1)
    committee.finalize(first)

    data = dash.http.get("/api/committee").json()
    assert data["address"] == world.address and data["appeal_window"] == window
    assert data["governance"] == dash.client.timelock_address
    assert [(v["index"], v["address"], v["stake"], v["state"]) for v in data["verifiers"]] == [
        (i, Account.from_key(key).address, str(VERIFIER_STAKE), "active")
        for i, key in enumerate(VERIFIER_KEYS)]
    assert data["challenge_count"] == 2 and data["shown"] == 2
    newest, oldest = data["challenges"]
    assert (newest["id"], newest["status"], newest["verdict"], newest["settled_at"],
            newest["finalized"]) == (second, "open", None, None, None)
    challenger = Account.from_key(CHALLENGER_KEY).address
    assert {k: oldest[k] for k in ("id", "operator", "challenger", "status", "verdict", "reason",
                                   "signers", "signers_count", "settled_at",
                                   "appeal_window_end", "reversed")} == {
        "id": first, "operator": world.operator, "challenger": challenger,
        "status": "finalized", "verdict": "upheld", "reason": "sampling", "signers": [0, 2],
        "signers_count": 2, "settled_at": settled_at, "appeal_window_end": settled_at + window,
        "reversed": None}
    # the node's 50 GYM: 20 % to the challenger with its 10 GYM bond, the rest to 2 signers
    assert oldest["finalized"] == {"upheld": True, "node_slashed": str(50 * GYM),
                                   "to_challenger": str(20 * GYM),
                                   "reward_share": str(20 * GYM), "to_governance": "0"}

    page = dash.http.get("/committee")
    assert page.status_code == 200
    text = page.text
    assert '<a href="/committee">Committee</a>' in text
    row = re.search(rf'<tr data-challenge-id="{first}">(.*?)</tr>', text, re.DOTALL).group(1)
    for shown in ("finalized", "upheld", "(sampling)", "slots 0, 2", "node slashed 50 GYM",
                  "to the challenger 20 GYM", "reward share 20 GYM per signer", world.operator):
        assert shown in row, (shown, row)
    assert '<tr data-index="2">' in text and "100 GYM" in text


@pytest.mark.anvil
def test_the_committee_page_says_plainly_when_there_is_no_committee(dash):
    committee, dash.runtime.client.committee = dash.runtime.client.committee, None
    try:
        answer = dash.http.get("/api/committee")
        assert answer.status_code == 404
        assert "no VerifierCommittee" in error_of(answer)["message"]
        assert dash.http.get("/committee").status_code == 404
    finally:
        dash.runtime.client.committee = committee


@pytest.mark.anvil
def test_reward_parameter_proposals_read_as_gym_gov_show_reads_them(dash):
    plan = dash.client.build_params_change(reward_budget=150 * GYM, reward_appeal_window=600)
    proposal_id, _ = dash.client.propose(plan)
    expected = [a.summary for a in dash.client.describe_actions(dash.client.proposal(proposal_id))]
    shown = dash.http.get(f"/api/proposals/{proposal_id}").json()
    assert [(a["contract"], a["function"], a["summary"]) for a in shown["actions"]] == [
        ("RewardDistributor", "setBudget", expected[0]),
        ("RewardDistributor", "setAppealWindow", expected[1])]
    assert expected == [
        ("RewardDistributor: set the reward budget to 150 GYM per epoch, split data 40%, "
         "compute 30%, verification 15%, availability 15%, from the epoch it executes in"),
        ("RewardDistributor: set the reward appeal window to 600 s (10 min) (for roots "
         "attested afterwards)")]
    page = dash.http.get(f"/proposals/{proposal_id}").text
    assert f'<p class="summary">{html.escape(expected[0])}</p>' in page
    assert ">RewardDistributor</span>" in page  # the target, named


@pytest.mark.anvil
def test_the_rewards_page_shows_an_accounts_checked_line_and_its_wallet_claims_it(dash, tmp_path):
    from committee_world import register_verifiers
    from reward_epochs import attest_table

    from committee.rewards.table import Settlement, Use
    from governance.dashboard.rewards import RewardTables, account_rewards_json

    author, signer, node, nobody = (dev_account(i).address for i in (1, 2, 3, 5))
    world = register_verifiers(dash.net.deployment)
    table = attest_table(world, dash.net.content, 0, stakes={node: 300 * GYM},
                         uses=(Use(node, "bafkreiexperience", author, 5),),
                         settlements=(Settlement(1, (author, signer)),))
    distributor = dash.client.reward_distributor
    standing = distributor.epoch_root(0)
    token = dash.client.token.functions

    listed = dash.http.get("/api/rewards").json()
    assert (listed["address"], listed["current_epoch"], listed["budget"], listed["pool_bps"]) == (
        distributor.address, 1, str(100 * GYM), [4000, 3000, 1500, 1500])
    running, attested = listed["epochs"]
    assert (running["epoch"], running["status"], running["root"]) == (1, "running", None)
    assert {k: attested[k] for k in ("epoch", "status", "root", "total", "claimed", "table_cid",
                                     "final_at")} == {
        "epoch": 0, "status": "attested", "root": "0x" + table.root.hex(),
        "total": str(table.total()), "claimed": "0", "table_cid": standing.table_cid,
        "final_at": standing.final_at}

    def lines(address: str) -> list[dict]:
        answer = dash.http.get(f"/api/rewards/accounts/{address}")
        assert answer.status_code == 200, answer.text
        return answer.json()["epochs"]

    (line,) = lines(author)  # the verification pool's 15 GYM for two, the data pool's 40
    assert (line["epoch"], line["verified"], line["error"], line["status"]) == (
        0, True, None, "attested")
    assert line["total"] == str(table.total(author)) == str(475 * GYM // 10)
    assert line["pools"] == {"data": str(40 * GYM), "compute": "0",
                             "verification": str(75 * GYM // 10), "availability": "0"}
    assert [(s["pool"], s["amount"], s["text"]) for s in line["sources"]] == [
        ("data", str(40 * GYM), ("experience bafkreiexperience, curated from this account's "
                                 "log, named in 5 of the 5 counted uses of node dev account 3 "
                                 "(stake 300 GYM)")),
        ("verification", str(75 * GYM // 10),
         "signed the settlement of committee challenge 1, finalized")]
    assert (line["claimed"], line["can_claim"]) == (False, False)
    # Too early: the distributor's own error, named, before the wallet sees anything.
    early = dash.post("/api/rewards/0/claim", {"from": signer, "account": author})
    assert early.status_code == 409 and error_of(early)["code"] == "RewardsNotFinal"
    page = dash.http.get("/rewards", params={"account": author}).text
    assert "Claimable from" in page and 'class="claim needs-account"' not in page
    assert "experience bafkreiexperience, curated from this account&#39;s log" in page

    dash.advance(distributor.value("appealWindow") + 1)
    (line,) = lines(author)
    assert (line["status"], line["can_claim"]) == ("final", True)
    page = dash.http.get("/rewards", params={"account": author}).text
    assert (f'data-epoch="0"\n        data-account="{author}" disabled>Claim 47.5 GYM</button>'
            ) in page
    (none,) = lines(nobody)
    assert (none["verified"], none["total"], none["sources"], none["can_claim"]) == (
        True, "0", [], False)
    refused = dash.post("/api/rewards/0/claim", {"from": nobody, "account": nobody})
    assert refused.status_code == 422
    assert error_of(refused)["message"] == f"{nobody} earned nothing in epoch 0"

    # Anyone's wallet sends the claim; the account is paid, to the wei.
    before = token.balanceOf(author).call()
    tx = dash.post("/api/rewards/0/claim", {"from": signer, "account": author}).json()
    assert (tx["from"], tx["to"], tx["account"], tx["amount"]) == (
        signer, distributor.address, author, str(table.total(author)))
    assert tx["proof"] == ["0x" + p.hex() for p in table.tree().proof(author)]
    dash.send(tx)  # through the page's /rpc proxy, as its script does
    assert token.balanceOf(author).call() - before == table.total(author)
    (line,) = lines(author)
    assert (line["claimed"], line["can_claim"]) == (True, False)
    again = dash.post("/api/rewards/0/claim", {"from": signer, "account": author})
    assert again.status_code == 409
    assert error_of(again)["message"] == f"{author} already claimed its rewards of epoch 0"
    assert dash.http.get("/api/rewards").json()["epochs"][1]["claimed"] == \
        str(table.total(author))
    page = dash.http.get("/rewards", params={"account": author}).text
    assert "Claimed." in page and '<a href="/rewards">Rewards</a>' in page

    # A table the content store does not hold: shown unchecked, with the reason, never a 5xx.
    elsewhere = account_rewards_json(dash.client, LocalBlockStore(tmp_path / "empty"),
                                     RewardTables(), author, dash.client.now())
    (unchecked,) = elsewhere["epochs"]
    assert not unchecked["verified"] and not unchecked["can_claim"]
    assert standing.table_cid in unchecked["error"], unchecked["error"]
    assert dash.http.get("/api/rewards/accounts/nobody").status_code == 422
    assert dash.http.get("/rewards", params={"account": "nobody"}).status_code == 422
    assert "Connect a wallet, or enter an account" in dash.http.get("/rewards").text
    dash.client.reward_distributor = None  # a deployment without one: said plainly
    try:
        assert dash.http.get("/rewards").status_code == 404
        answer = dash.http.get("/api/rewards")
        assert answer.status_code == 404
        assert "no RewardDistributor" in error_of(answer)["message"]
    finally:
        dash.client.reward_distributor = distributor


@pytest.mark.anvil
def test_the_index_is_durable_resumes_after_a_restart_and_survives_a_reorganisation(
        dash, database_url):
    """Issue "past one machine": the dashboard's event index lives in the database (SQLite and
    PostgreSQL): a restarted dashboard has the proposals and tallies before reading the chain
    and reads only the blocks after the last indexed one; after a reorganisation (Anvil's
    snapshot/revert, then new blocks) it rewinds to the fork point, forgets what the lost
    blocks held, and indexes on."""
    from ledger.event_index import EventIndexStore

    store = LogStore(database_url)

    def restart() -> DashboardRuntime:
        return DashboardRuntime(client=dash.net.client(), content=dash.net.content,
                                rpc_url=dash.net.deployment.rpc_url, origins=(ORIGIN,),
                                store=store)

    proposal_id, _ = propose(dash)
    dash.client.vote(proposal_id, "for", key=ANVIL_DEV_KEYS[1])
    first = restart().indexer
    head = first.sync()
    assert first.proposal(proposal_id).votes_for == 1000 * 10**18

    second = restart().indexer  # nothing read from the chain yet
    assert second.last_block == head and second.proposal(proposal_id).votes_for == 1000 * 10**18
    ranges: list[tuple[int, int]] = []
    read_logs = second._logs
    second._logs = lambda start, end: ranges.append((start, end)) or read_logs(start, end)
    assert second.sync() == head and ranges == []  # resumed: no block read twice

    fork = dash.net.rpc("evm_snapshot")
    dash.client.vote(proposal_id, "against", key=ANVIL_DEV_KEYS[2])
    lost_head = second.sync()
    assert second.proposal(proposal_id).votes_against == 1000 * 10**18
    assert dash.net.rpc("evm_revert", [fork])  # the vote's blocks are gone ...
    dash.net.rpc("anvil_mine", [hex(lost_head - head + 2)])  # ... and others replace them
    third = restart().indexer
    new_head = third.sync()
    assert new_head > lost_head
    again = third.proposal(proposal_id)
    assert (again.votes_for, again.votes_against) == (1000 * 10**18, 0)
    source = third.durable.source
    records, blocks = EventIndexStore(store.engine, source).load()
    assert [r["kind"] for r in records].count("VoteCast") == 1
    assert blocks[-1][0] == new_head
    assert blocks[-1][1] == "0x" + bytes(dash.net.w3.eth.get_block(new_head)["hash"]).hex()
    store.engine.dispose()


# -- the voter's walk: amounts, plurals, names, numbers, who may vote, the page's order -----------


def test_amounts_read_as_people_write_them_at_every_size():
    """Rounded (tallies, weights): never scientific notation, separators from 1,000 GYM, and a
    non-zero amount never reads 0 GYM. Exact: every decimal, even past Decimal's precision."""
    import contracts.gym_token

    assert doctest.testmod(contracts.gym_token).failed == 0
    rounded = {0: "0 GYM", 1: "<0.0001 GYM", GYM // 10**4 - 1: "<0.0001 GYM",
               GYM // 10**4: "0.0001 GYM", GYM * 12345 // 10**7: "0.0012 GYM",
               GYM // 2: "0.5 GYM", GYM * 123456 // 10**6: "0.1235 GYM",
               12 * GYM + GYM // 2: "12.5 GYM", GYM * 999_5 // 10: "999.5 GYM",
               GYM * 999_96 // 100: "1,000 GYM", 2_000 * GYM: "2,000 GYM",
               12_345 * GYM: "12,345 GYM", 1_234_567 * GYM + GYM // 3: "1,234,567 GYM",
               10**30: "1,000,000,000,000 GYM", -5 * GYM // 2: "-2.5 GYM"}
    assert {units: format_gym(units, rounded=True) for units in rounded} == rounded
    assert format_gym(2**256 - 1, rounded=True).startswith("115,792,089,237,316,195,423,570,")
    assert format_gym(10**30 + 1) == "1000000000000.000000000000000001 GYM"  # exact
    assert format_gym(1) == "0.000000000000000001 GYM" and format_gym(0) == "0 GYM"


def test_the_pages_script_writes_amounts_as_the_server_does():
    """dashboard.js's gym() (account info, vote weights) against format_gym, run by node."""
    import shutil
    import subprocess
    from pathlib import Path

    import governance.dashboard

    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    script = (Path(governance.dashboard.__file__).parent / "static" / "dashboard.js").read_text()
    function = re.search(r"\n  function gym\(units\) \{\n.*?\n  \}\n", script, re.DOTALL).group(0)
    amounts = [0, 1, GYM // 10**4 - 1, GYM // 10**4, GYM * 12345 // 10**7, GYM // 2,
               GYM * 123456 // 10**6, 12 * GYM + GYM // 2, GYM * 9995 // 10, GYM * 99996 // 100,
               2_000 * GYM, 12_345 * GYM, 1_234_567 * GYM + GYM // 3, 10**30, 2**256 - 1,
               -5 * GYM // 2]
    ran = subprocess.run([node, "-e", function + "console.log(JSON.stringify("
                          f"{json.dumps([str(a) for a in amounts])}.map(gym)))"],
                         capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(ran.stdout) == [format_gym(a, rounded=True) for a in amounts]


def test_addresses_are_named_on_the_devnet_only_and_shortened_elsewhere():
    governor = "0x" + "ab" * 20
    dev0 = dev_account(0).address
    stranger = "0x1234567890AbcdEF1234567890aBcdef12345678"
    devnet = address_book({governor: "GymGovernor"}, devnet=True)
    assert devnet.label(dev0) == "dev account 0 (deployer)"
    assert devnet.label(dev_account(19).address) == "dev account 19"
    assert devnet.label(governor.upper().replace("0X", "0x")) == "GymGovernor"
    assert devnet.label(stranger) == "0x1234…5678"
    other_chain = address_book({governor: "GymGovernor"}, devnet=False)
    assert other_chain.label(dev0) == f"{dev0[:6]}…{dev0[-4:]}" and other_chain.name(dev0) is None
    assert other_chain.label(governor) == "GymGovernor"
    shown = str(other_chain.html(dev0))
    assert f'title="{dev0}"' in shown and f'data-copy="{dev0}"' in shown
    assert f">{dev0[:6]}…{dev0[-4:]}</span>" in shown


def test_the_proposers_reason_is_paragraphs_of_escaped_text():
    words, record = reason_paragraphs(
        "# Title\n\nFirst line.\nSecond line.\n\n\n<b>bold</b> & more\n\n"
        "Source: publisher log a/b (on-chain log 2)\nEntries:\n  leaf 0\n\n"
        "Evidence:\n- evaluation bafy1 (with receipts): helps\n\n"
        "Proposal document: ipfs://bafy")
    assert words == [["First line.", "Second line."], ["<b>bold</b> & more"]]
    assert record == [["Source: publisher log a/b (on-chain log 2)", "Entries:", "  leaf 0"],
                      ["Evidence:", "- evaluation bafy1 (with receipts): helps"],
                      ["Proposal document: ipfs://bafy"]]
    assert reason_paragraphs("# Only a title") == ([], [])


# -- evidence ---------------------------------------------------------------------------------

DIGEST = "sha256:" + "ab" * 32
NODE = "0x" + "12" * 20
TABLE = "bafybeigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi"
HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def evaluation_entry(experiences: list[str], log_id: int = 3, *, library=(0.75, 1.0),
                     baseline=(0.5, 0.25), receipts="none", verifier="math") -> EvaluationEntry:
    """A valid evaluation of ``experiences`` (entry CIDs) of log ``log_id`` (as
    tests/ledger/test_evaluation_entry.py's ``evaluation()``), Mean@2 per seed as given."""
    seeds = list(range(len(library)))

    def arm(means):
        return {"per_seed": [{"seed": s, "mean_at_k": m, "pass_at_k": 1.0 if m else 0.0}
                             for s, m in zip(seeds, means, strict=True)]}

    return EvaluationEntry.model_validate({
        "subject": {"kind": "library", "log_id": log_id, "size": max(len(experiences), 17),
                    "root": "0x" + "cd" * 32, "entries": experiences},
        "baseline": "baseline",
        "task": {"dataset": entry_cid(b"dataset"), "problems": 3, "verifier": verifier,
                 "prompt_digest": DIGEST},
        "model_digest": DIGEST,
        "sampling": {"k": 2, "seeds": seeds, "temperature": 0.7, "top_p": 0.95,
                     "max_tokens": 256},
        "arms": {"baseline": arm(baseline), "library": arm(library)},
        "receipts": receipts})


def checked(entry: EvaluationEntry, verified: bool | None, detail: str) -> Evidence:
    """``entry`` summarized as `gym gov show` does, with a verification outcome."""
    item = summarize(entry_cid(encode_entry(entry)), entry)
    item.verified, item.verify_detail = verified, detail
    return item


def render_evidence(items: list[Evidence]) -> str:
    return templates.env.get_template("evidence.html").render(
        evidence=[evidence_view(item) for item in items])


def parts_of(shown: str) -> list[str]:
    return shown.split('<li class="evidence-item')[1:]


def test_evidence_leads_with_the_verdict_then_the_badge_figures_and_command():
    cids = [entry_cid(b"rule %d" % i) for i in range(2)]
    with_receipts = {"node": NODE, "table": TABLE}
    good = checked(evaluation_entry(cids, receipts=with_receipts), True,
                   "24 receipts checked: signatures, libraries, inclusion, requests and every "
                   "figure")
    forged = checked(evaluation_entry(cids, receipts=with_receipts, library=(0.5, 0.25),
                                      verifier="python:tasks:score"),
                     False, f"FAILS (figures): seed 1 {HOSTILE}")
    local = checked(evaluation_entry(cids, library=(0.25, 0.0)), None,
                    "a local run: no receipts to check")
    other = failure(HOSTILE, "subject", f"evidence {HOSTILE} evaluates log 9")
    single = checked(evaluation_entry(cids, library=(1.0,), baseline=(0.5,)), None, "")
    shown = render_evidence([good, forged, local, other, single])
    good_part, forged_part, local_part, other_part, single_part = parts_of(shown)

    def verdict(part: str) -> str:
        return html.unescape(re.search(r'<p class="evidence-verdict[^"]*">([^<]*)</p>',
                                       part).group(1))

    def badge(part: str) -> str:
        return re.search(r'<span class="badge[^"]*">([^<]+)</span>', part).group(1)

    assert verdict(good_part) == ("Measured: the library helps \u2014 Mean@2 +0.500 \u00b1 "
                                  "0.250 over 2 seeds")
    assert verdict(forged_part) == ("Claimed, but it does not verify: the library does not "
                                    "clearly help \u2014 Mean@2 +0.000 \u00b1 0.000 over 2 "
                                    "seeds")
    assert verdict(local_part) == ("Measured: the library hurts \u2014 Mean@2 -0.250 \u00b1 "
                                   "0.000 over 2 seeds")
    assert verdict(other_part) == "Not measured evidence for this proposal"
    assert verdict(single_part).endswith("over 1 seed")  # singular for one
    assert [badge(part) for part in (good_part, forged_part, local_part, other_part)] == [
        "verified with receipts", "FAILS", "unverified: a local run", "FAILS"]
    assert "24 receipts checked" in good_part
    assert "evaluator's own model, without receipts" in html.unescape(local_part)
    # the verdict line comes first, then the badge, the figures per seed, the command
    order = [good_part.index(m) for m in ("evidence-verdict", "badge", '<table class="seeds">',
                                          "task: 3 problems", "<pre><code>gym verify")]
    assert order == sorted(order)
    rows = re.findall(r"<tr><td>(\d+)</td><td>([\d.]+)</td><td>([\d.]+)</td><td>([-+\d.]+)"
                      r"</td></tr>", good_part)
    assert rows == [("0", "0.750", "0.500", "+0.250"), ("1", "1.000", "0.250", "+0.750")]
    assert f"gym verify evaluation {good.cid} --sample 8 --model MODEL_DIR</code>" in good_part
    assert (f"gym verify evaluation {forged.cid} --sample 8 --model MODEL_DIR --verifier "
            "python:tasks:score</code>") in forged_part
    assert ("gym eval --dataset TASK.jsonl --limit 3 --verifier math --library-log 3 --model "
            "MODEL_DIR -k 2 --seeds 2 --temperature 0.7 --max-new-tokens 256") in local_part
    assert "<pre>" not in other_part  # nothing to re-run
    assert "library vs baseline, Pass@2:" in good_part  # every line gym gov show prints
    # hostile text from an evidence document or a verifier's message is shown, never run
    assert "<script" not in shown and "<img" not in shown
    assert shown.count("&lt;script&gt;alert(") == 3  # forged detail, failure's cid and reason
    assert "No measured evidence" not in shown
    assert "No measured evidence: this proposal carries no evaluation." in render_evidence([])


def test_verification_is_kept_per_evidence_cid_for_its_ttl_and_bounded():
    now = [0.0]
    cache = VerificationCache(ttl_s=300, max_items=2, clock=lambda: now[0])
    cache.put("a", True, "ok")
    assert cache.get("a") == (True, "ok")
    now[0] = 299.9
    assert cache.get("a") == (True, "ok")
    now[0] = 300.0
    assert cache.get("a") is None and len(cache) == 0  # a node's registration may have changed
    for cid in "abc":
        cache.put(cid, False, "FAILS")
    assert cache.get("a") is None and cache.get("b") and cache.get("c")  # least recent out
    cache.get("b")
    cache.put("d", True, "ok")
    assert cache.get("c") is None and cache.get("b") and cache.get("d")


def _document(content, entries: list[tuple[str, bytes]], evidence: list, log_id: int = 3,
              **changes) -> str:
    document = {"type": "curation-proposal", "v": 1, "curated_log_id": 1,
                "source": {"log": "alice/math", "log_id": log_id, "size": 17,
                           "root": "0x" + "cd" * 32},
                "entries": [{"index": i, "cid": cid, "entry": json.loads(data)}
                            for i, (cid, data) in enumerate(entries)],
                "evidence": evidence, **changes}
    return content.add_file(json.dumps(document).encode())


def test_evidence_is_verified_once_per_cid_and_a_bad_document_never_breaks_the_page(
        tmp_path, monkeypatch):
    """``read_evidence`` on a content store of its own, through a fake chain: the document
    check, the subject check, the per-CID cache, and every hostile document shown FAILS."""
    from types import SimpleNamespace

    from governance.dashboard import evidence as dashboard_evidence

    content = LocalBlockStore(tmp_path / "content")
    rules = experiences(3)
    leaves = [(entry_cid(data), data) for data in rules[:2]]
    cids = [cid for cid, _ in leaves]
    calls: list[str] = []
    real_verify = dashboard_evidence.verify

    def verify(item, reader, registry, trusted):
        if item.entry.receipts == "none":  # nothing to check: no chain needed
            return real_verify(item, reader, registry, trusted)
        calls.append(item.cid)
        if item.entry.task.verifier == "exact":
            raise RuntimeError("a check that breaks")
        item.verified, item.verify_detail = False, "FAILS (receipt_table): no such table"
        return item

    monkeypatch.setattr(dashboard_evidence, "verify", verify)
    signed = evaluation_entry(cids, receipts={"node": NODE, "table": TABLE})
    breaking = evaluation_entry(cids, receipts={"node": NODE, "table": TABLE},
                                verifier="exact")
    local = evaluation_entry(cids)
    stored = [content.add_file(encode_entry(e)) for e in (signed, breaking, local)]
    reader = LedgerReader.of(content, SimpleNamespace(), 0)
    cache = VerificationCache()
    calldata = [(3, cid) for cid in cids]

    def read(document_cid: str, on: list = calldata) -> list[Evidence]:
        return read_evidence(reader, document_cid, on, cache)

    document = _document(content, leaves, stored)
    first = read(document)
    assert [(e.cid, e.verified) for e in first] == [(stored[0], False), (stored[1], None),
                                                     (stored[2], None)]
    assert first[1].verify_detail == "could not be checked: RuntimeError: a check that breaks"
    assert first[2].verify_detail == "a local run: no receipts to check"
    assert [e.verdict for e in first] == ["helps"] * 3
    assert calls == stored[:2]
    again = read(document)
    assert calls == [*stored[:2], stored[1]]  # an outcome is kept; "could not be checked" not
    assert again[0].verify_detail == "FAILS (receipt_table): no such table"

    experience = content.add_file(rules[0])
    hostile = {
        "the calldata appends other leaves": (document, [(3, cids[0])], "document"),
        "another log's leaves": (_document(content, leaves, stored[:1], log_id=4), None,
                                 "document"),
        "evidence of another library": (_document(content, leaves[:1], stored[:1]),
                                        [(3, cids[0])], "subject"),
        "not an evaluation": (_document(content, leaves, [experience]), None,
                              "not_an_evaluation"),
        "an evidence list of objects": (_document(content, leaves, [{"a": HOSTILE}]), None,
                                        "malformed"),
        "a source that is a list": (_document(content, leaves, stored[:1], source=[1]),
                                    [], "document"),
        "a document that is not JSON": (content.add_file(b"[" * 5000), None, "malformed"),
        "a document that is not there": (entry_cid(b"nowhere"), None, "malformed"),
    }
    for case, (document_cid, on, reason) in hostile.items():
        shown = read(document_cid, calldata if on is None else on)
        assert shown and all(e.verified is False for e in shown), case
        assert all(e.verify_detail.startswith(f"FAILS ({reason})") for e in shown), \
            (case, [e.verify_detail for e in shown])
        render_evidence(shown)  # and the page renders it


@pytest.mark.anvil
def test_the_proposal_page_leads_with_the_decision_and_folds_the_proofs(dash):
    plan = dash.client.build_curation(
        dash.net.store, dash.net.content, "alice/math", [0, 2],
        description="Keeps units straight.\nBoth rules are general.\n\n<b>Vote</b> for them.")
    proposal_id, _ = dash.client.propose(plan)
    page = dash.http.get(f"/proposals/{proposal_id}").text
    order = [page.index(marker) for marker in (
        '<h1 id="title">', '<section id="entries">', "Rule 0: check the units",
        '<section id="evidence">', '<section id="description">', '<section id="tally">',
        '<section id="actions">', '<details id="proofs">')]
    assert order == sorted(order), order
    folded = page.index('<details id="proofs">')
    assert "<details id=\"proofs\" open" not in page
    for detail in (plan.leaves[0].entry_cid, "0x" + plan.leaves[0].leaf_hash.hex(),
                   '<span class="verdict">VERIFIED</span>', "inclusion proof (",
                   "Source: publisher log alice/math", f"ipfs://{plan.document_cid}"):
        assert page.index(detail) > folded, detail
    evidence = page[page.index('<section id="evidence">'):page.index('<section id="description">')]
    assert "No measured evidence: this proposal carries no evaluation." in evidence
    reason = page[page.index('<section id="description">'):page.index('<section id="tally">')]
    assert "<p>Keeps units straight.<br>Both rules are general.</p>" in reason
    assert "<p>&lt;b&gt;Vote&lt;/b&gt; for them.</p>" in reason and "<b>Vote" not in page


@pytest.mark.anvil
def test_a_proposals_evidence_leads_its_section_and_is_listed_by_the_api(dash):
    """A local-run evaluation of exactly the experiences proposed (leaves 0 and 2), named by
    the proposal: the page's evidence leads with the verdict, the badge says unverified, the
    command re-runs it; the API lists it. A proposal whose calldata appends other leaves than
    the document it names gets that evidence shown FAILS."""
    store, content = dash.net.store, dash.net.content
    log_id = store.get_log("alice/math").chain_log_id
    entry = evaluation_entry([store.leaf("alice/math", i).cid for i in (0, 2)], log_id)
    cid = content.add_file(encode_entry(entry), pin=True)
    plan = dash.client.build_curation(store, content, "alice/math", [0, 2],
                                      description="Measured on three problems.", evidence=[cid])
    proposal_id, _ = dash.client.propose(plan)
    page = dash.http.get(f"/proposals/{proposal_id}").text
    evidence = html.unescape(page[page.index('<section id="evidence">'):
                                  page.index('<section id="description">')])
    verdict = ("Measured: the library helps \u2014 Mean@2 +0.500 \u00b1 0.250 over 2 seeds")
    assert evidence.index(verdict) < evidence.index("unverified: a local run") \
        < evidence.index(f"--library-log {log_id} --model MODEL_DIR -k 2 --seeds 2")
    assert "No measured evidence" not in evidence
    listed = dash.http.get(f"/api/proposals/{proposal_id}").json()["evidence"]
    assert [{k: item[k] for k in ("cid", "verdict", "headline", "verified", "badge")}
            for item in listed] == [{"cid": cid, "verdict": "helps", "headline": verdict,
                                     "verified": None, "badge": "unverified: a local run"}]
    assert "library vs baseline, Mean@2: +0.500 ± 0.250" in listed[0]["summary"][0]
    assert listed[0]["command"].startswith("gym eval --dataset TASK.jsonl")

    other_id, _ = propose(dash, indices=(0,), description=plan.description)
    page = html.unescape(dash.http.get(f"/proposals/{other_id}").text)
    assert "Not measured evidence for this proposal" in page and "FAILS (document)" in page
    assert dash.http.get(f"/api/proposals/{other_id}").json()["evidence"][0]["verified"] is False
    plain, _ = propose(dash, indices=(1,))
    assert dash.http.get(f"/api/proposals/{plain}").json()["evidence"] == []


@pytest.mark.anvil
def test_one_of_a_thing_reads_singular(dash):
    """Leaf 2 of a 3-leaf log has a one-hash proof; curated alone, the library holds 1 leaf."""
    proposal_id, _ = propose(dash, indices=(2,))
    page = dash.http.get(f"/proposals/{proposal_id}").text
    assert "inclusion proof (1 hash)" in page and "What the entry says" in page
    assert "The proposed entry is VERIFIED" in page
    for account in (1, 2, 3):
        dash.client.vote(proposal_id, "for", key=ANVIL_DEV_KEYS[account])
    dash.advance(dash.net.deployment.governance.voting_period + 1)
    dash.client.queue(proposal_id)
    dash.advance(dash.net.deployment.governance.timelock_min_delay + 1)
    dash.client.execute(proposal_id)
    library = dash.http.get("/library").text
    assert ": 1 leaf.</p>" in library and "the RFC 9162 root of the 1 appended leaf," in library
    again = dash.http.get(f"/proposals/{proposal_id}").text
    for text in (page, library, dash.http.get("/").text, again):
        assert not re.findall(r"\b1 (leaves|hashes|entries|proposals|challenges|slots)\b", text)


@pytest.mark.anvil
def test_accounts_and_contracts_read_as_names_with_the_full_address_on_hover(dash):
    proposal_id, _ = propose(dash)  # by dev account 0
    assert dash.vote(proposal_id, 1, "for").status_code == 200
    deployer, voter = dev_account(0).address, dev_account(1).address
    index = dash.http.get("/").text
    assert (f'<span class="addr" title="{deployer}" data-address="{deployer}">'
            "dev account 0 (deployer)</span>") in index
    assert f'data-copy="{deployer}"' in index
    names = json.loads(html.unescape(re.search(r"data-names='([^']*)'", index).group(1)))
    assert names[voter.lower()] == "dev account 1"
    assert names[dash.client.governor.address.lower()] == "GymGovernor"
    page = dash.http.get(f"/proposals/{proposal_id}").text
    votes = page[page.index('<section id="votes">'):page.index('<section id="timeline">')]
    assert f'title="{voter}" data-address="{voter}">dev account 1</span>' in votes
    shown_text = re.sub(r"<[^>]+>", " ", page)  # what the reader sees: no raw addresses
    assert deployer not in shown_text and voter not in shown_text
    ledger = dash.client.ledger.address
    assert f'title="{ledger}" data-address="{ledger}">ExperienceLedger</span>' in page
    library = dash.http.get("/library").text
    assert "owned by the timelock" in library and ">TimelockController</span>" in library


@pytest.mark.anvil
def test_proposals_answer_by_their_gym_gov_list_number(dash):
    first, _ = propose(dash)
    second, _ = propose(dash, indices=(1,))
    assert dash.client.proposal_ids() == [first, second]  # the order `gym gov list` numbers
    index = dash.http.get("/").text
    assert '<span class="number">Proposal 2</span>\n        <a href="/proposals/2">' in index
    assert '<a href="/proposals/1">' in index
    for number, proposal_id in ((1, first), (2, second)):
        page = dash.http.get(f"/proposals/{number}")
        assert page.status_code == 200
        assert f'data-proposal-id="{proposal_id}"' in page.text
        assert f'<p id="number" class="number">Proposal {number}</p>' in page.text
        assert dash.http.get(f"/api/proposals/{number}").json()["id"] == str(proposal_id)
    by_id = dash.http.get(f"/proposals/{second}")  # the full id still answers
    assert by_id.status_code == 200 and "Proposal 2</p>" in by_id.text
    assert dash.http.get(f"/proposals/{hex(second)}").status_code == 200
    unknown = dash.http.get("/proposals/3")
    assert unknown.status_code == 404 and "<h1>Error 404</h1>" in unknown.text
    assert "no proposal 3: the governor has 2 proposals, numbered 1 to 2" in unknown.text
    assert dash.http.get("/proposals/0").status_code == 404


@pytest.mark.anvil
def test_vote_buttons_only_for_an_account_that_can_vote_and_why_not(dash):
    late = dev_account(5).address  # gets GYM before the proposal, delegates after its snapshot
    dash.client.send(dash.client.token.functions.transfer(late, 100 * GYM),
                     Account.from_key(ANVIL_DEV_KEYS[0]))
    proposal_id, _ = propose(dash)

    def status(account: int) -> dict:
        answer = dash.http.get(f"/api/proposals/{proposal_id}/voters/"
                               f"{dev_account(account).address}")
        assert answer.status_code == 200, answer.text
        return answer.json()

    pending = status(1)
    assert not pending["can_vote"] and pending["vote"] is None
    assert pending["message"].startswith("Voting opens with the first block after")
    page = dash.http.get(f"/proposals/{proposal_id}").text
    assert 'class="vote"' not in page and "Voting opens with the first block after" in page

    dash.advance(2)  # past the snapshot: Active
    dash.client.delegate(key=devnet_account_key(5))
    can = status(1)
    assert can["can_vote"] and can["weight"] == str(1000 * GYM)
    assert can["message"] == "dev account 1 votes with 1,000 GYM, its votes at the snapshot."
    late_status = status(5)
    assert not late_status["can_vote"]
    assert "dev account 5 cannot vote on this proposal: it had no votes at the snapshot" in \
        late_status["message"]
    assert "Its 100 GYM of votes were delegated to it after the snapshot" in late_status["message"]
    assert "It holds no GYM" in status(NO_GYM)["message"]
    page = dash.http.get(f"/proposals/{proposal_id}").text  # no wallet known to the server
    assert '<div id="vote" class="unavailable">' in page
    assert page.count('class="vote" data-support=') == 3
    assert len(re.findall(r'class="vote" data-support="\w+" disabled>', page)) == 3
    assert "To vote, connect a wallet" in page

    assert dash.vote(proposal_id, 1, "for", reason="general").status_code == 200
    voted = status(1)
    assert not voted["can_vote"] and voted["vote"] == {
        "support": "for", "weight": str(1000 * GYM), "reason": "general"}
    assert voted["message"] == "dev account 1 voted For with 1,000 GYM: \u201cgeneral\u201d"

    dash.advance(dash.net.deployment.governance.voting_period + 1)
    closed = status(2)
    assert not closed["can_vote"] and closed["message"].startswith("Voting is closed")
    page = dash.http.get(f"/proposals/{proposal_id}").text
    assert 'class="vote"' not in page and 'id="queue" class="needs-account" disabled' in page
    bad = dash.http.get(f"/api/proposals/{proposal_id}/voters/connecting…")
    assert bad.status_code == 422 and "is not an address" in error_of(bad)["message"]
