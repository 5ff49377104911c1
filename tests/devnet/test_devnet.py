"""`gym devnet up|status|down` against a real Anvil started from the npm Foundry binary."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import time
from pathlib import Path

import pytest
from eth_account import Account
from eth_utils import keccak
from gym_helpers import send
from web3 import Web3

from contracts import load_artifact
from contracts.artifacts import OUT_DIR
from devnet.anvil import AnvilProcess, running_anvil
from devnet.deploy import (
    CONTRACT_NAMES,
    CURATED_LIBRARY_NAME,
    MANIFEST_VERSION,
    Deployment,
    GovernanceParams,
)
from devnet.settings import ANVIL_DEV_KEYS, GymSettings
from ledger.evm import ZERO_ADDRESS

pytestmark = pytest.mark.anvil


def _anvil(gym_env) -> AnvilProcess:
    anvil = running_anvil(gym_env.data_dir)
    assert anvil is not None
    return anvil


def test_up_writes_manifest_that_matches_the_chain(gym_env):
    result = gym_env.run("devnet", "up")
    assert result.returncode == 0, result.stderr
    manifest = json.loads(gym_env.deployment_file.read_text())
    anvil = _anvil(gym_env)
    assert manifest["chain_id"] == 31337
    assert manifest["rpc_url"] == anvil.rpc_url
    w3 = Web3(Web3.HTTPProvider(anvil.rpc_url))
    assert manifest["genesis_hash"] == w3.eth.get_block(0)["hash"].to_0x_hex()
    block = w3.eth.get_block(manifest["deployment_block"])
    assert manifest["deployment_block_hash"] == block["hash"].to_0x_hex()
    assert set(manifest["contracts"]) == set(CONTRACT_NAMES)
    for name, contract in manifest["contracts"].items():
        code = w3.eth.get_code(contract["address"])
        assert _without_immutables(code, name) == bytes.fromhex(load_artifact(name).deployed_bytecode[2:])
        assert contract["code_hash"] == "0x" + keccak(code).hex()
        assert w3.eth.get_transaction_receipt(contract["tx_hash"])["contractAddress"] == contract["address"]

    status = gym_env.run("devnet", "status")
    assert status.returncode == 0, status.stderr
    assert "deployment matches the chain" in status.stdout

    again = gym_env.run("devnet", "up")  # idempotent: same Anvil, no redeploy
    assert again.returncode == 0
    assert "already running" in again.stdout and "already deployed" in again.stdout
    assert json.loads(gym_env.deployment_file.read_text()) == manifest


def test_up_wires_the_dao(gym_env):
    """The deployer keeps no power: the governor alone proposes to the timelock, the timelock
    owns the curated library and admins itself, every holder's balance counts as votes, and
    the timelock holds the rewards' treasury, which the RewardDistributor may pay from."""
    result = gym_env.run("devnet", "up", extra_env={"GYM_TIMELOCK_MIN_DELAY": "7"})
    assert result.returncode == 0, result.stderr
    deployment = Deployment.load(gym_env.deployment_file)
    w3 = Web3(Web3.HTTPProvider(deployment.rpc_url))
    ledger, token, timelock, governor = (
        w3.eth.contract(address=deployment.contracts[name].address, abi=load_artifact(name).abi)
        for name in ("ExperienceLedger", "GymToken", "TimelockController", "GymGovernor"))
    params = deployment.governance
    assert params is not None and deployment.curated_log_id is not None

    owner, kind, name, size, _ = ledger.functions.logInfo(deployment.curated_log_id).call()
    assert (owner, kind, name, size) == (timelock.address, 1, CURATED_LIBRARY_NAME, 0)

    admin, proposer, canceller, executor = (
        getattr(timelock.functions, role)().call()
        for role in ("DEFAULT_ADMIN_ROLE", "PROPOSER_ROLE", "CANCELLER_ROLE", "EXECUTOR_ROLE"))
    has_role = timelock.functions.hasRole
    for role in (admin, proposer, canceller, executor):
        assert not has_role(role, deployment.deployer).call()
    assert has_role(proposer, governor.address).call() and has_role(canceller, governor.address).call()
    assert not has_role(admin, governor.address).call()
    assert has_role(executor, ZERO_ADDRESS).call()  # anyone executes a queued, ready operation
    assert has_role(admin, timelock.address).call()  # role changes only through proposals
    assert timelock.functions.getMinDelay().call() == params.timelock_min_delay == 7

    assert governor.functions.token().call() == token.address
    assert governor.functions.timelock().call() == timelock.address
    assert governor.functions.votingDelay().call() == params.voting_delay
    assert governor.functions.votingPeriod().call() == params.voting_period
    assert governor.functions.proposalThreshold().call() == params.proposal_threshold
    assert governor.functions.quorumNumerator().call() == params.quorum_numerator
    assert governor.functions.CLOCK_MODE().call() == token.functions.CLOCK_MODE().call() == "mode=timestamp"
    assert governor.functions.clock().call() == token.functions.clock().call()

    holders = [Account.from_key(key).address for key in ANVIL_DEV_KEYS]
    assert params.holders == holders == w3.eth.accounts[:len(holders)]
    for holder in holders:
        balance = token.functions.balanceOf(holder).call()
        assert balance == params.tokens_per_holder * 10**18
        assert token.functions.getVotes(holder).call() == balance
        assert token.functions.delegates(holder).call() == holder
    treasury = params.treasury_tokens * 10**18
    assert token.functions.balanceOf(timelock.address).call() == treasury == 1_250 * 10**18
    assert token.functions.getVotes(timelock.address).call() == 0  # the treasury does not vote
    assert token.functions.totalSupply().call() == (len(holders) * params.tokens_per_holder * 10**18
                                                    + treasury)

    registry = w3.eth.contract(address=deployment.contracts["NodeRegistry"].address,
                               abi=load_artifact("NodeRegistry").abi)
    assert registry.functions.governance().call() == timelock.address  # only proposals slash
    assert registry.functions.stakeToken().call() == token.address
    assert registry.functions.ledger().call() == ledger.address
    assert registry.functions.minStake().call() == params.node_min_stake == 100 * 10**18
    assert registry.functions.totalStaked().call() == 0

    committee = w3.eth.contract(address=deployment.contracts["VerifierCommittee"].address,
                                abi=load_artifact("VerifierCommittee").abi)
    assert registry.functions.committee().call() == committee.address
    assert committee.functions.registry().call() == registry.address
    assert committee.functions.governance().call() == timelock.address
    assert committee.functions.appealWindow().call() == params.committee_appeal_window == 300
    assert committee.functions.settlementTimeout().call() == params.committee_settlement_timeout == 3600

    distributor = w3.eth.contract(address=deployment.contracts["RewardDistributor"].address,
                                  abi=load_artifact("RewardDistributor").abi)
    assert distributor.functions.token().call() == token.address
    assert distributor.functions.committee().call() == committee.address
    assert distributor.functions.governance().call() == timelock.address
    assert distributor.functions.treasury().call() == timelock.address
    assert distributor.functions.epochBlocks().call() == params.reward_epoch_blocks == 1_000
    assert distributor.functions.appealWindow().call() == params.reward_appeal_window == 300
    assert distributor.functions.budgetOf(0).call() == [params.reward_budget,
                                                         params.reward_pool_bps]
    # the deployer's one batch through the timelock: the approval, then the real delay
    assert token.functions.allowance(timelock.address, distributor.address).call() == treasury


