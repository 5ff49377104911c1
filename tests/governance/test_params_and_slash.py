"""Governance-parameter proposals (the RewardDistributor's budget, split and appeal window
among them), node slashing proposals and cancellation, on a real Anvil; and the decoding of
proposal actions, offline."""

from __future__ import annotations

import doctest
import json
import re
from dataclasses import dataclass

import pytest
from eth_account import Account
from eth_utils import keccak
from gym_helpers import send
from web3 import Web3

import governance.proposals
from contracts import load_artifact
from contracts.devnet_accounts import devnet_account_key
from contracts.gym_token import GYM, parse_gym
from devnet.deploy import Deployment
from devnet.settings import ANVIL_DEV_KEYS
from governance import (
    GovernanceClient,
    GovernanceError,
    GovernorRevertError,
    ProposalState,
    ProposalStateError,
)
from governance.errors import NotProposerError, ParameterError, SlashError
from governance.proposals import (
    ActionDecoder,
    ChallengeStatus,
    GovernanceParameters,
    RewardParameters,
    format_duration,
    format_gym,
    format_split,
    parse_split,
    plan_params_change,
)
from ledger.chain import LedgerContract

OPERATOR_KEY = ANVIL_DEV_KEYS[4]  # holds 1,000 GYM; runs the node
CHALLENGER_KEY = devnet_account_key(5)  # holds ether, no GYM
NODE_SIGNER = Account.from_key(devnet_account_key(6)).address  # signs the node's receipts
STAKE = 300 * GYM
DEVNET_SUPPLY = (5 * 1_000 + 1_250) * GYM  # five holders' and the timelock's treasury


# -- offline: amounts, durations and action decoding -----------------------------------------


def test_module_docstring_example_runs():
    result = doctest.testmod(governance.proposals, verbose=False)
    assert result.attempted > 0 and result.failed == 0


def test_gym_amounts_and_durations_read_and_print_exactly():
    assert parse_gym("50", "--amount") == 50 * GYM
    assert parse_gym("0.000000000000000001", "--amount") == 1
    assert format_gym(12_500_000_000_000_000_000) == "12.5 GYM"
    assert format_gym(300 * GYM) == "300 GYM"
    for bad, why in (("ten", "not 'ten'"), ("-1", "non-negative"), ("1e-19", "18 decimals"),
                     ("inf", "non-negative")):
        with pytest.raises(ParameterError, match=why):
            parse_gym(bad, "--amount", ParameterError)
    assert format_duration(59) == "59 s"
    assert format_duration(90061) == "90061 s (1 d 1 h 1 min 1 s)"


GOVERNOR = "0x" + "11" * 20
TIMELOCK = "0x" + "22" * 20
REGISTRY = "0x" + "33" * 20
CURRENT = GovernanceParameters(voting_delay=1, voting_period=300, proposal_threshold=GYM,
                               quorum_numerator=4, timelock_delay=60)


def _plan(**wanted):
    return plan_params_change(CURRENT, wanted, governor_address=GOVERNOR,
                              timelock_address=TIMELOCK, total_supply=5000 * GYM)


def test_params_plan_targets_the_governor_and_the_timelock_and_decodes_back():
    plan = _plan(voting_period=600, quorum_numerator=5, timelock_delay=120)
    targets, values, calldatas = plan.actions
    assert targets == [Web3.to_checksum_address(a) for a in (GOVERNOR, GOVERNOR, TIMELOCK)]
    assert values == [0, 0, 0]
    assert [c[:4] for c in calldatas] == [keccak(text=s)[:4] for s in (
        "setVotingPeriod(uint32)", "updateQuorumNumerator(uint256)", "updateDelay(uint256)")]
    assert plan.description.startswith("# Change governance parameters: voting period, quorum, "
                                       "timelock delay")
    assert "- voting period: 300 s (5 min) -> 600 s (10 min)" in plan.description
    assert "- quorum: 4% of the supply -> 5% of the supply" in plan.description

    decoder = ActionDecoder({GOVERNOR: ("GymGovernor", load_artifact("GymGovernor").abi),
                             TIMELOCK: ("TimelockController",
                                        load_artifact("TimelockController").abi)})
    decoded = [decoder.decode(t, c) for t, c in zip(targets, calldatas, strict=True)]
    assert [d.summary for d in decoded] == [
        "GymGovernor: set the voting period to 600 s (10 min)",
        "GymGovernor: set the quorum to 5% of the supply",
        "TimelockController: set the timelock delay to 120 s (2 min)"]
    assert decoded[0].function == "setVotingPeriod" and decoded[0].args == {"newVotingPeriod": 600}

    unknown_target = decoder.decode(REGISTRY, calldatas[0])
    assert unknown_target.contract is None and "unknown contract" in unknown_target.summary
    unknown_selector = decoder.decode(GOVERNOR, bytes.fromhex("deadbeef"), value=5)
    assert unknown_selector.summary == ("call 0xdeadbeef on GymGovernor (not a function of its "
                                        "ABI), sending 5 wei")


