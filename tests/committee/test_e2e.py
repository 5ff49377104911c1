"""The committee end to end on a real Anvil, with real processes: a node (`gym node serve`, the
tiny random model) answers, a forged receipt of it is caught and challenged through the
committee, an honest receipt is challenged too; three `gym verifier serve` processes judge both
with the full receipt verification and sign, one `gym verifier aggregate` settles each with one
aggregate signature; past the appeal window it finalizes and claims. The node's stake, the
challenger's bonds and the verifiers' rewards move as docs/committee.md says."""

from __future__ import annotations

import pytest
from eth_account import Account
from rich.console import Console
from test_sync import TEXTS, experience

from committee.client import ChallengeState, VerifierCommittee
from committee.demo import (
    CHALLENGER_ACCOUNT,
    VERIFIER_ACCOUNTS,
    committee_challenger,
    demo_committee,
    register_demo_verifiers,
)
from contracts.devnet_accounts import devnet_account_key
from contracts.gym_token import GYM
from devnet.deploy import Deployment
from devnet.runtime import ledger_runtime
from devnet.settings import ANVIL_DEV_KEYS, GymSettings
from governance.devnet_time import advance_time
from inference_node.demo import demo_node
from inference_node.registry import NodeRegistry
from ledger import rfc9162
from ledger.blockstore import LocalBlockStore
from ledger.chain import LogKind
from ledger.entries import entry_cid

pytestmark = [pytest.mark.slow, pytest.mark.anvil]
NODE_KEY = ANVIL_DEV_KEYS[4]


def test_forged_receipt_is_slashed_and_a_false_challenge_loses_its_bond(ledger_devnet,
                                                                        tiny_model_dir):
    gym = ledger_devnet.gym
    settings = GymSettings(data_dir=gym.data_dir, deployment_file=gym.deployment_file)
    rt = ledger_runtime(settings)
    content = LocalBlockStore(gym.data_dir / "ipfs")
    entries = [experience(t) for t in TEXTS]
    for data in entries:
        content.add_file(data, pin=True)
    contract = ledger_devnet.contract()
    log_id, _ = contract.create_log("gym/curated-test", LogKind.CURATED)
    contract.append_leaves(log_id, [rfc9162.leaf_hash(e) for e in entries],
                           [entry_cid(e) for e in entries])
    deployment = Deployment.load(gym.deployment_file)
    address = deployment.contracts["VerifierCommittee"].address
    params = deployment.governance
    committee = VerifierCommittee(rt.contract.w3, address, from_block=deployment.deployment_block)
    token = committee.token()
    challenger = Account.from_key(devnet_account_key(CHALLENGER_ACCOUNT)).address
    verifiers = [Account.from_key(devnet_account_key(n)).address for n in VERIFIER_ACCOUNTS]
    operator = Account.from_key(NODE_KEY).address

    console = Console(record=True, width=200)
    register_demo_verifiers(settings, rt, console, address)
    outcome = demo_node(settings, rt, console, library_log_id=log_id, curated=True,
                        model_dir=tiny_model_dir, node_key=NODE_KEY,
                        challenger=committee_challenger(address))
    forged_id = outcome.caught.challenge.id
    assert committee.challenge(forged_id).status == ChallengeState.OPEN
    challenger_start = token.functions.balanceOf(challenger).call() + params.challenge_bond
    registry = NodeRegistry(rt.contract.w3, deployment.contracts["NodeRegistry"].address)
    stake_start = registry.node_of(operator).stake

    demo_committee(settings, rt, console, outcome=outcome, model_dir=tiny_model_dir,
                   committee_address=address, node_operator=operator, advance_time=advance_time)
    text = console.export_text()
    assert f"challenge {forged_id} settled upheld: sampling" in text
    assert "settled rejected" in text

    forged, honest = committee.challenge(forged_id), committee.challenge(forged_id + 1)
    assert forged.status == honest.status == ChallengeState.FINALIZED
    assert (forged.verdict, honest.verdict) == (1, 2)
    assert len(forged.signers) >= 2 and len(honest.signers) >= 2  # two thirds of three
    slash = params.node_slash
    assert registry.node_of(operator).stake == stake_start - slash
    share = slash * params.challenger_share_bps // 10_000
    # bond back + share for the forged receipt; the honest one's bond is gone
    assert token.functions.balanceOf(challenger).call() == \
        challenger_start - 2 * params.challenge_bond + params.challenge_bond + share
    pool = slash - share
    assert forged.reward_share == pool // len(forged.signers)
    assert honest.reward_share == params.challenge_bond // len(honest.signers)
    for index, verifier in enumerate(verifiers):
        earned = (forged.reward_share * (index in forged.signers)
                  + honest.reward_share * (index in honest.signers))
        assert token.functions.balanceOf(verifier).call() == 200 * GYM - params.verifier_min_stake + earned
