"""`gym gov` and `gym devnet mine` driven as a user types them, on a real Anvil."""

from __future__ import annotations

import doctest
import json
import re
import subprocess

import pytest
from eth_account import Account

import governance
from contracts.devnet_accounts import devnet_account_key
from contracts.toolchain import foundry_binary
from devnet.settings import ANVIL_DEV_KEYS, DEVNET_DIR

SAMPLES = DEVNET_DIR / "samples" / "experiences.jsonl"
READ_BALLOT_JS = ("const b = JSON.parse(require('fs').readFileSync(process.argv[1]));"
                  "console.log(b.message.proposalId, b.message.nonce, b.domain.chainId)")


def test_package_docstring_example_runs():
    result = doctest.testmod(governance, verbose=False)
    assert result.attempted > 0 and result.failed == 0


def test_account_keys_are_anvils_dev_accounts():
    from eth_account import Account

    from contracts.devnet_accounts import ANVIL_MNEMONIC

    Account.enable_unaudited_hdwallet_features()
    derived = [Account.from_mnemonic(ANVIL_MNEMONIC, account_path=f"m/44'/60'/0'/0/{i}")
               for i in range(6)]
    assert [a.key.to_0x_hex() for a in derived[:5]] == list(ANVIL_DEV_KEYS)
    assert devnet_account_key(5) == derived[5].key.to_0x_hex()
    # the addresses Anvil prints for accounts 0 and 5 at start-up
    assert derived[0].address == "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
    assert derived[5].address == "0x9965507D1a55bcC2695C58ba16FB37d819B0A4dc"
    with pytest.raises(ValueError, match="0..19"):
        devnet_account_key(20)


def _checked(gym_env):
    """`gym` as the tests call it: each run must exit 0 (``ok=False``: must fail)."""
    def gym(*args: str, ok: bool = True, **kwargs):
        result = gym_env.run(*args, **kwargs)
        assert (result.returncode == 0) == ok, (args, result.stdout, result.stderr)
        return result

    return gym


def _publish_samples(gym) -> None:
    """The devnet up, and the sample experiences published as alice/math."""
    gym("devnet", "up")
    gym("ledger", "create", "alice/math")
    gym("ledger", "append", "alice/math", str(SAMPLES))
    gym("ledger", "publish", "alice/math")