@pytest.mark.parametrize("wanted, why", [
    ({}, "name at least one parameter"),
    ({"voting_period": None}, "name at least one parameter"),
    ({"voting_period": 0}, "voting period must be at least 1 second"),
    ({"voting_period": 2**32}, r"voting period can be at most 4294967295 s .*\(uint32\)"),
    ({"voting_delay": 2**48}, r"voting delay can be at most .*\(uint48\)"),
    ({"quorum_numerator": 101}, "quorum can be at most 100% of the supply"),
    ({"quorum_numerator": 0}, "quorum of 0% would let a single vote decide"),
    ({"proposal_threshold": 5001 * GYM}, "above the whole supply .*no one could ever propose"),
    ({"timelock_delay": -1}, "timelock delay cannot be negative"),
    ({"voting_period": 300}, "voting period is already 300 s"),
    ({"quorum": 5}, "unknown governance parameter 'quorum'"),
])
def test_params_plan_refuses_bad_values(wanted, why):
    with pytest.raises(ParameterError, match=why):
        _plan(**wanted)


DISTRIBUTOR = "0x" + "55" * 20
REWARDS = RewardParameters(budget=100 * GYM, pool_bps=(4000, 3000, 1500, 1500), appeal_window=300,
                           max_appeal_window=7 * 86400, current_epoch=2,
                           treasury=Web3.to_checksum_address(TIMELOCK),
                           treasury_balance=1_250 * GYM, treasury_allowance=1_200 * GYM)
DEVNET_SPLIT = "data 40%, compute 30%, verification 15%, availability 15%"


def _reward_plan(description: str = "", **wanted):
    return plan_params_change(CURRENT, wanted, governor_address=GOVERNOR,
                              timelock_address=TIMELOCK, total_supply=5000 * GYM,
                              description=description, rewards=REWARDS,
                              distributor_address=DISTRIBUTOR)


def test_a_reward_split_reads_as_percent_or_basis_points():
    assert parse_split("40,30,15,15") == parse_split("4000,3000,1500,1500") == \
        (4000, 3000, 1500, 1500)
    assert parse_split(" 33.34, 33.33,33.33 ,0") == (3334, 3333, 3333, 0)
    assert format_split((3334, 3333, 3333, 0)) == \
        "data 33.34%, compute 33.33%, verification 33.33%, availability 0%"
    for bad, why in (("40,30,15,10", "'40,30,15,10' sums to 95"),
                     ("4000,3000,1500,1400", "sums to 9900"),
                     ("40,30,30", "not '40,30,30'"), ("40,30,15,15,0", "not "),
                     ("40,-30,45,45", "not "), ("40.001,29.999,15,15", "not "),
                     ("4000.5,2999.5,1500,1500", "sums to 10000"), ("a,b,c,d", "not ")):
        with pytest.raises(ParameterError, match=f"the reward split is four numbers, for data, "
                                                 f".*{re.escape(why)}"):
            parse_split(bad)