def test_a_passed_proposal_runs_through_the_timelock(gym_env):
    """Smoke of the wiring on a real chain: propose, vote, queue, execute a settings change.
    The clock is timestamps and an idle Anvil mines no blocks, so time is moved by hand."""
    assert gym_env.run("devnet", "up").returncode == 0
    deployment = Deployment.load(gym_env.deployment_file)
    w3 = Web3(Web3.HTTPProvider(deployment.rpc_url))
    governor = w3.eth.contract(address=deployment.contracts["GymGovernor"].address,
                               abi=load_artifact("GymGovernor").abi)
    params = deployment.governance

    def elapse(seconds):
        w3.provider.make_request("evm_increaseTime", [seconds])
        w3.provider.make_request("evm_mine", [])

    elapse(1)  # the proposer's votes are read one second before `propose`
    action = governor.encode_abi("setVotingPeriod", [2 * params.voting_period])
    receipt = send(w3, governor.functions.propose([governor.address], [0], [action],
                                                  "longer votes"), ANVIL_DEV_KEYS[1])
    proposal_id = governor.events.ProposalCreated().process_receipt(receipt)[0]["args"]["proposalId"]
    elapse(params.voting_delay + 1)
    for key in ANVIL_DEV_KEYS[:2]:
        send(w3, governor.functions.castVote(proposal_id, 1), key)
    elapse(params.voting_period)
    send(w3, governor.functions.queue(proposal_id), ANVIL_DEV_KEYS[4])
    elapse(params.timelock_min_delay)
    send(w3, governor.functions.execute(proposal_id), ANVIL_DEV_KEYS[4])  # anyone may execute
    assert governor.functions.state(proposal_id).call() == 7  # Executed
    assert governor.functions.votingPeriod().call() == 2 * params.voting_period


