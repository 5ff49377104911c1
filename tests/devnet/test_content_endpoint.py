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