@pytest.mark.anvil
def test_curation_through_the_cli(gym_env, ledger_devnet, tmp_path):
    gym = _checked(gym_env)
    _publish_samples(gym)
    assert "no proposals yet" in gym("gov", "list").stdout

    proposed = gym("gov", "propose-curation", "--from-log", "alice/math", "--indices", "0,2",
                   "--description", "Two rules worth keeping.", "--account", "1").stdout
    assert "# Curate 2 entries from alice/math" in proposed and "Two rules worth keeping." in proposed
    # the number users type next, then the full id
    assert re.search(r"^proposed proposal 1 \(id \d{60,}; tx 0x[0-9a-f]{64}\)$", proposed,
                     re.MULTILINE)
    assert re.search(r"^proposal 1: Pending", proposed, re.MULTILINE)
    assert re.search(r"Pending; voting opens after \d{4}-\d\d-\d\d .* UTC", proposed)
    document_cid = re.search(r"Proposal document: ipfs://(\S+)", proposed).group(1)
    assert json.loads(gym("ipfs", "cat", document_cid).stdout)["source"]["log"] == "alice/math"

    voted = gym("gov", "vote", "1", "for", "--reason", "useful", "--account", "1").stdout
    assert "voted for with 1,000 GYM" in voted
    assert re.search(r"Active; voting closes at .* UTC \(in \d+ min \d+ s\); on the devnet: "
                     r"`gym devnet mine --seconds \d+`", voted)
    gym("gov", "vote", "1", "abstain", extra_env={"GYM_VOTER_KEY": ANVIL_DEV_KEYS[2]})
    # Account 3 signs its ballot off-line with the bundled cast, as the README says; account 0
    # relays it and pays the gas.
    voter = Account.from_key(ANVIL_DEV_KEYS[3])
    proposal_id = json.loads(gym("gov", "show", "1", "--json").stdout)["id"]
    assert len(proposal_id) > 16  # past what a JavaScript number holds exactly
    ballot = tmp_path / "ballot.json"
    ballot.write_text(gym("gov", "ballot", "1", "for", "--voter", voter.address).stdout)
    read_by_js = subprocess.run(["node", "-e", READ_BALLOT_JS, str(ballot)], capture_output=True,
                                text=True, check=True).stdout.split()
    assert read_by_js == [proposal_id, "0", "31337"]
    signed = subprocess.run(
        [str(foundry_binary("cast")), "wallet", "sign", "--data", "--from-file", str(ballot),
         "--private-key", voter.key.to_0x_hex()], capture_output=True, text=True, check=False)
    assert signed.returncode == 0, signed.stderr
    signature = signed.stdout.strip()
    typed = json.loads(ballot.read_text())  # eth_account reads the same ballot the same way
    assert signature == Account.sign_typed_data(voter.key, full_message=typed).signature.to_0x_hex()
    relay = ("gov", "relay", "1", "for", "--voter", voter.address, "--signature", signature,
             "--account", "0")
    assert f"relayed {voter.address}'s vote for" in gym(*relay).stdout
    assert "has already voted" in gym(*relay, ok=False).stderr  # replayed

    listed = gym("gov", "list").stdout
    assert re.search(r"Curate 2 entries from alice/math\s*│ Active\s*│ 2,000 GYM\s*│ 0 GYM\s*│ "
                     r"1,000 GYM\s*│ 250 GYM", listed)  # quorum: 4% of 6,250 GYM
    refused = gym("gov", "queue", "1", "--account", "0", ok=False).stderr
    assert "GovernorUnexpectedProposalState" in refused and "the proposal is Active, this needs " \
        "it Succeeded" in refused and "Traceback" not in refused

    gym("devnet", "mine", "--seconds", "301")
    late = gym("gov", "vote", "1", "against", "--account", "4", ok=False).stderr
    assert re.fullmatch(r"error: proposal \d+ is Succeeded: votes are taken only while it is "
                        r"Active, after (\S+ \S+ UTC) until (\S+ \S+ UTC) \(chain time now "
                        r"(\S+ \S+ UTC)\)\n", late), late
    queued = gym("gov", "queue", "1", "--account", "4").stdout
    assert "Queued; executable at" in queued and "gym devnet mine --seconds" in queued
    assert "TimelockUnexpectedOperationState" in gym("gov", "execute", "1", "--account", "4",
                                                     ok=False).stderr
    mined = gym("devnet", "mine", "--seconds", "61", "--blocks", "3").stdout
    # At least the 61 s asked for; more when the wall clock moved on since the last block (an
    # idle Anvil stamps new blocks with the wall clock's time plus what was skipped).
    moved = re.search(r"mined 3 blocks \(head block \d+\); chain time \d{4}-\d\d-\d\d "
                      r"\d\d:\d\d:\d\d UTC \(\+(\d+) s(?:: 61 s skipped, (\d+) s the devnet "
                      r"idled since its previous block)?\)$", mined.strip())
    assert moved, mined
    assert int(moved.group(1)) == 61 + int(moved.group(2) or 0)
    executed = gym("gov", "execute", "1", "--account", "4").stdout
    assert "curated library 'gym/curated' (log 1): size 2, root 0x" in executed
    shown = json.loads(gym("gov", "show", "1", "--json").stdout)
    assert (shown["state"], shown["for"], shown["abstain"]) == ("Executed", str(2000 * 10**18),
                                                                str(1000 * 10**18))
    assert shown["document_cid"] == document_cid