def test_devnet_keys_are_anvils_public_dev_accounts():
    Account.enable_unaudited_hdwallet_features()
    mnemonic = "test test test test test test test test test test test junk"
    for i, key in enumerate(ANVIL_DEV_KEYS):
        derived = Account.from_mnemonic(mnemonic, account_path=f"m/44'/60'/0'/0/{i}")
        assert derived.key.to_0x_hex() == key


def test_governance_defaults_are_short_for_the_devnet():
    params = GovernanceParams()
    assert GymSettings().timelock_min_delay == params.timelock_min_delay == 60
    assert params.voting_delay + params.voting_period + params.timelock_min_delay < 10 * 60


def test_manifest_of_an_older_gym_says_redeploy(gym_env):
    assert gym_env.run("devnet", "up").returncode == 0
    manifest = json.loads(gym_env.deployment_file.read_text())
    old = {key: manifest[key] for key in manifest if key not in ("curated_log_id", "governance")}
    old["version"] = 1
    old["contracts"] = {"ExperienceLedger": manifest["contracts"]["ExperienceLedger"]}
    gym_env.deployment_file.write_text(json.dumps(old))
    status = gym_env.run("devnet", "status")
    assert status.returncode == 1
    assert (f"has manifest version 1, this gym reads {MANIFEST_VERSION} (it predates the DAO "
            "contracts, the curated library, the NodeRegistry, the VerifierCommittee and the "
            "RewardDistributor): run `gym devnet up --redeploy`"
            ) in status.stderr
    up = gym_env.run("devnet", "up")
    assert up.returncode == 0, up.stderr
    assert json.loads(gym_env.deployment_file.read_text())["version"] == MANIFEST_VERSION
    assert gym_env.run("devnet", "status").returncode == 0


def test_down_stops_only_its_own_anvil(gym_env):
    assert gym_env.run("devnet", "up").returncode == 0
    pid = _anvil(gym_env).pid
    down = gym_env.run("devnet", "down")
    assert down.returncode == 0 and f"pid {pid}" in down.stdout
    assert running_anvil(gym_env.data_dir) is None
    assert _exited(pid)
    assert "no devnet started by gym is running" in gym_env.run("devnet", "down").stdout


def test_anvils_states_on_disk_stay_in_the_data_dir_and_go_with_the_devnet(gym_env):
    """Anvil writes its older states to disk, a state dump per block, and leaves them when it
    is stopped (devnet/anvil.py; 72 GB had piled up under ~/.foundry/anvil/tmp): they land in
    the data dir, `down` removes them, and those of an Anvil killed outright go at the next
    `up`."""
    from devnet.anvil import states_dir

    foundry_tmp = Path.home() / ".foundry" / "anvil" / "tmp"
    before = set(foundry_tmp.iterdir()) if foundry_tmp.exists() else set()
    states = states_dir(gym_env.data_dir)

    def mine(blocks: int) -> set[Path]:
        w3 = Web3(Web3.HTTPProvider(_anvil(gym_env).rpc_url))
        w3.provider.make_request("anvil_mine", [hex(blocks)])
        return set(states.rglob("*.json"))

    assert gym_env.run("devnet", "up").returncode == 0
    assert mine(600)  # states on disk (Anvil keeps about 400 in memory), in the data dir
    assert gym_env.run("devnet", "down").returncode == 0
    assert not states.exists()

    assert gym_env.run("devnet", "up").returncode == 0
    pid = _anvil(gym_env).pid
    left = mine(600)
    os.kill(pid, signal.SIGKILL)
    assert _exited(pid) and left and all(path.exists() for path in left)
    assert gym_env.run("devnet", "up").returncode == 0
    assert not any(path.exists() for path in left)
    assert gym_env.run("devnet", "down").returncode == 0
    if foundry_tmp.exists():  # nothing of these Anvils under Foundry's own directory
        assert set(foundry_tmp.iterdir()) <= before