def test_reward_parameters_are_one_set_budget_and_one_set_appeal_window_and_decode_back():
    plan = _reward_plan(reward_budget=150 * GYM, reward_split=(5000, 2000, 1500, 1500),
                        reward_appeal_window=600, description="Pay more, check longer.")
    targets, values, calldatas = plan.actions
    assert targets == [Web3.to_checksum_address(DISTRIBUTOR)] * 2 and values == [0, 0]
    assert [c[:4] for c in calldatas] == [keccak(text=s)[:4] for s in (
        "setBudget(uint256,uint16[4])", "setAppealWindow(uint64)")]
    assert plan.description.split("\n") == [
        "# Change reward parameters: budget, split, appeal window",
        "",
        "Pay more, check longer.",
        "",
        "Changes (executed by the timelock):",
        "- reward budget: 100 GYM -> 150 GYM per epoch",
        (f"- reward split: {DEVNET_SPLIT} -> data 50%, compute 20%, verification 15%, "
         "availability 15%"),
        "- reward appeal window: 300 s (5 min) -> 600 s (10 min)",
        "",
        (f"The reward budget applies from the epoch in which the proposal executes (epoch 2 "
         f"now) on; ended epochs keep theirs. The treasury {Web3.to_checksum_address(TIMELOCK)} "
         "holds 1,250 GYM and allows the distributor 1,200 GYM: 8 epochs at the new budget."),
        ("The reward appeal window applies to roots attested after execution; a root attested "
         "before keeps the claim time it was attested with."),
    ]

    decoder = ActionDecoder({DISTRIBUTOR: ("RewardDistributor",
                                           load_artifact("RewardDistributor").abi)})
    decoded = [decoder.decode(t, c) for t, c in zip(targets, calldatas, strict=True)]
    assert [d.summary for d in decoded] == [
        ("RewardDistributor: set the reward budget to 150 GYM per epoch, split data 50%, "
         "compute 20%, verification 15%, availability 15%, from the epoch it executes in"),
        ("RewardDistributor: set the reward appeal window to 600 s (10 min) (for roots "
         "attested afterwards)")]
    assert [d.short for d in decoded] == ["reward budget -> 150 GYM",
                                          "reward appeal window -> 600 s (10 min)"]
    assert decoded[0].args == {"budgetPerEpoch": 150 * GYM, "poolBps": [5000, 2000, 1500, 1500]}

    # One of budget and split: the other is sent as it stands, and said to be unchanged.
    budget_only = _reward_plan(reward_budget=0)
    assert decoder.decode(DISTRIBUTOR, budget_only.actions[2][0]).args["poolBps"] == \
        [4000, 3000, 1500, 1500]
    assert (f"- reward budget: 100 GYM -> 0 GYM per epoch (split unchanged: {DEVNET_SPLIT})"
            ) in budget_only.description
    assert "a budget of 0 pays no rewards" in budget_only.description
    split_only = _reward_plan(reward_split=(2500, 2500, 2500, 2500))
    assert split_only.description.startswith("# Change reward parameters: split\n")
    assert "(budget unchanged: 100 GYM per epoch)" in split_only.description
    mixed = _reward_plan(voting_period=600, reward_budget=150 * GYM)
    assert mixed.description.startswith("# Change governance parameters: voting period, reward "
                                        "budget\n")
    assert "Governance parameters apply to proposals made after execution." in mixed.description
    assert mixed.actions[0] == [Web3.to_checksum_address(a) for a in (GOVERNOR, DISTRIBUTOR)]


@pytest.mark.parametrize("wanted, why", [
    ({"reward_split": (4000, 3000, 1500, 1400)},
     (r"split's four parts must sum to 10000 basis points \(100%\), not \[4000, 3000, 1500, "
      r"1400\] \(sum 9900\): the distributor refuses it \(RewardsInvalidSplit\)")),
    ({"reward_split": (12000, 0, 0, -2000)}, "must sum to 10000 basis points"),
    ({"reward_budget": 2**128}, r"below 2\^128 GYM base units \(setBudget stores 128 bits\)"),
    ({"reward_budget": -1}, "reward budget cannot be negative"),
    ({"reward_budget": 100 * GYM},
     f"reward budget is already 100 GYM per epoch, split {DEVNET_SPLIT}"),
    ({"reward_split": (4000, 3000, 1500, 1500)}, "reward budget is already 100 GYM"),
    ({"reward_appeal_window": 8 * 86400},
     r"at most 604800 s \(7 d\) \(MAX_APPEAL_WINDOW\), not 691200 s"),
    ({"reward_appeal_window": 300}, "reward appeal window is already 300 s"),
])
def test_reward_parameters_the_distributor_would_refuse_are_refused(wanted, why):
    with pytest.raises(ParameterError, match=why):
        _reward_plan(**wanted)