@pytest.mark.anvil
def test_a_token_holder_elsewhere_proposes_a_published_log_from_the_chain(gym_env, ledger_devnet,
                                                                          tmp_path):
    """Issue 44, finding 3: a token holder whose own store holds nothing proposes curating a
    published log by its name or on-chain id, read from the chain and the content endpoint."""
    gym = _checked(gym_env)
    _publish_samples(gym)
    endpoint = json.loads(gym_env.deployment_file.read_text())["content_api"]
    holder = {"GYM_DATA_DIR": str(tmp_path / "holder"), "GYM_IPFS_API": endpoint}

    proposed = gym("gov", "propose-curation", "--from-log", "alice/math", "--indices", "1",
                   "--account", "1", extra_env=holder).stdout
    assert "# Curate 1 entry from alice/math" in proposed
    assert not (tmp_path / "holder" / "ipfs").exists()  # nothing read from a local store
    document_cid = re.search(r"Proposal document: ipfs://(\S+)", proposed).group(1)
    document = json.loads(gym("ipfs", "cat", document_cid).stdout)
    log_id = document["source"]["log_id"]
    assert [e["index"] for e in document["entries"]] == [1]
    # the same proof as the publisher's own store gives
    local = gym("gov", "propose-curation", "--from-log", "alice/math", "--indices", "1",
                "--description", "From the publisher's own store.", "--account", "2").stdout
    mine = json.loads(gym("ipfs", "cat", re.search(r"ipfs://(\S+)", local).group(1)).stdout)
    assert mine == document

    by_id = gym("gov", "propose-curation", "--from-log", str(log_id), "--indices", "0,2",
                "--account", "3", extra_env=holder).stdout
    assert "# Curate 2 entries from alice/math" in by_id
    missing = gym("gov", "propose-curation", "--from-log", "alice/math", "--indices", "99",
                  "--account", "1", ok=False, extra_env=holder)
    assert "has no anchored leaf 99" in missing.stderr
    unknown = gym("gov", "propose-curation", "--from-log", "bob/none", "--indices", "0",
                  "--account", "1", ok=False, extra_env=holder)
    assert "no log named 'bob/none' was created on chain" in unknown.stderr


@pytest.mark.anvil
def test_cli_refusals_are_one_clear_line(gym_env, ledger_devnet):
    assert gym_env.run("devnet", "up").returncode == 0
    assert gym_env.run("ledger", "create", "alice/math").returncode == 0
    assert gym_env.run("ledger", "append", "alice/math", str(SAMPLES)).returncode == 0

    def refused(*args: str) -> str:
        result = gym_env.run(*args)
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
        assert result.stderr.startswith("error: ")
        return result.stderr

    propose = ("gov", "propose-curation", "--indices", "0", "--account", "0", "--from-log")
    # a log this store lacks is looked up on chain, the published logs' record
    assert "no log named 'bob/none' was created on chain" in refused(*propose, "bob/none")
    assert ("leaf 0 of log 'alice/math' is not anchored yet: the log has 5 leaves (0-4), its "
            "last anchored checkpoint covers no leaves; run `gym ledger publish alice/math`"
            ) in refused(*propose, "alice/math")
    assert gym_env.run("ledger", "publish", "alice/math").returncode == 0
    assert ("log 'alice/math' has no leaf 9: it has 5 leaves (0-4)\n") == refused(
        "gov", "propose-curation", "--from-log", "alice/math", "--indices", "0,9",
        "--account", "0").removeprefix("error: ")
    more = gym_env.data_dir / "more.jsonl"  # five more rules, the samples reworded
    more.write_text("".join(
        json.dumps({**json.loads(line), "text": json.loads(line)["text"] + " Always."}) + "\n"
        for line in SAMPLES.read_text().splitlines()))
    assert gym_env.run("ledger", "append", "alice/math", str(more)).returncode == 0
    assert ("leaf 7 of log 'alice/math' is not anchored yet: the log has 10 leaves (0-9), its "
            "last anchored checkpoint covers 5 leaves (0-4); run `gym ledger publish "
            "alice/math` to anchor the rest") in refused(
        "gov", "propose-curation", "--from-log", "alice/math", "--indices", "0,7", "--account", "0")
    assert gym_env.run(*propose, "alice/math").returncode == 0
    assert "had no votes at the proposal's snapshot" in refused("gov", "vote", "1", "for",
                                                                "--account", "7")
    assert "a vote is for, against or abstain, not 'maybe'" in refused("gov", "vote", "1", "maybe",
                                                                       "--account", "1")
    assert "there are 1 proposals; no number 2" in refused("gov", "show", "2")


@pytest.mark.anvil
def test_demo_curates_the_samples_by_dao_vote(gym_env):
    # What this test checks is printed by the demo's curation step; the node and committee
    # steps after it are devnet/test_demo.py's (the full demo), so they are not run twice.
    result = gym_env.run("demo", "--no-train", "--no-node", timeout=300)
    assert result.returncode == 0, result.stderr
    assert "5. DAO curation" in result.stdout and "one by signature, relayed" in result.stdout
    assert re.search(r"curated library 'gym/curated' size 5, on-chain root\s+0x[0-9a-f]{64}",
                     result.stdout)
    assert "on-chain root matches the RFC 9162 root of the curated leaves" in result.stdout