def test_up_runs_the_content_service_beside_the_chain_and_down_stops_it(gym_env):
    """Issue "past one machine": `up` starts `gym ipfs serve` over the local store and records
    its endpoint in the manifest; a real Kubo client adds and reads through it; a second `up`
    keeps it; `status` names a recorded endpoint that stopped answering; `down` stops it."""
    import ipfshttpclient

    from devnet.content_service import answers, running_content_service
    from ledger.blockstore import LocalBlockStore
    from ledger.kubo import api_multiaddr

    up = gym_env.run("devnet", "up")
    assert up.returncode == 0, up.stderr
    service = running_content_service(gym_env.data_dir)
    assert service is not None and f"content service started: pid {service.pid}" in up.stdout
    url = json.loads(gym_env.deployment_file.read_text())["content_api"]
    assert url == service.url and f"GYM_IPFS_API={url}" in up.stdout
    with ipfshttpclient.Client(addr=api_multiaddr(url)) as kubo:
        cid = kubo.add(io.BytesIO(b"shared through the endpoint"), cid_version=1,
                       raw_leaves=True)["Hash"]
        assert kubo.cat(cid) == b"shared through the endpoint"
    assert LocalBlockStore(gym_env.data_dir / "ipfs").cat(cid) == b"shared through the endpoint"

    again = gym_env.run("devnet", "up")
    assert f"content service already running: pid {service.pid}" in again.stdout
    status = gym_env.run("devnet", "status")
    assert status.returncode == 0 and f"content service: running, pid {service.pid}" in \
        status.stdout

    os.kill(service.pid, signal.SIGKILL)
    assert _exited(service.pid)
    status = gym_env.run("devnet", "status")
    assert status.returncode == 1
    assert f"the content endpoint {url} does not answer" in status.stderr
    restarted = gym_env.run("devnet", "up")
    assert "content service started" in restarted.stdout, restarted.stdout + restarted.stderr
    service = running_content_service(gym_env.data_dir)
    down = gym_env.run("devnet", "down")
    assert f"stopped the content service (pid {service.pid}" in down.stdout
    assert _exited(service.pid) and not answers(service.url)


def test_down_refuses_a_pid_that_is_not_its_anvil(gym_env):
    """A stale pid file naming some other process must not get that process killed."""
    gym_env.data_dir.mkdir(parents=True)
    victim = os.getpid()  # this very test process
    (gym_env.data_dir / "anvil.json").write_text(json.dumps({
        "pid": victim, "host": "127.0.0.1", "port": 1, "binary": "/nonexistent/anvil",
        "log_file": "/dev/null"}))
    result = gym_env.run("devnet", "down")
    assert result.returncode == 0
    assert "no devnet started by gym is running" in result.stdout
    assert Path(f"/proc/{victim}").exists()


def test_restart_from_scratch_is_detected_and_up_redeploys(gym_env):
    assert gym_env.run("devnet", "up").returncode == 0
    first = json.loads(gym_env.deployment_file.read_text())
    assert gym_env.run("devnet", "down").returncode == 0
    # A fresh Anvil on the very same port: same URL, same addresses, different chain.
    port = first["rpc_url"].rsplit(":", 1)[1]
    assert gym_env.run("devnet", "up", "--port", port).returncode == 0
    second = json.loads(gym_env.deployment_file.read_text())
    assert second["rpc_url"] == first["rpc_url"]
    assert second["genesis_hash"] != first["genesis_hash"]

    # Now restart again behind the manifest's back and ask for status.
    gym_env.deployment_file.write_text(json.dumps(first))
    status = gym_env.run("devnet", "status")
    assert status.returncode == 1
    assert "restarted from scratch" in status.stderr
    up = gym_env.run("devnet", "up")
    assert up.returncode == 0 and "deployed contracts (the chain was restarted" in up.stdout
    assert gym_env.run("devnet", "status").returncode == 0


def test_status_detects_missing_contract_code(gym_env):
    assert gym_env.run("devnet", "up").returncode == 0
    manifest = json.loads(gym_env.deployment_file.read_text())
    manifest["contracts"]["ExperienceLedger"]["address"] = "0x" + "11" * 20
    gym_env.deployment_file.write_text(json.dumps(manifest))
    status = gym_env.run("devnet", "status")
    assert status.returncode == 1
    assert "does not hold the deployed code" in status.stderr