def test_reward_parameters_need_a_distributor():
    with pytest.raises(ParameterError, match="no RewardDistributor is known"):
        _plan(reward_budget=GYM)


# -- on Anvil ---------------------------------------------------------------------------------


@dataclass
class Node:
    operator: str
    registry: object  # web3 contract
    token: object  # web3 contract


def register_node(deployment: Deployment, key: str = OPERATOR_KEY, stake: int = STAKE,
                  signer: str = NODE_SIGNER) -> Node:
    """Register ``key``'s node as an operator does: a receipt log of its own, approve, register."""
    w3 = Web3(Web3.HTTPProvider(deployment.rpc_url))
    ledger = LedgerContract(w3, deployment.contracts["ExperienceLedger"].address,
                            load_artifact("ExperienceLedger").abi, key)
    log_id, _ = ledger.create_log("node receipts")
    token = w3.eth.contract(address=deployment.contracts["GymToken"].address,
                            abi=load_artifact("GymToken").abi)
    registry = w3.eth.contract(address=deployment.contracts["NodeRegistry"].address,
                               abi=load_artifact("NodeRegistry").abi)
    send(w3, token.functions.approve(registry.address, stake), key)
    send(w3, registry.functions.register(signer, keccak(b"SmolLM2-135M"), "http://127.0.0.1:8000",
                                         stake, log_id), key)
    return Node(Account.from_key(key).address, registry, token)


def open_challenge(node: Node, key: str = CHALLENGER_KEY, evidence: str = "bafyevidence",
                   receipt: bytes = b"a disputed receipt") -> int:
    """A challenge of a receipt digest the node's signer signed (the contract wants that)."""
    digest = keccak(receipt)
    signature = Account.from_key(devnet_account_key(6)).unsafe_sign_hash(digest).signature
    receipt = send(node.registry.w3, node.registry.functions.challenge(
        node.operator, digest, bytes(signature), evidence), key)
    return node.registry.events.ChallengeOpened().process_receipt(receipt)[0]["args"]["challengeId"]


def make_client(deployment: Deployment, key: str = ANVIL_DEV_KEYS[0], *,
                with_registry: bool = True, with_committee: bool = True) -> GovernanceClient:
    w3 = Web3(Web3.HTTPProvider(deployment.rpc_url))
    ledger = LedgerContract(w3, deployment.contracts["ExperienceLedger"].address,
                            load_artifact("ExperienceLedger").abi, key)
    return GovernanceClient(
        w3, deployment.contracts["GymGovernor"].address, load_artifact("GymGovernor").abi,
        deployment.contracts["GymToken"].address, load_artifact("GymToken").abi, ledger,
        deployment.contracts["TimelockController"].address,
        load_artifact("TimelockController").abi, curated_log_id=deployment.curated_log_id,
        private_key=key, from_block=deployment.deployment_block,
        node_registry_address=(deployment.contracts["NodeRegistry"].address if with_registry
                               else None),
        committee_address=(deployment.contracts["VerifierCommittee"].address
                           if with_committee and "VerifierCommittee" in deployment.contracts
                           else None),
        reward_distributor_address=deployment.contracts["RewardDistributor"].address)


@pytest.fixture
def deployment(ledger_devnet) -> Deployment:
    return Deployment.load(ledger_devnet.gym.deployment_file)


@pytest.fixture
def client(deployment) -> GovernanceClient:
    return make_client(deployment)


def pass_and_execute(client: GovernanceClient, proposal_id: int) -> None:
    """Three holders vote for; the voting period and timelock delay (as they are now) pass."""
    for key in ANVIL_DEV_KEYS[:3]:
        client.vote(proposal_id, "for", key=key)
    params = client.governance_parameters()
    client.advance_time(params.voting_period + 1)
    client.queue(proposal_id)
    client.advance_time(params.timelock_delay + 1)
    client.execute(proposal_id, key=ANVIL_DEV_KEYS[4])
    assert client.proposal(proposal_id).state == ProposalState.EXECUTED