@pytest.mark.anvil
def test_params_change_and_cancel_through_the_cli(gym_env, ledger_devnet):
    def gym(*args: str, ok: bool = True):
        result = gym_env.run(*args)
        assert (result.returncode == 0) == ok, (args, result.stdout, result.stderr)
        if not ok:
            assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr
        return result

    gym("devnet", "up")
    assert "voting period must be at least 1 second" in gym(
        "gov", "propose-params", "--voting-period", "0", "--account", "1", ok=False).stderr
    assert "quorum can be at most 100% of the supply" in gym(
        "gov", "propose-params", "--quorum-percent", "101", "--account", "1", ok=False).stderr
    assert "name at least one parameter" in gym("gov", "propose-params", "--account", "1",
                                                ok=False).stderr
    assert "no proposals yet" in gym("gov", "list").stdout

    proposed = gym("gov", "propose-params", "--voting-delay", "3600", "--voting-period", "600",
                   "--proposal-threshold", "2.5", "--quorum-percent", "5", "--timelock-delay",
                   "90", "--description", "Give voters time.", "--account", "1").stdout
    assert "# Change governance parameters: voting delay, voting period" in proposed
    assert "- voting delay: 1 s -> 3600 s (1 h)" in proposed
    assert "- proposal threshold: 1 GYM -> 2.5 GYM" in proposed
    shown = gym("gov", "show", "1").stdout
    assert ("actions:\n  1. GymGovernor: set the voting delay to 3600 s (1 h)\n"
            "  2. GymGovernor: set the voting period to 600 s (10 min)\n"
            "  3. GymGovernor: set the proposal threshold to 2.5 GYM\n"
            "  4. GymGovernor: set the quorum to 5% of the supply\n"
            "  5. TimelockController: set the timelock delay to 90 s (1 min 30 s)") in shown
    for account in ("1", "2", "3"):
        gym("gov", "vote", "1", "for", "--account", account)
    gym("devnet", "mine", "--seconds", "301")  # the proposal runs on the old settings
    gym("gov", "queue", "1", "--account", "0")
    gym("devnet", "mine", "--seconds", "61")
    executed = gym("gov", "execute", "1", "--account", "0").stdout
    assert ("governance parameters now: voting delay 3600 s (1 h), voting period 600 s (10 min), "
            "proposal threshold 2.5 GYM, quorum numerator 5% of the supply, timelock delay 90 s "
            "(1 min 30 s)") in executed

    # With an hour of voting delay, a proposer can take a proposal back before voting opens.
    gym("gov", "propose-params", "--voting-period", "900", "--account", "2")
    assert re.search(r"│ 2\s*│ Change governance parameters: voting period\s*│ Pending.*│ voting "
                     r"period -> 900 s \(15 min\)", gym("gov", "list").stdout)
    refused = gym("gov", "cancel", "2", "--account", "1", ok=False).stderr
    assert "did not make proposal" in refused and "only its proposer" in refused
    canceled = gym("gov", "cancel", "2", "--account", "2").stdout
    assert "canceled (tx 0x" in canceled and ": Canceled; canceled" in canceled
    assert "is Canceled: a proposal can be canceled only while Pending" in gym(
        "gov", "cancel", "2", "--account", "2", ok=False).stderr


def test_one_signing_key_rule():
    from contracts.signing import SigningKeyError, signing_key

    said: list[str] = []
    assert signing_key(31337, "GYM_VOTER_KEY", None, None, announce=said.append) == \
        ANVIL_DEV_KEYS[0]
    assert said == [("signing as devnet account 0 (0xf39F…2266); --account N or GYM_VOTER_KEY "
                     "to choose")]
    said.clear()
    assert signing_key(31337, "GYM_VOTER_KEY", ANVIL_DEV_KEYS[2], None,
                       announce=said.append) == ANVIL_DEV_KEYS[2]
    assert signing_key(31337, "GYM_VOTER_KEY", ANVIL_DEV_KEYS[2], 3,
                       announce=said.append) == ANVIL_DEV_KEYS[3]  # --account first
    assert said == []  # a key that was chosen is not announced
    with pytest.raises(SigningKeyError, match=r"^no signing key: set GYM_PUBLISHER_KEY \(chain 1 "
                                              r"is not the devnet"):
        signing_key(1, "GYM_PUBLISHER_KEY")
    with pytest.raises(SigningKeyError, match="chain 1 is not the devnet.*set GYM_VOTER_KEY"):
        signing_key(1, "GYM_VOTER_KEY", ANVIL_DEV_KEYS[1], 2)
    assert signing_key(1, "GYM_VOTER_KEY", ANVIL_DEV_KEYS[1]) == ANVIL_DEV_KEYS[1]