def test_port_already_taken_is_one_clear_line(gym_env):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = gym_env.run("devnet", "up", "--port", str(port))
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"error: port {port} on 127.0.0.1 is already in use by another process: stop it, or "
        "pick another port with `gym devnet up --port N` (0 picks a free one)")
    assert "Traceback" not in result.stdout + result.stderr
    assert not gym_env.deployment_file.exists()


@pytest.mark.parametrize("content", ["{not json", '{"version": 1}', ""])
def test_corrupted_manifest_is_one_clear_line(gym_env, content):
    gym_env.deployment_file.write_text(content)
    result = gym_env.run("devnet", "status")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "is corrupted" in lines[0] and "gym devnet up --redeploy" in lines[0]
    assert "Traceback" not in result.stderr


def test_up_replaces_a_corrupted_manifest(gym_env):
    gym_env.deployment_file.write_text("{not json")
    result = gym_env.run("devnet", "up")
    assert result.returncode == 0, result.stderr
    assert "deployment.json was unreadable" in result.stdout
    assert gym_env.run("devnet", "status").returncode == 0


def test_missing_manifest_says_what_to_run(gym_env):
    result = gym_env.run("devnet", "status")
    assert result.returncode == 1
    assert result.stderr.strip().endswith("run `gym devnet up` to start and deploy the devnet")


def test_unreachable_rpc_is_one_clear_line(gym_env):
    with socket.socket() as closed:  # a port that was free a moment ago: nothing answers
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    for args in (("devnet", "up"), ("devnet", "status")):
        if args[1] == "status":
            gym_env.deployment_file.write_text(json.dumps(_fake_manifest(url)))
        result = gym_env.run(*args, extra_env={"GYM_RPC_URL": url})
        assert result.returncode == 1, args
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: cannot reach the EVM RPC at {url}")
        assert "Traceback" not in result.stderr


def test_status_when_devnet_is_down(gym_env):
    assert gym_env.run("devnet", "up").returncode == 0
    assert gym_env.run("devnet", "down").returncode == 0
    result = gym_env.run("devnet", "status")
    assert result.returncode == 1
    assert "the devnet is not running" in result.stderr and "gym devnet up" in result.stderr


def test_external_rpc_is_deployed_to_without_starting_anvil(gym_env, tmp_path):
    """GYM_RPC_URL pointing at a node gym did not start: deploy there, start nothing."""
    other = tmp_path / "other"
    assert gym_env.run("devnet", "up", extra_env={"GYM_DATA_DIR": str(other),
                                                  "GYM_DEPLOYMENT_FILE": str(other / "d.json")}
                       ).returncode == 0
    url = running_anvil(other).rpc_url
    try:
        result = gym_env.run("devnet", "up", extra_env={"GYM_RPC_URL": url})
        assert result.returncode == 0, result.stderr
        assert "anvil" not in result.stdout.split("deployed")[0]
        assert running_anvil(gym_env.data_dir) is None
        assert json.loads(gym_env.deployment_file.read_text())["rpc_url"] == url
        status = gym_env.run("devnet", "status", extra_env={"GYM_RPC_URL": url})
        assert status.returncode == 0 and "not started by gym" in status.stdout
    finally:
        gym_env.run("devnet", "down", extra_env={"GYM_DATA_DIR": str(other)})


def _exited(pid: int, within_s: float = 5.0) -> bool:
    """True once ``pid`` is gone or a zombie waiting for its parent to reap it."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def _without_immutables(code: bytes, name: str) -> bytes:
    """``code`` with the immutable values that the constructor wrote zeroed, as in the artifact."""
    artifact = json.loads(next(OUT_DIR.glob(f"*.sol/{name}.json")).read_text())
    masked = bytearray(code)
    for references in artifact["deployedBytecode"].get("immutableReferences", {}).values():
        for ref in references:
            masked[ref["start"]:ref["start"] + ref["length"]] = bytes(ref["length"])
    return bytes(masked)


def _fake_manifest(url: str) -> dict:
    zero = "0x" + "00" * 32
    return {"version": MANIFEST_VERSION, "chain_id": 31337, "rpc_url": url, "deployer": "0x" + "00" * 20,
            "genesis_hash": zero, "deployment_block": 1, "deployment_block_hash": zero,
            "contracts": {}, "created_at": "2026-01-01T00:00:00+00:00"}