@pytest.mark.anvil
def test_a_params_proposal_changes_the_governor_and_the_timelock(client, deployment):
    governor, timelock = client.governor.functions, client.timelock.functions
    before = (governor.votingDelay().call(), governor.votingPeriod().call(),
              governor.proposalThreshold().call(), governor.quorumNumerator().call(),
              timelock.getMinDelay().call())
    assert before == (1, 300, GYM, 4, 60)

    plan = client.build_params_change(voting_delay=3600, voting_period=600,
                                      proposal_threshold=5 * GYM, quorum_numerator=10,
                                      timelock_delay=120, description="Slower, safer votes.")
    proposal_id, _ = client.propose(plan)
    shown = client.proposal(proposal_id)
    assert shown.title == ("Change governance parameters: voting delay, voting period, proposal "
                           "threshold, quorum, timelock delay")
    assert [a.summary for a in client.describe_actions(shown)] == [
        "GymGovernor: set the voting delay to 3600 s (1 h)",
        "GymGovernor: set the voting period to 600 s (10 min)",
        "GymGovernor: set the proposal threshold to 5 GYM",
        "GymGovernor: set the quorum to 10% of the supply",
        "TimelockController: set the timelock delay to 120 s (2 min)"]

    pass_and_execute(client, proposal_id)
    after = (governor.votingDelay().call(), governor.votingPeriod().call(),
             governor.proposalThreshold().call(), governor.quorumNumerator().call(),
             timelock.getMinDelay().call())
    assert after == (3600, 600, 5 * GYM, 10, 120)
    assert client.governance_parameters() == GovernanceParameters(3600, 600, 5 * GYM, 10, 120)

    # The next proposal runs on the new settings.
    next_id, _ = client.propose(client.build_params_change(voting_period=900))
    later = client.proposal(next_id)
    assert later.deadline - later.snapshot == 600
    proposed_at = client.w3.eth.get_block(later.created_block)["timestamp"]
    assert later.snapshot == proposed_at + 3600
    assert later.quorum == DEVNET_SUPPLY * 10 // 100


@pytest.mark.anvil
def test_bad_params_are_refused_before_anything_is_sent(client):
    with pytest.raises(ParameterError, match="voting period must be at least 1 second"):
        client.build_params_change(voting_period=0)
    with pytest.raises(ParameterError, match="above the whole supply"):
        client.build_params_change(proposal_threshold=DEVNET_SUPPLY + 1)
    with pytest.raises(ParameterError, match="timelock delay is already 60 s"):
        client.build_params_change(timelock_delay=60)
    assert client.proposal_ids() == []


@pytest.mark.anvil
def test_the_proposer_cancels_a_pending_proposal_and_nobody_else_or_later(client):
    # A voting delay of an hour (itself set by proposal) leaves time to cancel.
    pass_and_execute(client, client.propose(client.build_params_change(voting_delay=3600))[0])

    proposer = ANVIL_DEV_KEYS[1]
    first, _ = client.propose(client.build_params_change(voting_period=900), key=proposer)
    assert client.proposal(first).state == ProposalState.PENDING
    stranger = Account.from_key(ANVIL_DEV_KEYS[2]).address
    with pytest.raises(NotProposerError, match=f"{stranger} did not make proposal {first}: only "
                                               "its proposer 0x"):
        client.cancel(first, key=ANVIL_DEV_KEYS[2])
    with pytest.raises(GovernorRevertError) as refused:  # the governor refuses it too
        client.cancel(first, key=ANVIL_DEV_KEYS[2], verify=False)
    assert refused.value.name == "GovernorUnableToCancel"
    assert f"account={stranger}" in str(refused.value)
    assert "only its proposer can, and only while it is Pending" in str(refused.value)
    client.cancel(first, key=proposer)
    assert client.proposal(first).state == ProposalState.CANCELED
    with pytest.raises(ProposalStateError, match="is Canceled: a proposal can be canceled only "
                                                 "while Pending"):
        client.cancel(first, key=proposer)

    second, _ = client.propose(client.build_params_change(quorum_numerator=6), key=proposer)
    client.vote(second, "for", key=ANVIL_DEV_KEYS[0])  # the devnet skips the voting delay
    with pytest.raises(ProposalStateError, match="is Active: a proposal can be canceled only"):
        client.cancel(second, key=proposer)
    with pytest.raises(GovernorRevertError, match="GovernorUnableToCancel"):
        client.cancel(second, key=proposer, verify=False)
    assert client.proposal(second).state == ProposalState.ACTIVE
    with pytest.raises(GovernorRevertError, match="GovernorNonexistentProposal"):
        client.cancel(12345678, key=proposer)