@pytest.mark.anvil
def test_every_command_signs_by_the_same_rule(gym_env, ledger_devnet):
    """On the devnet a command given no key signs as account 0 and says so on stderr, once;
    reads say nothing; `--account N` and the command's variable choose."""
    def gym(*args: str, **kwargs):
        result = gym_env.run(*args, **kwargs)
        assert result.returncode == 0, (args, result.stdout, result.stderr)
        return result

    def notice(variable: str) -> str:
        return (f"signing as devnet account 0 (0xf39F…2266); --account N or {variable} to "
                "choose\n")

    account0 = Account.from_key(ANVIL_DEV_KEYS[0]).address
    gym("devnet", "up")
    created = gym("ledger", "create", "alice/math")
    assert created.stderr == notice("GYM_PUBLISHER_KEY") and account0 in created.stdout
    gym("ledger", "append", "alice/math", str(SAMPLES))
    published = gym("ledger", "publish", "alice/math", "--account", "0")
    assert published.stderr == ""  # chosen: nothing to say
    assert gym("ledger", "create", "bob/math", "--account", "2").stdout.endswith(
        f"owner {Account.from_key(ANVIL_DEV_KEYS[2]).address}\n")
    voter = Account.from_key(ANVIL_DEV_KEYS[1]).address
    assert f"owner {voter}" in gym("ledger", "create", "carol/math",
                                   extra_env={"GYM_PUBLISHER_KEY": ANVIL_DEV_KEYS[1]}).stdout

    proposed = gym("gov", "propose-curation", "--from-log", "alice/math", "--indices", "1")
    assert proposed.stderr == notice("GYM_VOTER_KEY")
    listed = gym("gov", "list")
    assert listed.stderr == "" and re.search(r"│ 1\s*│ Curate 1 entry from alice/math",
                                             listed.stdout)
    voted = gym("gov", "vote", "1", "for")
    assert voted.stderr == notice("GYM_VOTER_KEY")
    assert voted.stdout.startswith(f"{account0} voted for with 1,000 GYM")
    by_env = gym("gov", "vote", "1", "abstain", extra_env={"GYM_VOTER_KEY": ANVIL_DEV_KEYS[1]})
    assert by_env.stderr == "" and by_env.stdout.startswith(f"{voter} voted abstain")
    gym("devnet", "mine", "--seconds", "301")
    queued = gym("gov", "queue", "1")  # as the README writes it: no --account
    assert queued.stderr == notice("GYM_VOTER_KEY") and "proposal 1: Queued" in queued.stdout
    gym("devnet", "mine", "--seconds", "61")
    assert "size 1, root 0x" in gym("gov", "execute", "1").stdout


@pytest.mark.anvil
def test_off_the_devnet_a_missing_key_is_one_line_naming_its_variable(gym_env):
    """A chain that is not 31337 (Anvil run with another chain id): no default key."""
    up = gym_env.run("devnet", "up", extra_env={"GYM_CHAIN_ID": "1337"})
    assert up.returncode == 0, up.stderr
    for args, variable in ((("ledger", "create", "alice/math"), "GYM_PUBLISHER_KEY"),
                           (("gov", "delegate"), "GYM_VOTER_KEY"),
                           (("gov", "queue", "1"), None)):
        result = gym_env.run(*args, extra_env={"GYM_CHAIN_ID": "1337"})
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
        if variable:
            assert result.stderr == (f"error: no signing key: set {variable} (chain 1337 is not "
                                     "the devnet, where Anvil's account 0 would sign)\n")
    refused = gym_env.run("gov", "delegate", "--account", "1", extra_env={"GYM_CHAIN_ID": "1337"})
    assert refused.stderr.startswith("error: --account picks a public devnet key, and chain 1337 "
                                     "is not the devnet (31337): set GYM_VOTER_KEY instead")
    assert gym_env.run("ledger", "create", "alice/math", extra_env={
        "GYM_CHAIN_ID": "1337", "GYM_PUBLISHER_KEY": ANVIL_DEV_KEYS[0]}).returncode == 0
