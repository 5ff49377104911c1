"""Parties that share only the chain and the content endpoint `gym devnet up` runs (issue
"past one machine"): a publisher on its own data directory writes through the endpoint's Kubo
RPC; when the endpoint is down it gets one line and nothing is anchored, and the retry
completes; an auditor with nothing local replays the log from chain + endpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger.blockstore import LocalBlockStore

pytestmark = pytest.mark.anvil

SAMPLES = Path(__file__).resolve().parents[2] / "devnet" / "samples" / "experiences.jsonl"


def test_a_publisher_on_the_endpoint_only_and_its_endpoint_down(ledger_devnet, tmp_path):
    gym = ledger_devnet.gym
    endpoint = json.loads(gym.deployment_file.read_text())["content_api"]
    assert endpoint, "gym devnet up records its content service"
    via_endpoint = {"GYM_IPFS_API": endpoint}
    assert gym.run("ledger", "create", "shared", extra_env=via_endpoint).returncode == 0
    appended = gym.run("ledger", "append", "shared", str(SAMPLES), extra_env=via_endpoint)
    assert appended.returncode == 0, appended.stderr
    # nothing of it is in this party's own store: the content went to the endpoint
    local = LocalBlockStore(gym.data_dir / "ipfs")
    first_cid = appended.stdout.split("bafkrei", 1)[1].split()[0]
    assert not local.has("bafkrei" + first_cid)

    down = gym.run("ledger", "publish", "shared", extra_env={"GYM_IPFS_API": "http://127.0.0.1:9"})
    assert down.returncode == 1
    lines = down.stderr.strip().splitlines()
    assert lines[-1].startswith("error: cannot reach the IPFS RPC API at http://127.0.0.1:9 "
                                "(GYM_IPFS_API): Connection refused."), down.stderr
    assert len([line for line in lines if line.startswith("error")]) == 1
    contract = ledger_devnet.contract()
    log_id = next(e.log_id for e in contract.logs_created() if e.name == "shared")
    assert contract.log_info(log_id).size == 0  # nothing anchored

    again = gym.run("ledger", "publish", "shared", extra_env=via_endpoint)
    assert again.returncode == 0, again.stderr
    assert contract.log_info(log_id).size == 5
    # an auditor with an empty data directory: chain + endpoint alone
    auditor = {"GYM_IPFS_API": endpoint, "GYM_DATA_DIR": str(tmp_path / "auditor"),
               "GYM_DB_URL": f"sqlite:///{tmp_path / 'auditor.sqlite'}"}
    audit = gym.run("audit", "--log-id", str(log_id), extra_env=auditor)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert "audit clean: 1 checkpoints, 5 entries replayed" in audit.stdout



def test_a_party_joins_from_the_published_manifest_alone(ledger_devnet, tmp_path):
    """`gym devnet up` publishes its manifest to the content endpoint; a party with only the
    RPC URL, the endpoint and that CID joins (the manifest checked against the chain: its
    blocks, this build's code, the wiring) and can use the deployment. A manifest that swaps a
    contract's address (code hash updated to match) or is not a manifest is refused."""
    from eth_utils import keccak
    from web3 import Web3

    gym = ledger_devnet.gym
    up = gym.run("devnet", "up", "--json")
    assert up.returncode == 0, up.stderr
    published = json.loads(up.stdout)
    cid, endpoint = published["manifest_cid"], published["content_api"]
    joiner = {"GYM_DATA_DIR": str(tmp_path / "joiner"), "GYM_IPFS_API": endpoint,
              "GYM_DEPLOYMENT_FILE": str(tmp_path / "joiner" / "deployment.json")}
    joined = gym.run("devnet", "join", cid, extra_env=joiner)
    assert joined.returncode == 0, joined.stderr
    assert f"joined: the chain holds deployment {cid}" in joined.stdout
    mine = json.loads(gym.deployment_file.read_text())
    theirs = json.loads((tmp_path / "joiner" / "deployment.json").read_text())
    assert theirs["contracts"] == mine["contracts"] and theirs["rpc_url"] == gym.env["GYM_RPC_URL"]
    listed = gym.run("gov", "list", extra_env=joiner)
    assert listed.returncode == 0 and "no proposals yet" in listed.stdout, listed.stderr

    # an impostor: the token's address swapped for another contract's, its hash to match
    w3 = Web3(Web3.HTTPProvider(gym.env["GYM_RPC_URL"]))
    forged = json.loads(json.dumps(mine))
    other = mine["contracts"]["ExperienceLedger"]["address"]
    forged["contracts"]["GymToken"] = {**forged["contracts"]["GymToken"], "address": other,
                                       "code_hash": "0x" + keccak(w3.eth.get_code(other)).hex()}
    (tmp_path / "forged.json").write_text(json.dumps(forged))
    (tmp_path / "junk.json").write_text('{"version": 9}')
    for name, why in (("forged.json", "GymToken at " + other + " is not this build's contract"),
                      ("junk.json", "is not a deployment manifest")):
        added = gym.run("ipfs", "add", str(tmp_path / name), extra_env=joiner)
        assert added.returncode == 0, added.stderr
        bad_cid = added.stdout.split()[-1]
        refused = gym.run("devnet", "join", bad_cid, extra_env={
            **joiner, "GYM_DEPLOYMENT_FILE": str(tmp_path / f"{name}.deployment.json")})
        assert refused.returncode == 1 and why in refused.stderr, refused.stderr
        assert not (tmp_path / f"{name}.deployment.json").exists()


def test_a_joined_party_checks_its_own_endpoint_and_is_never_told_to_redeploy(ledger_devnet,
                                                                               tmp_path):
    """Issue 44, findings 1 and 2: `join` keeps the party's own GYM_IPFS_API over the
    manifest's, and `gym devnet status` there checks what that party uses, names the URL that
    fails, and gives advice that fits a party that did not deploy."""
    gym = ledger_devnet.gym
    published = json.loads(gym.run("devnet", "up", "--json").stdout)
    own = published["content_api"].replace("127.0.0.1", "localhost")  # the same service
    joiner = {"GYM_DATA_DIR": str(tmp_path / "joiner"), "GYM_IPFS_API": own,
              "GYM_DEPLOYMENT_FILE": str(tmp_path / "joiner" / "deployment.json")}
    assert gym.run("devnet", "join", published["manifest_cid"], extra_env=joiner).returncode == 0
    assert json.loads((tmp_path / "joiner" / "deployment.json").read_text())["content_api"] == own

    healthy = gym.run("devnet", "status", extra_env=joiner)
    assert healthy.returncode == 0, healthy.stderr
    assert f"content endpoint: {own}" in healthy.stdout

    dead = "http://127.0.0.1:9"
    status = gym.run("devnet", "status", extra_env={**joiner, "GYM_IPFS_API": dead})
    assert status.returncode == 1
    assert f"the content endpoint {dead} does not answer" in status.stderr
    assert "GYM_IPFS_API" in status.stderr and "redeploy" not in status.stderr
    assert "gym devnet up" not in status.stderr

    # the chain: a joined party's RPC that does not answer is named, with no "redeploy"
    chain = gym.run("devnet", "status", extra_env={**joiner, "GYM_RPC_URL": dead})
    assert chain.returncode == 1 and f"cannot reach the EVM RPC at {dead} (from GYM_RPC_URL)" \
        in chain.stderr
    assert "gym devnet up" not in chain.stderr


def test_the_devnets_content_service_takes_kubos_authorizations(gym_env, tmp_path):
    """GYM_IPFS_AUTHORIZATIONS: `gym devnet up` starts its content service with Kubo's
    API.Authorizations, so an operator gives each party its rights; the deployer's own
    commands use the local store, `status` still sees the service up."""
    import httpx

    rules = tmp_path / "parties.json"
    rules.write_text(json.dumps({"alice": {"AuthSecret": "bearer:alice-token",
                                           "AllowedPaths": ["/api/v0"]}}))
    env = {"GYM_IPFS_AUTHORIZATIONS": str(rules)}
    up = gym_env.run("devnet", "up", "--json", extra_env=env)
    assert up.returncode == 0, up.stderr
    endpoint = json.loads(up.stdout)["content_api"]
    assert httpx.post(f"{endpoint}/api/v0/pin/ls", timeout=10).status_code == 401
    alice = httpx.post(f"{endpoint}/api/v0/pin/ls", timeout=10,
                       headers={"Authorization": "Bearer alice-token"})
    assert alice.status_code == 200 and json.loads(up.stdout)["manifest_cid"] in alice.text
    status = gym_env.run("devnet", "status", extra_env=env)
    assert status.returncode == 0, status.stderr
    listed = gym_env.run("ipfs", "cat", json.loads(up.stdout)["manifest_cid"],
                         extra_env={"GYM_IPFS_API": endpoint, "GYM_IPFS_API_AUTH":
                                    "bearer:alice-token", "GYM_DATA_DIR": str(tmp_path / "x")})
    assert listed.returncode == 0 and "ExperienceLedger" in listed.stdout, listed.stderr


def test_commands_that_read_a_published_log_work_from_any_host(ledger_devnet, tmp_path):
    """Issue 44, deliver 3: a party whose own store is empty proves and shows any published
    log by its name or id from the chain and the endpoint (the local store is a cache), and
    gets the publisher's own proof document."""
    gym = ledger_devnet.gym
    endpoint = json.loads(gym.deployment_file.read_text())["content_api"]
    publisher = {"GYM_IPFS_API": endpoint}
    for args in (("ledger", "create", "shared"), ("ledger", "append", "shared", str(SAMPLES)),
                 ("ledger", "publish", "shared")):
        assert gym.run(*args, extra_env=publisher).returncode == 0
    elsewhere = {"GYM_IPFS_API": endpoint, "GYM_DATA_DIR": str(tmp_path / "elsewhere"),
                 "GYM_DB_URL": f"sqlite:///{tmp_path / 'elsewhere.sqlite'}"}

    mine = gym.run("ledger", "proof", "shared", "2", "--json", extra_env=publisher)
    theirs = gym.run("ledger", "proof", "shared", "2", "--json", extra_env=elsewhere)
    assert theirs.returncode == 0, theirs.stderr
    assert json.loads(theirs.stdout) == json.loads(mine.stdout)
    (tmp_path / "proof.json").write_text(theirs.stdout)
    checked = gym.run("verify", "proof", str(tmp_path / "proof.json"), "--chain",
                      extra_env=elsewhere)
    assert checked.returncode == 0 and "valid" in checked.stdout, checked.stderr
    log_id = json.loads(theirs.stdout)["log_id"]
    entry = gym.run("ledger", "show", str(log_id), "2", "--entry", extra_env=elsewhere)
    assert entry.stdout == gym.run("ledger", "show", "shared", "2", "--entry",
                                   extra_env=publisher).stdout
    shown = json.loads(gym.run("ledger", "show", "shared", "--json", extra_env=elsewhere).stdout)
    assert (shown["size"], shown["log_id"], len(shown["checkpoints"])) == (5, log_id, 1)
    beyond = gym.run("ledger", "proof", "shared", "7", extra_env=elsewhere)
    assert beyond.returncode == 1 and "no anchored checkpoint holding leaf 7" in beyond.stderr
