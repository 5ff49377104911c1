"""A real `gym dashboard` process: hostile input that must not kill it (a crash fails the test,
not the suite), and a ballot signed in the shell as docs/dashboard.md shows, relayed by it.

A proposal curates an entry that is 200 KB of ``[[[[…]]]]``, stored in the content store under
its CID, in a publisher log whose checkpoint is anchored on chain: everything a proposal page
checks before it parses the entry holds. Before ``parse_json`` such a page killed the
dashboard with SIGSEGV (the JSON decoder recursed past the C stack). The page must show the
entry FAILED with the reason, and the same process must go on answering, also after deep,
oversized and malformed bodies posted to ``/rpc`` and to the ballot relay, none of which may
leave a traceback in its log. Passed and executed anyway (the ledger checks the proof, not the
entry), the entry is shown FAILED in the curated library too.

The shell block of docs/dashboard.md "Signing a ballot without a browser" is run as written,
with bash: `gym gov ballot`, the bundled `cast`, `node`, `curl` against the dashboard.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import httpx
import pytest
from gym_helpers import gym_dashboard
from web3 import Web3

from contracts import load_artifact
from devnet.deploy import Deployment
from devnet.settings import ANVIL_DEV_KEYS
from governance import GovernanceClient, SourcedLeaf
from governance.client import CurationProposal
from ledger import LocalBlockStore, leaf_hash
from ledger.chain import LedgerContract

REPO = Path(__file__).resolve().parents[2]
DEEP = b"[" * 100_000 + b"]" * 100_000  # 200 KB: under an entry's 256 KiB limit

pytestmark = pytest.mark.anvil


def dao_client(deployment: Deployment, w3: Web3) -> GovernanceClient:
    ledger = LedgerContract(w3, deployment.contracts["ExperienceLedger"].address,
                            load_artifact("ExperienceLedger").abi, ANVIL_DEV_KEYS[0])
    c = deployment.contracts
    return GovernanceClient(
        w3, c["GymGovernor"].address, load_artifact("GymGovernor").abi, c["GymToken"].address,
        load_artifact("GymToken").abi, ledger, c["TimelockController"].address,
        load_artifact("TimelockController").abi, curated_log_id=deployment.curated_log_id,
        private_key=ANVIL_DEV_KEYS[0], from_block=deployment.deployment_block)


@pytest.fixture
def served_dashboard(gym_env, ledger_devnet, tmp_path):
    """A devnet, a proposal to curate the deep entry (anchored, stored under its CID), and
    `gym dashboard` serving it, its output in a log file."""
    assert gym_env.run("devnet", "up").returncode == 0
    deployment = Deployment.load(gym_env.deployment_file)
    w3 = Web3(Web3.HTTPProvider(deployment.rpc_url))
    client = dao_client(deployment, w3)
    cid = LocalBlockStore(gym_env.data_dir / "ipfs").put(DEEP)  # where `gym` reads content
    log_id, _ = client.ledger.create_log("mallory/deep")
    client.ledger.anchor(log_id, 1, leaf_hash(DEEP), str(cid), [])
    leaf = SourcedLeaf(log_id, 1, 0, leaf_hash(DEEP), str(cid), ())
    proposal_id, _ = client.propose(CurationProposal(
        client.ledger.address, client.curated_log_id, (leaf,), "# Curate a deep entry\n",
        document_cid="", source_log="mallory/deep"))

    log = tmp_path / "dashboard.log"
    with log.open("wb") as out, gym_dashboard(gym_env.env, out,
                                              lambda _: log.read_text()) as (proc, base):
        yield base, proc, log, proposal_id, cid, client


def test_a_deep_entry_and_deep_bodies_are_refused_and_the_dashboard_keeps_serving(
        served_dashboard):
    base, proc, log, proposal_id, cid, client = served_dashboard

    def alive() -> None:
        assert proc.poll() is None, f"the dashboard died ({proc.returncode}): {log.read_text()}"
        assert httpx.get(f"{base}/health", timeout=30).status_code == 200

    page = httpx.get(f"{base}/proposals/{proposal_id}", timeout=60)
    alive()
    assert page.status_code == 200, page.text
    assert "FAILED: the proposed entry does not verify." in page.text
    reason = re.search(r'<p class="reason">(.*?)</p>', page.text, re.DOTALL).group(1)
    assert f"entry {cid} is in the log but is not a valid entry" in reason
    assert "nests deeper than 64 levels" in reason
    verdict = httpx.get(f"{base}/api/proposals/{proposal_id}/verify", timeout=60)
    assert verdict.status_code == 422 and verdict.json()["verified"] is False
    assert "nests deeper than 64 levels" in verdict.json()["leaves"][0]["reason"]
    alive()

    with httpx.Client(base_url=base, timeout=60) as browser:  # a session, as the page has
        token = re.search(r'<meta name="csrf-token" content="([0-9a-f]{64})">',
                          browser.get("/").text).group(1)
        headers = {"Origin": base, "X-CSRF-Token": token, "Content-Type": "application/json"}

        def post(path: str, body: bytes) -> httpx.Response:
            answer = browser.post(path, content=body, headers=headers)
            alive()
            return answer

        deep_rpc = post("/rpc", b'{"jsonrpc": "2.0", "id": 1, "method": "eth_call", '
                                b'"params": ' + DEEP + b"}")
        assert deep_rpc.status_code == 400
        assert deep_rpc.json()["jsonrpc"] == "2.0" and deep_rpc.json()["id"] is None
        assert deep_rpc.json()["error"]["code"] == -32700
        assert "nests deeper than 16 levels" in deep_rpc.json()["error"]["message"]

        deep_ballot = post(f"/api/proposals/{proposal_id}/relay", DEEP)
        assert deep_ballot.status_code == 400
        assert deep_ballot.json()["error"]["type"] == "JSONInputError"
        assert "nests deeper than 16 levels" in deep_ballot.json()["error"]["message"]

        huge = post(f"/api/proposals/{proposal_id}/relay", b" " * (2 * 1024 * 1024))
        assert huge.status_code == 413 and "the limit is 1048576" in huge.json()["error"]["message"]
        assert post("/rpc", b"[" * 300_000).json()["error"]["code"] == -32700  # unbalanced

        value = post("/rpc", b'{"jsonrpc": "2.0", "id": 7, "method": "eth_call", "params": '
                             b'[{"to": "0x0000000000000000000000000000000000000001", '
                             b'"value": "lots"}, "latest"]}')
        assert value.status_code == 200
        assert value.json() == {"jsonrpc": "2.0", "id": 7, "error": {
            "code": -32602,
            "message": "the transaction's value must be a quantity (0x-prefixed hex), not 'lots'"}}
        assert post("/rpc", b'{"id": 8, "method": "eth_chainId"}').json()["result"] == "0x7a69"

    # Passed anyway (the ledger checks the proof, not the entry): the curated library page
    # re-reads the appended entry and shows it FAILED.
    for account in (1, 2, 3):
        client.vote(proposal_id, "for", key=ANVIL_DEV_KEYS[account])
    params = client.governance_parameters()
    client.advance_time(params.voting_period + 1)
    client.queue(proposal_id)
    client.advance_time(params.timelock_delay + 1)
    client.execute(proposal_id)
    library = httpx.get(f"{base}/library", timeout=60)
    alive()
    assert library.status_code == 200, library.text
    assert '<span class="verdict">FAILED</span> not a valid entry' in library.text
    assert "nests deeper than 64 levels" in library.text

    proc.terminate()
    proc.wait(timeout=15)
    assert "Traceback" not in log.read_text(), log.read_text()


def test_the_documented_shell_ballot_is_signed_by_cast_and_relayed(served_dashboard, gym_env,
                                                                   tmp_path):
    base, _, _, proposal_id, _, client = served_dashboard
    doc = (REPO / "docs" / "dashboard.md").read_text()
    section = doc.split("## Signing a ballot without a browser", 1)[1]
    script = re.search(r"```sh\n(.*?)```", section, re.DOTALL).group(1)
    workdir = tmp_path / "shell"  # the block's relative paths, and the files it writes
    workdir.mkdir()
    for name in (".venv", "node_modules"):
        (workdir / name).symlink_to(REPO / name)
    ran = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=workdir,
                         env={**gym_env.env, "BASE": base},
                         capture_output=True, text=True, timeout=300, check=False)
    assert ran.returncode == 0, ran.stderr
    relayed = json.loads(ran.stdout)
    voter = "0x90F79bf6EB2c4f870365E785982E1f101E93b906"
    assert (relayed["voter"], relayed["support"], relayed["weight"]) == (
        voter, "for", str(1000 * 10**18))
    governor = client.governor.functions
    assert governor.proposalVotes(proposal_id).call() == [0, 1000 * 10**18, 0]
    assert governor.hasVoted(proposal_id, voter).call()