@pytest.mark.anvil
def test_a_devnet_cancel_is_judged_at_the_time_it_will_be_mined(client):
    """An idle Anvil's head block keeps its time while the next block takes a later one: with
    the devnet's 1 s voting delay, a proposal that still reads Pending is Active by then."""
    proposal_id, _ = client.propose(client.build_params_change(voting_period=900))
    client.w3.provider.make_request("evm_increaseTime", [10])  # the next block: 10 s later
    assert client.proposal(proposal_id).state == ProposalState.PENDING  # as the head block says
    with pytest.raises(ProposalStateError, match="is Active: a proposal can be canceled only"):
        client.cancel(proposal_id)
    with pytest.raises(GovernorRevertError) as refused:  # sent anyway: mined, reverted, decoded
        client.cancel(proposal_id, verify=False)
    assert refused.value.name == "GovernorUnableToCancel"
    assert client.proposal(proposal_id).state == ProposalState.ACTIVE


@pytest.mark.anvil
def test_a_slash_proposal_moves_stake_from_the_node_to_the_beneficiary(client, deployment):
    node = register_node(deployment)
    challenge_id = open_challenge(node)
    timelock = client.timelock_address
    registry_balance = node.token.functions.balanceOf(node.registry.address).call()
    treasury = node.token.functions.balanceOf(timelock).call()
    assert registry_balance == STAKE and treasury == 1_250 * GYM

    plan = client.build_slash(node.operator, 120 * GYM, "Served a receipt it never computed.")
    assert (plan.challenge_id, plan.beneficiary, plan.amount) == (challenge_id, timelock, 120 * GYM)
    assert plan.description.startswith(f"# Slash node {node.operator}: 120 GYM\n\nServed a receipt")
    assert "Stake: 300 GYM -> 180 GYM" in plan.description
    assert f"Challenge #{challenge_id} (Open) by " in plan.description
    assert "evidence ipfs://bafyevidence" in plan.description
    assert f"Slashed GYM go to {timelock} (the DAO timelock, its treasury)" in plan.description
    proposal_id, _ = client.propose(plan)
    (action,) = client.describe_actions(client.proposal(proposal_id))
    assert action.summary == (f"NodeRegistry: slash node {node.operator} by 120 GYM for challenge "
                              f"#{challenge_id}, paying {timelock} (TimelockController)")

    pass_and_execute(client, proposal_id)
    assert node.registry.functions.nodeOf(node.operator).call()[4] == 180 * GYM
    assert client.node(node.operator).stake == 180 * GYM
    assert node.registry.functions.totalStaked().call() == 180 * GYM
    assert node.token.functions.balanceOf(node.registry.address).call() == 180 * GYM
    assert node.token.functions.balanceOf(timelock).call() == treasury + 120 * GYM
    assert client.challenge(challenge_id).status == ChallengeStatus.UPHELD
    slashed = node.registry.events.NodeSlashed().get_logs(from_block=deployment.deployment_block)
    assert [(e["args"]["operator"], e["args"]["amount"], e["args"]["beneficiary"])
            for e in slashed] == [(node.operator, 120 * GYM, timelock)]

    # One receipt is slashed once (issue 44, finding 10): a second proposal for it is refused
    # before anything is sent, and the registry itself refuses it (forge tests).
    with pytest.raises(SlashError, match="no open challenge against node"):
        client.build_slash(node.operator, 10 * GYM, "Again.")
    with pytest.raises(SlashError, match=f"already slashed \\(challenge #{challenge_id}\\): one "
                                         "receipt is slashed at most once"):
        client.build_slash(node.operator, 10 * GYM, "Again.", challenge_id=challenge_id,
                           beneficiary="challenger")
    assert client.node(node.operator).stake == 180 * GYM


