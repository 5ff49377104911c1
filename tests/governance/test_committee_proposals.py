"""Proposals on the VerifierCommittee: reverse a settlement (`gym gov propose-reverse`) and set
the appeal window (`gym gov propose-appeal-window`), on a real Anvil with a settled challenge;
reverse an attested reward root on the RewardDistributor (`gym gov propose-reverse-rewards`);
the refusals before anything is sent; the decoding of the actions, offline."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from committee_world import CHALLENGER_KEY, VERIFIER_KEYS, VERIFIER_STAKE, committee_world
from eth_account import Account
from eth_utils import keccak

from committee.client import ChallengeState
from committee.rewards.distributor import EpochStatus
from committee.rewards.table import Settlement
from contracts import load_artifact
from contracts.devnet_accounts import devnet_account_key
from contracts.gym_token import GYM
from devnet.deploy import Deployment
from governance.appeals import AppealWindowProposal, ReverseProposal, RootReverseProposal
from governance.errors import CommitteeProposalError, GovernanceError, ParameterError
from governance.proposals import ActionDecoder, parse_duration

sys.path.insert(0, str(Path(__file__).parent))  # the slash tests' DAO client and vote helper
from test_params_and_slash import make_client, pass_and_execute

COMMITTEE = "0x" + "44" * 20
DISTRIBUTOR = "0x" + "55" * 20
DAY = 86400


# -- offline ----------------------------------------------------------------------------------


def test_durations_read_as_seconds_or_with_units():
    assert [parse_duration(t) for t in ("300", "30s", "5m", "5min", "2h", "1d", "1h30m",
                                        "1d 2h", " 7D ")] == [
        300, 30, 300, 300, 7200, DAY, 5400, DAY + 7200, 7 * DAY]
    for bad in ("", "five", "5x", "m5", "-5", "1.5h", "5 m s"):
        with pytest.raises(ParameterError, match="30s, 5m, 2h, 1d or 1h30m"):
            parse_duration(bad, "the appeal window")


def test_both_committee_actions_decode_readably():
    decoder = ActionDecoder({COMMITTEE: ("VerifierCommittee",
                                         load_artifact("VerifierCommittee").abi)})
    reverse = ReverseProposal(COMMITTEE, 3, "")
    (target,), (value,), (calldata,) = reverse.actions
    assert calldata[:4] == keccak(text="reverse(uint256)")[:4] and value == 0
    action = decoder.decode(target, calldata)
    assert (action.contract, action.function, action.args) == ("VerifierCommittee", "reverse",
                                                               {"challengeId": 3})
    assert action.short == "reverse committee challenge 3"
    assert action.summary == ("VerifierCommittee: reverse committee challenge 3 (its settled "
                              "verdict flips; the verifiers that signed it are slashed)")
    window = decoder.decode(COMMITTEE, AppealWindowProposal(COMMITTEE, 300, 300, "").calldata)
    assert window.summary == "VerifierCommittee: set the appeal window to 300 s (5 min)"
    assert window.short == "appeal window -> 300 s (5 min)"


def test_a_reward_root_reversal_decodes_readably():
    decoder = ActionDecoder({DISTRIBUTOR: ("RewardDistributor",
                                           load_artifact("RewardDistributor").abi)})
    (target,), (value,), (calldata,) = RootReverseProposal(DISTRIBUTOR, 3, "").actions
    action = decoder.decode(target, calldata)
    assert (action.contract, action.function, action.args, value) == (
        "RewardDistributor", "reverse", {"epoch": 3}, 0)
    assert action.summary == ("RewardDistributor: reverse the attested reward root of epoch 3 "
                              "(nothing is paid from it; the epoch may be attested again)")
    assert action.short == "reverse reward root of epoch 3"


# -- on Anvil ---------------------------------------------------------------------------------


@pytest.fixture
def deployment(ledger_devnet) -> Deployment:
    return Deployment.load(ledger_devnet.gym.deployment_file)


@pytest.fixture
def world(deployment):
    return committee_world(deployment)


@pytest.mark.anvil
def test_reversals_that_could_not_execute_are_refused_before_anything_is_sent(deployment, world):
    client = make_client(deployment)
    with pytest.raises(CommitteeProposalError, match="no committee challenge 99: the "
                                                     "VerifierCommittee has none"):
        client.build_reverse(99, "wrong")
    open_id, digest = world.open(1)
    with pytest.raises(CommitteeProposalError, match="no committee challenge 99: the "
                                                     "VerifierCommittee has 1 challenge "):
        client.build_reverse(99, "wrong")
    with pytest.raises(CommitteeProposalError, match=f"committee challenge {open_id} is open, not "
                                                     "settled: no verdict is settled yet"):
        client.build_reverse(open_id, "wrong")
    world.settle(open_id, digest)
    assert client.committee_challenge(open_id).status == ChallengeState.SETTLED
    # The devnet's 300 s window is shorter than voting (1 + 300 s) plus the timelock (60 s).
    with pytest.raises(CommitteeProposalError) as refused:
        client.build_reverse(open_id, "wrong")
    message = str(refused.value)
    assert f"the appeal window of committee challenge {open_id} ends at " in message
    assert ", in 29" in message or ", in 30" in message  # ~300 s left
    assert ("a proposal made now executes at the earliest in 363 s (6 min 3 s) (voting delay 1 s "
            "+ voting period 300 s + timelock delay 60 s + 2 s of blocks): it could never "
            "reverse in time") in message
    with pytest.raises(CommitteeProposalError, match="--reason"):
        client.build_reverse(open_id, "  ")
    with pytest.raises(CommitteeProposalError, match="at most 604800 s .*MAX_APPEAL_WINDOW.*, not "
                                                     "691200 s"):
        client.build_appeal_window(8 * DAY)
    with pytest.raises(CommitteeProposalError, match="already 300 s"):
        client.build_appeal_window(300)
    with pytest.raises(GovernanceError, match="no VerifierCommittee is known"):
        make_client(deployment, with_committee=False).build_reverse(open_id, "wrong")
    assert client.proposal_ids() == []


@pytest.mark.anvil
def test_a_reverse_proposal_slashes_the_signers_within_a_raised_appeal_window(deployment, world):
    client = make_client(deployment)
    committee = world.client()
    timelock = client.timelock_address

    raise_window = client.build_appeal_window(parse_duration("1d"), "Let the DAO act.")
    assert raise_window.description.startswith("# Set the committee's appeal window to 86400 s "
                                               "(1 d)\n\nLet the DAO act.")
    assert "- appeal window: 300 s (5 min) -> 86400 s (1 d)" in raise_window.description
    window_id, _ = client.propose(raise_window)
    (action,) = client.describe_actions(client.proposal(window_id))
    assert action.summary == "VerifierCommittee: set the appeal window to 86400 s (1 d)"
    pass_and_execute(client, window_id)
    assert committee.appeal_window() == DAY

    challenge_id, digest = world.open(1)
    world.settle(challenge_id, digest, signers=(0, 2), reason="sampling")
    settled = committee.challenge(challenge_id)
    assert settled.status == ChallengeState.SETTLED and settled.signers == [0, 2]
    slash = committee.value("verifierSlash")
    assert 0 < slash < VERIFIER_STAKE

    plan = client.build_reverse(challenge_id, "The receipt verifies: the verifiers misjudged.")
    challenger = Account.from_key(CHALLENGER_KEY).address
    text = plan.description
    assert text.startswith(f"# Reverse committee challenge {challenge_id}: upheld against node "
                           f"{world.operator}\n\nThe receipt verifies: the verifiers misjudged.")
    assert (f"Challenge {challenge_id}: opened by {challenger} against node operator "
            f"{world.operator}'s receipt 0x{digest.hex()}, bond 10 GYM, evidence ipfs://bafy1"
            ) in text
    assert "Settled verdict: upheld (reason 'sampling') at " in text
    assert "signed by verifier slots 0, 2" in text
    assert f"each signer is slashed {slash // GYM} GYM each, capped at its stake" in text
    proposal_id, _ = client.propose(plan)
    (action,) = client.describe_actions(client.proposal(proposal_id))
    assert (action.function, action.short) == ("reverse",
                                                f"reverse committee challenge {challenge_id}")
    governance_before = world.token.functions.balanceOf(timelock).call()

    pass_and_execute(client, proposal_id)
    assert committee.challenge(challenge_id).status == ChallengeState.REVERSED
    assert [s.stake for s in committee.slots()] == [VERIFIER_STAKE - slash, VERIFIER_STAKE,
                                                    VERIFIER_STAKE - slash]
    slashed = committee.events("VerifierSlashed", challengeId=challenge_id)
    verifiers = [Account.from_key(VERIFIER_KEYS[i]).address for i in (0, 2)]
    assert [(args["verifier"], args["amount"], args["stake"]) for _, args in slashed] == [
        (v, slash, VERIFIER_STAKE - slash) for v in verifiers]
    assert world.token.functions.balanceOf(timelock).call() == governance_before + 2 * slash
    with pytest.raises(CommitteeProposalError, match="is reversed, not settled: it was reversed "
                                                     "already"):
        client.build_reverse(challenge_id, "again")


@pytest.mark.anvil
def test_reverse_and_appeal_window_through_the_cli(ledger_devnet, deployment, world):
    gym_env = ledger_devnet.gym

    def gym(*args: str, ok: bool = True):
        result = gym_env.run(*args)
        assert (result.returncode == 0) == ok, (args, result.stdout, result.stderr)
        if not ok:
            assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr
            assert result.stderr.count("\n") == 1, result.stderr  # one line
        return result

    challenge_id, digest = world.open(1)
    assert "no committee challenge 7" in gym("gov", "propose-reverse", "7", "--reason", "x",
                                             "--account", "1", ok=False).stderr
    assert f"committee challenge {challenge_id} is open, not settled" in gym(
        "gov", "propose-reverse", str(challenge_id), "--reason", "x", "--account", "1",
        ok=False).stderr
    world.settle(challenge_id, digest)
    assert "it could never reverse in time" in gym(
        "gov", "propose-reverse", str(challenge_id), "--reason", "x", "--account", "1",
        ok=False).stderr
    assert "at most 604800 s (7 d) (MAX_APPEAL_WINDOW)" in gym(
        "gov", "propose-appeal-window", "8d", "--account", "1", ok=False).stderr
    assert "30s, 5m, 2h, 1d or 1h30m, not 'soon'" in gym(
        "gov", "propose-appeal-window", "soon", "--account", "1", ok=False).stderr

    def carry(n: str) -> str:
        for account in ("1", "2", "3"):
            gym("gov", "vote", n, "for", "--account", account)
        gym("devnet", "mine", "--seconds", "301")
        gym("gov", "queue", n, "--account", "0")
        gym("devnet", "mine", "--seconds", "61")
        return gym("gov", "execute", n, "--account", "0").stdout

    proposed = gym("gov", "propose-appeal-window", "1d", "--account", "1").stdout
    assert "# Set the committee's appeal window to 86400 s (1 d)" in proposed
    assert "committee appeal window now 86400 s (1 d)" in carry("1")

    proposed = gym("gov", "propose-reverse", str(challenge_id), "--reason",
                   "The receipt verifies.", "--account", "1").stdout
    assert f"# Reverse committee challenge {challenge_id}: upheld" in proposed
    assert "Pending" in proposed
    shown = json.loads(gym("gov", "show", "2", "--json").stdout)
    assert [(a["contract"], a["function"], a["summary"]) for a in shown["actions"]] == [
        ("VerifierCommittee", "reverse",
         (f"VerifierCommittee: reverse committee challenge {challenge_id} (its settled "
          "verdict flips; the verifiers that signed it are slashed)"))]
    assert f"reverse committee challenge {challenge_id}" in gym("gov", "list").stdout
    executed = carry("2")
    slash = world.client().value("verifierSlash")
    left = f"{(VERIFIER_STAKE - slash) // GYM} GYM"
    assert f"committee challenge {challenge_id}: reversed; signers' stakes now slot 0 " in executed
    assert executed.count(left) == 2, executed
    assert world.client().challenge(challenge_id).status == ChallengeState.REVERSED


@pytest.mark.anvil
def test_a_reward_root_is_reversed_by_proposal_only_within_its_own_appeal_window(
        deployment, tmp_path):
    from committee_world import register_verifiers
    from reward_epochs import attest_table

    from ledger import LocalBlockStore

    world = register_verifiers(deployment)
    content = LocalBlockStore(tmp_path / "content")
    client = make_client(deployment)
    distributor = client.reward_distributor
    signers = tuple(Account.from_key(devnet_account_key(i)).address for i in (1, 2))
    attest_table(world, content, 0, settlements=(Settlement(1, signers),))
    with pytest.raises(CommitteeProposalError, match="epoch 5 has no attested reward root"):
        client.build_root_reverse(5, "wrong")
    with pytest.raises(CommitteeProposalError, match="--reason"):
        client.build_root_reverse(0, "  ")
    # The devnet's 300 s window is shorter than voting (1 + 300 s) plus the timelock (60 s).
    with pytest.raises(CommitteeProposalError, match=r"the appeal window of epoch 0's reward "
                       r"root ends at .*: it could never reverse in time\. A root's window is "
                       r"fixed when it is attested"):
        client.build_root_reverse(0, "wrong")

    # A longer window, by proposal: for roots attested afterwards, not epoch 0's.
    pass_and_execute(client, client.propose(client.build_params_change(
        reward_appeal_window=DAY))[0])
    with pytest.raises(CommitteeProposalError, match="could never reverse in time"):
        client.build_root_reverse(0, "wrong")
    table = attest_table(world, content, 1, settlements=(Settlement(2, signers),))
    standing = distributor.epoch_root(1)
    assert standing.final_at - standing.attested_at == DAY

    plan = client.build_root_reverse(1, "It pays a settlement the DAO reversed.")
    text = plan.description
    first, last = distributor.epoch_bounds(1)
    assert text.startswith("# Reverse the reward root of epoch 1\n\nIt pays a settlement the "
                           "DAO reversed.")
    assert (f"Epoch 1 (blocks {first}-{last}): root 0x{table.root.hex()}, total 15 GYM, table "
            f"ipfs://{standing.table_cid}") in text
    assert f"Action: RewardDistributor {distributor.address}.reverse(1)" in text
    proposal_id, _ = client.propose(plan)
    (action,) = client.describe_actions(client.proposal(proposal_id))
    assert action.short == "reverse reward root of epoch 1"
    pass_and_execute(client, proposal_id)
    reversed_ = distributor.epoch_root(1)
    assert (reversed_.status, reversed_.root) == (EpochStatus.REVERSED, table.root)
    assert distributor.epoch_root(0).status == EpochStatus.ATTESTED
    with pytest.raises(CommitteeProposalError, match="epoch 1 was reversed already"):
        client.build_root_reverse(1, "again")
