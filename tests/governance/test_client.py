"""The DAO client on a real Anvil: a curation proposal's whole lifecycle, and the refusals."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

import pytest
from eth_account import Account
from web3 import Web3

from contracts import load_artifact
from devnet.deploy import Deployment
from devnet.settings import ANVIL_DEV_KEYS
from governance import (
    CurationError,
    GovernanceClient,
    GovernorRevertError,
    ProposalState,
    ProposalStateError,
    SignatureError,
    VotingPowerError,
)
from ledger import ExperienceEntry, LocalBlockStore, LogStore, Provenance, encode_entry
from ledger.chain import LedgerContract
from ledger.publish import append_entries, publish
from ledger.rfc9162 import root as merkle_root

pytestmark = pytest.mark.anvil

Account.enable_unaudited_hdwallet_features()
# Anvil's account 7: a public dev key that holds ether but no GYM.
NO_GYM_KEY = Account.from_mnemonic("test test test test test test test test test test test junk",
                                   account_path="m/44'/60'/0'/0/7").key.to_0x_hex()


def experiences(count: int) -> list[bytes]:
    return [encode_entry(ExperienceEntry(
        text=f"Rule {i}: restate the question in your own words first.", domain="math", op="add",
        provenance=Provenance(method="tfgrpo", base_model="SmolLM2-135M-Instruct", step=i)))
        for i in range(count)]


@dataclass
class Dao:
    client: GovernanceClient
    store: LogStore
    content: LocalBlockStore
    deployment: Deployment


@pytest.fixture
def dao(ledger_devnet, tmp_path):
    deployment = Deployment.load(ledger_devnet.gym.deployment_file)
    w3 = Web3(Web3.HTTPProvider(deployment.rpc_url))
    ledger = LedgerContract(w3, deployment.contracts["ExperienceLedger"].address,
                            load_artifact("ExperienceLedger").abi, ANVIL_DEV_KEYS[0])
    client = GovernanceClient(
        w3, deployment.contracts["GymGovernor"].address, load_artifact("GymGovernor").abi,
        deployment.contracts["GymToken"].address, load_artifact("GymToken").abi, ledger,
        deployment.contracts["TimelockController"].address,
        load_artifact("TimelockController").abi, curated_log_id=deployment.curated_log_id,
        private_key=ANVIL_DEV_KEYS[0], from_block=deployment.deployment_block)
    store = LogStore(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    content = LocalBlockStore(tmp_path / "content")
    store.create_log("alice/math")
    append_entries(store, content, "alice/math", experiences(3))
    publish(store, content, ledger, "alice/math")
    yield Dao(client, store, content, deployment)
    store.engine.dispose()


def pass_voting_and_queue(dao: Dao, proposal_id: int) -> None:
    params = dao.deployment.governance
    dao.client.advance_time(params.voting_period + 1)
    assert dao.client.proposal(proposal_id).state == ProposalState.SUCCEEDED
    dao.client.queue(proposal_id)
    dao.client.advance_time(params.timelock_min_delay + 1)


def test_curation_lifecycle_appends_the_leaves_on_chain(dao):
    client = dao.client
    plan = client.build_curation(dao.store, dao.content, "alice/math", [0, 2],
                                 description="Two rules that helped on GSM8K.")
    document = json.loads(dao.content.cat(plan.document_cid))
    assert [e["index"] for e in document["entries"]] == [0, 2]
    assert document["entries"][0]["entry"]["text"].startswith("Rule 0")
    assert f"Proposal document: ipfs://{plan.document_cid}" in plan.description

    proposal_id, _ = client.propose(plan)
    shown = client.proposal(proposal_id)
    assert shown.state == ProposalState.PENDING
    assert shown.title == "Curate 2 entries from alice/math"
    assert shown.document_cid == plan.document_cid
    assert [p.proposal_id for p in client.proposals()] == [proposal_id]

    client.vote(proposal_id, "for", reason="useful", key=ANVIL_DEV_KEYS[1])
    client.vote(proposal_id, "against", key=ANVIL_DEV_KEYS[2])
    voter = Account.from_key(ANVIL_DEV_KEYS[3])
    typed = client.ballot_typed_data(proposal_id, "for", voter.address)
    assert typed["domain"]["name"] == "GymGovernor" and typed["message"]["nonce"] == "0"
    assert typed["message"]["proposalId"] == str(proposal_id)  # uint256: decimal strings
    signature = Account.sign_typed_data(voter.key, full_message=typed).signature
    client.cast_vote_by_sig(proposal_id, "for", voter.address, signature)  # relayed by account 0

    tally = client.proposal(proposal_id)
    assert tally.state == ProposalState.ACTIVE
    assert (tally.votes_for, tally.votes_against, tally.votes_abstain) == (2000 * 10**18,
                                                                           1000 * 10**18, 0)
    assert tally.quorum == (5 * 1_000 + 1_250) * 10**18 * 4 // 100  # holders' and treasury's

    pass_voting_and_queue(dao, proposal_id)
    assert client.proposal(proposal_id).state == ProposalState.QUEUED
    client.execute(proposal_id, key=ANVIL_DEV_KEYS[4])  # anyone may execute
    assert client.proposal(proposal_id).state == ProposalState.EXECUTED

    curated = dao.deployment.curated_log_id
    appended = client.ledger.leaves_appended(curated, from_block=dao.deployment.deployment_block)
    expected = [dao.store.leaf("alice/math", i).leaf_hash for i in (0, 2)]
    assert [e.leaf_hash for e in appended] == expected
    assert [e.entry_cid for e in appended] == [dao.store.leaf("alice/math", i).cid for i in (0, 2)]
    info = client.ledger.log_info(curated)
    assert (info.size, info.root) == (2, merkle_root(expected))


def test_a_tampered_proof_fails_execution_with_the_ledgers_error(dao):
    client = dao.client
    plan = client.build_curation(dao.store, dao.content, "alice/math", [1])
    leaf = plan.leaves[0]
    forged = (bytes(32),) + leaf.inclusion_proof[1:]
    tampered = replace(plan, leaves=(replace(leaf, inclusion_proof=forged),))
    proposal_id, _ = client.propose(tampered)
    for key in ANVIL_DEV_KEYS[:3]:
        client.vote(proposal_id, "for", key=key)
    pass_voting_and_queue(dao, proposal_id)
    with pytest.raises(GovernorRevertError) as refused:
        client.execute(proposal_id)
    assert refused.value.name == "ExperienceLedgerInvalidInclusionProof"
    assert "leafIndex=1" in str(refused.value) and "bad proof" in str(refused.value)
    assert client.ledger.log_info(dao.deployment.curated_log_id).size == 0


def test_bad_curation_input_is_refused_before_anything_is_sent(dao):
    client = dao.client
    with pytest.raises(CurationError, match="unknown log 'bob/none'.*alice/math"):
        client.build_curation(dao.store, dao.content, "bob/none", [0])
    append_entries(dao.store, dao.content, "alice/math", experiences(4)[3:])
    with pytest.raises(CurationError, match=r"leaf 3 of log 'alice/math' is not anchored yet: "
                                            r"the log has 4 leaves \(0-3\), its last anchored "
                                            r"checkpoint covers 3 leaves \(0-2\); run `gym "
                                            r"ledger publish alice/math`"):
        client.build_curation(dao.store, dao.content, "alice/math", [0, 3])
    with pytest.raises(CurationError, match=r"log 'alice/math' has no leaf 9: it has 4 leaves "
                                            r"\(0-3\)$"):
        client.build_curation(dao.store, dao.content, "alice/math", [9])
    with pytest.raises(CurationError, match="repeat"):
        client.build_curation(dao.store, dao.content, "alice/math", [1, 1])
    assert client.proposal_ids() == []


def test_votes_that_would_fail_or_weigh_nothing_are_refused(dao):
    client = dao.client
    plan = client.build_curation(dao.store, dao.content, "alice/math", [0])
    with pytest.raises(VotingPowerError, match="proposing needs 1"):
        client.propose(plan, key=NO_GYM_KEY)
    proposal_id, _ = client.propose(plan)

    no_gym = Account.from_key(NO_GYM_KEY).address
    with pytest.raises(VotingPowerError, match=f"{no_gym} had no votes at the proposal's snapshot"):
        client.vote(proposal_id, "for", key=NO_GYM_KEY)

    voter = Account.from_key(ANVIL_DEV_KEYS[2])
    typed = client.ballot_typed_data(proposal_id, "for", voter.address)
    signature = Account.sign_typed_data(voter.key, full_message=typed).signature
    client.cast_vote_by_sig(proposal_id, "for", voter.address, signature)
    # Replayed: the nonce it signed is used. The client refuses; so does the contract.
    with pytest.raises(ProposalStateError, match="has already voted"):
        client.cast_vote_by_sig(proposal_id, "for", voter.address, signature)
    with pytest.raises(GovernorRevertError, match="GovernorInvalidSignature.*already used"):
        client.cast_vote_by_sig(proposal_id, "for", voter.address, signature, verify=False)
    other = Account.from_key(ANVIL_DEV_KEYS[3]).address  # a signature by the wrong key
    with pytest.raises(SignatureError, match=f"not {other}'s ballot"):
        client.cast_vote_by_sig(proposal_id, "for", other, signature)
    with pytest.raises(ProposalStateError, match="already voted"):
        client.vote(proposal_id, "against", key=ANVIL_DEV_KEYS[2])

    # Wrong state: queue while voting is open, decoded from the governor's custom error.
    with pytest.raises(GovernorRevertError,
                       match=r"GovernorUnexpectedProposalState\(.*current=Active.*Succeeded"):
        client.queue(proposal_id)
    client.advance_time(dao.deployment.governance.voting_period + 1)
    with pytest.raises(ProposalStateError, match="is Succeeded: votes are taken only while"):
        client.vote(proposal_id, "for", key=ANVIL_DEV_KEYS[1])
    client.queue(proposal_id)
    with pytest.raises(GovernorRevertError, match="TimelockUnexpectedOperationState.*not ready"):
        client.execute(proposal_id)