@pytest.mark.anvil
def test_bad_slash_input_is_refused_before_anything_is_sent(client, deployment):
    node = register_node(deployment)
    nobody = Account.from_key(devnet_account_key(8)).address
    with pytest.raises(SlashError, match=f"unknown node {nobody}: the NodeRegistry has no node"):
        client.build_slash(nobody, GYM, "reason")
    with pytest.raises(SlashError, match=f"{NODE_SIGNER} is the receipt signer of node "
                                         f"{node.operator}, not an operator"):
        client.build_slash(NODE_SIGNER, GYM, "reason")
    with pytest.raises(SlashError, match="cannot slash 300.5 GYM: node .* stakes only 300 GYM"):
        client.build_slash(node.operator, 300 * GYM + GYM // 2, "reason")
    with pytest.raises(SlashError, match="more than 0 GYM"):
        client.build_slash(node.operator, 0, "reason")
    with pytest.raises(SlashError, match="no open challenge against node"):
        client.build_slash(node.operator, GYM, "reason")
    challenge_id = open_challenge(node)
    second = open_challenge(node, evidence="bafysecond", receipt=b"another disputed receipt")
    with pytest.raises(SlashError, match=f"2 challenges .* are open \\(#{challenge_id}, "
                                         f"#{second}\\): pick one"):
        client.build_slash(node.operator, GYM, "reason")
    with pytest.raises(SlashError, match="no challenge #99 exists"):
        client.build_slash(node.operator, GYM, "reason", challenge_id=99)
    with pytest.raises(SlashError, match="--reason"):
        client.build_slash(node.operator, GYM, "  ", challenge_id=challenge_id)
    with pytest.raises(SlashError, match="cannot go to 0x0000000000000000000000000000000000000000"):
        client.build_slash(node.operator, GYM, "reason", challenge_id=challenge_id,
                           beneficiary="0x" + "00" * 20)
    with pytest.raises(GovernanceError, match="beneficiary is an address"):
        client.build_slash(node.operator, GYM, "reason", challenge_id=challenge_id,
                           beneficiary="alice")
    with pytest.raises(GovernanceError, match="no NodeRegistry is known"):
        make_client(deployment, with_registry=False).build_slash(node.operator, GYM, "reason")
    assert client.proposal_ids() == []


@pytest.mark.anvil
def test_slash_and_cancel_through_the_cli(ledger_devnet, deployment):
    gym_env = ledger_devnet.gym
    node = register_node(deployment)
    challenge_id = open_challenge(node)
    # The registry of the deployment, named explicitly (GYM_NODE_REGISTRY overrides it).
    env = {"GYM_NODE_REGISTRY": node.registry.address}

    def gym(*args: str, ok: bool = True):
        result = gym_env.run(*args, extra_env=env)
        assert (result.returncode == 0) == ok, (args, result.stdout, result.stderr)
        if not ok:
            assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr
        return result

    assert "stakes only 300 GYM" in gym("gov", "propose-slash", node.operator, "--amount", "301",
                                        "--reason", "x", "--account", "1", ok=False).stderr
    unknown = Account.from_key(devnet_account_key(8)).address
    assert f"unknown node {unknown}" in gym("gov", "propose-slash", unknown, "--amount", "1",
                                            "--reason", "x", "--account", "1", ok=False).stderr
    assert "--amount is an amount of GYM such as 50 or 12.5, not 'lots'" in gym(
        "gov", "propose-slash", node.operator, "--amount", "lots", "--reason", "x",
        "--account", "1", ok=False).stderr

    proposed = gym("gov", "propose-slash", node.operator, "--amount", "50", "--reason",
                   "Its receipt does not match the model.", "--beneficiary", "challenger",
                   "--challenge", str(challenge_id), "--account", "1").stdout
    assert f"# Slash node {node.operator}: 50 GYM" in proposed and "Pending" in proposed
    shown = json.loads(gym("gov", "show", "1", "--json").stdout)
    challenger = Account.from_key(CHALLENGER_KEY).address
    assert shown["actions"] == [{
        "target": node.registry.address, "contract": "NodeRegistry", "function": "slash",
        "summary": f"NodeRegistry: slash node {node.operator} by 50 GYM for challenge "
                   f"#{challenge_id}, paying {challenger}"}]
    assert re.search(r"Slash node 0x[0-9a-fA-F]+: 50 GYM\s*│ Pending.*│ slash 50 GYM",
                     gym("gov", "list").stdout)

    assert "only its proposer" in gym("gov", "cancel", "1", "--account", "2", ok=False).stderr
    for account in ("1", "2", "3"):
        gym("gov", "vote", "1", "for", "--account", account)
    assert "is Active: a proposal can be canceled only while Pending" in gym(
        "gov", "cancel", "1", "--account", "1", ok=False).stderr
    gym("devnet", "mine", "--seconds", "301")
    gym("gov", "queue", "1", "--account", "0")
    gym("devnet", "mine", "--seconds", "61")
    executed = gym("gov", "execute", "1", "--account", "0").stdout
    assert f"node {node.operator}: stake now 250 GYM" in executed
    assert node.token.functions.balanceOf(challenger).call() == 50 * GYM


@pytest.mark.anvil
def test_a_reward_budget_proposal_through_the_cli_applies_from_the_epoch_it_executes_in(
        ledger_devnet, deployment):
    from reward_epochs import end_epoch

    from committee.rewards.distributor import RewardDistributor

    gym_env = ledger_devnet.gym
    distributor = RewardDistributor(Web3(Web3.HTTPProvider(deployment.rpc_url)),
                                    deployment.contracts["RewardDistributor"].address)
    assert distributor.current_epoch() == 0
    assert distributor.budget_of(0) == (100 * GYM, (4000, 3000, 1500, 1500))

    def gym(*args: str, ok: bool = True):
        result = gym_env.run(*args)
        assert (result.returncode == 0) == ok, (args, result.stdout, result.stderr)
        if not ok:
            assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr
        return result

    for options, why in (
            (["--reward-split", "40,30,15,10"], "'40,30,15,10' sums to 95"),
            (["--reward-split", "4000,3000,1500,1500"],
             "the reward budget is already 100 GYM per epoch, split data 40%"),
            (["--reward-budget", "lots"], "--reward-budget is an amount of GYM"),
            (["--reward-appeal-window", "8d"], "at most 604800 s (7 d) (MAX_APPEAL_WINDOW)")):
        assert why in gym("gov", "propose-params", *options, "--account", "1", ok=False).stderr
    assert "epoch 0 has no attested reward root: nothing to reverse" in gym(
        "gov", "propose-reverse-rewards", "0", "--reason", "x", "--account", "1",
        ok=False).stderr

    proposed = gym("gov", "propose-params", "--reward-budget", "150", "--reward-split",
                   "50,20,15,15", "--reward-appeal-window", "10m", "--description",
                   "Pay more, check longer.", "--account", "1").stdout
    assert "# Change reward parameters: budget, split, appeal window" in proposed
    assert "- reward budget: 100 GYM -> 150 GYM per epoch" in proposed
    assert "- reward appeal window: 300 s (5 min) -> 600 s (10 min)" in proposed
    assert "(epoch 0 now)" in proposed and "Pending" in proposed
    shown = json.loads(gym("gov", "show", "1", "--json").stdout)
    assert [(a["contract"], a["function"]) for a in shown["actions"]] == [
        ("RewardDistributor", "setBudget"), ("RewardDistributor", "setAppealWindow")]
    assert shown["actions"][0]["summary"] == (
        "RewardDistributor: set the reward budget to 150 GYM per epoch, split data 50%, "
        "compute 20%, verification 15%, availability 15%, from the epoch it executes in")
    assert "reward budget -> 150 GYM; reward appeal window -> 600 s" in \
        " ".join(gym("gov", "list").stdout.split())

    for account in ("1", "2", "3"):
        gym("gov", "vote", "1", "for", "--account", account)
    gym("devnet", "mine", "--seconds", "301")
    gym("gov", "queue", "1", "--account", "0")
    gym("devnet", "mine", "--seconds", "61")
    end_epoch(distributor, 0)  # executed in epoch 1: epoch 0 keeps its budget
    executed = gym("gov", "execute", "1", "--account", "0").stdout
    assert ("reward budget now 150 GYM per epoch from epoch 1, split data 50%, compute 20%, "
            "verification 15%, availability 15%; reward appeal window 600 s (10 min)"
            ) in " ".join(executed.split())
    current = distributor.current_epoch()
    assert current == 1
    assert distributor.budget_of(current) == (150 * GYM, (5000, 2000, 1500, 1500))
    assert distributor.budget_of(0) == (100 * GYM, (4000, 3000, 1500, 1500))
    assert distributor.value("appealWindow") == 600
