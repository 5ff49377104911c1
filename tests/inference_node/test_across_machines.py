"""Issue "past one machine": every party on its own data directory and database, sharing
only the RPC URL and the content endpoint `gym devnet up` runs (the node needs the tiny model
of this package's conftest)."""

from __future__ import annotations

import json
from pathlib import Path

import gym_forkserver
import pytest

pytestmark = pytest.mark.anvil

SAMPLES = Path(__file__).resolve().parents[2] / "devnet" / "samples" / "experiences.jsonl"


@pytest.mark.slow
def test_parties_on_their_own_data_dirs_share_only_the_chain_and_the_endpoint(
        ledger_devnet, tiny_model_dir, tmp_path):
    """Each party has its own data directory and database and shares only the RPC URL and the
    content endpoint `gym devnet up` runs: a researcher publishes through the endpoint, voters
    (holding nothing) curate the entries, a node on an empty store follows the curated library
    through the endpoint alone and signs receipts that it anchors, a challenger disputes one of
    them with evidence it stores on the endpoint, two verifiers (each with its own BLS key and
    nothing else local) read that evidence from the endpoint, judge it and send their verdicts
    to an aggregator that settles the challenge on chain, and an auditor with nothing local
    replays the node's receipt log and checks every receipt signature."""
    import signal
    import subprocess
    import sys
    import time

    import httpx
    from node_helpers import MODEL_NAME, NODE_KEY, free_port, wait_for_health

    from committee.client import ChallengeState, VerifierCommittee
    from devnet.deploy import Deployment
    from inference_node.receipts import ReceiptDomain, bundle_json, parse_receipt

    gym = ledger_devnet.gym
    endpoint = json.loads(gym.deployment_file.read_text())["content_api"]

    def party(name: str) -> dict[str, str]:
        home = tmp_path / name
        return {"GYM_DATA_DIR": str(home), "GYM_DB_URL": f"sqlite:///{home / 'index.sqlite'}",
                "GYM_IPFS_API": endpoint}

    def run(env: dict[str, str], *args: str) -> str:
        result = gym.run(*args, extra_env=env, timeout=300)
        assert result.returncode == 0, (args, result.stdout, result.stderr)
        return result.stdout

    def empty_store(name: str) -> bool:
        local = tmp_path / name / "ipfs"
        return not local.exists() or not any(path.is_file() for path in local.rglob("*"))

    researcher, voter, node, auditor, challenger, aggregator = (party(n) for n in (
        "researcher", "voter", "node", "auditor", "challenger", "aggregator"))
    verifiers = {account: party(f"verifier-{account}") for account in ("2", "3")}
    run(researcher, "ledger", "create", "alice/math")
    run(researcher, "ledger", "append", "alice/math", str(SAMPLES))
    run(researcher, "ledger", "publish", "alice/math")
    run(researcher, "gov", "propose-curation", "--from-log", "alice/math", "--indices", "0,2",
        "--description", "Two rules worth keeping.", "--account", "1")
    for account in ("1", "2"):
        run(voter, "gov", "vote", "1", "for", "--account", account)
    run(voter, "devnet", "mine", "--seconds", "301")
    run(voter, "gov", "queue", "1", "--account", "3")
    run(voter, "devnet", "mine", "--seconds", "61", "--blocks", "3")
    assert "size 2" in run(voter, "gov", "execute", "1", "--account", "3")

    # verifiers register before the challenge opens (the committee of its opening judges it)
    for account, verifier in verifiers.items():
        run(verifier, "verifier", "register", "--account", account)

    port = free_port()
    env = {**gym.env, **node, "GYM_NODE_KEY": NODE_KEY, "OMP_NUM_THREADS": "1"}
    proc = gym_forkserver.popen(Path(sys.executable).parent / "gym", [
        "node", "serve", "--model", str(tiny_model_dir), "--device", "cpu",
        "--served-model-name", MODEL_NAME, "--port", str(port), "--follow-log", "1", "--curated",
        "--key-env", "GYM_NODE_KEY", "--anchor-interval", "3600", "--register"], env)
    try:
        health = wait_for_health(proc, port, timeout_s=120)
        assert health["library"]["size"] == 2 and health["library"]["error"] is None, health
        request = {"model": MODEL_NAME, "max_tokens": 4, "seed": 1,
                   "messages": [{"role": "user", "content": "the farmer buys twelve apples"}]}
        reply = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=60,
                           json=request)
        assert reply.status_code == 200, reply.text
        receipt = reply.json()["receipt"]
        assert len(receipt["experience_ids"]) == 2  # the curated entries, from the endpoint
    finally:
        proc.send_signal(signal.SIGINT)  # graceful: the pending receipt is anchored
        output = proc.communicate(timeout=120)[0].decode()
    assert proc.returncode == 0, output
    # the node's own store stayed empty: everything it read and wrote went to the endpoint
    assert empty_store("node")

    # A challenger disputes the (honest) receipt: its evidence goes to the endpoint; the
    # verifiers judge it from there and the aggregator settles it: rejected.
    evidence = reply.json()["receipt_evidence"]  # the client's copy: what it challenges
    bundle = bundle_json(parse_receipt(receipt), ReceiptDomain.from_json(evidence["domain"]),
                         route="chat", request=request,
                         text=reply.json()["choices"][0]["message"]["content"],
                         completion_token_ids=evidence["completion_token_ids"])
    bundle_file = tmp_path / "challenger" / "bundle.json"
    bundle_file.parent.mkdir(parents=True, exist_ok=True)
    bundle_file.write_text(json.dumps(bundle))
    challenge_id = int(run(challenger, "verifier", "challenge", str(bundle_file), "--reason",
                           "the answer is wrong", "--account", "4").split()[-1])
    committee = VerifierCommittee(ledger_devnet.contract().w3, Deployment.load(
        gym.deployment_file).contracts["VerifierCommittee"].address)
    assert committee.challenge(challenge_id).status == ChallengeState.OPEN
    agg_port = free_port()
    agg = subprocess.Popen([str(Path(sys.executable).parent / "gym"), "verifier", "aggregate",
                            "--port", str(agg_port), "--interval", "0.5", "--account", "0"],
                           env={**gym.env, **aggregator}, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60  # a verifier run once delivers once: aggregator first
        while agg.poll() is None and time.monotonic() < deadline:
            try:
                httpx.get(f"http://127.0.0.1:{agg_port}/health", timeout=2).raise_for_status()
                break
            except httpx.HTTPError:
                time.sleep(0.2)
        for account, verifier in verifiers.items():
            judged = gym.run("verifier", "serve", "--model", str(tiny_model_dir),
                             "--aggregator", f"http://127.0.0.1:{agg_port}", "--once",
                             "--audit-rate", "0", "--account", account, extra_env=verifier,
                             timeout=300)
            assert judged.returncode == 0, judged.stderr  # its report goes to stderr
            assert f"challenge {challenge_id}: verdict delivered" in judged.stderr, judged.stderr
        deadline = time.monotonic() + 60
        while committee.challenge(challenge_id).status == ChallengeState.OPEN \
                and time.monotonic() < deadline and agg.poll() is None:
            time.sleep(0.5)
    finally:
        agg.send_signal(signal.SIGTERM)
        agg_output = agg.communicate(timeout=60)[0].decode()
    settled = committee.challenge(challenge_id)
    assert settled.status == ChallengeState.SETTLED, agg_output
    assert settled.verdict == 2 and len(settled.signers) == 2, settled  # rejected, by both
    assert all(empty_store(name) for name in ("challenger", "verifier-2", "verifier-3",
                                              "aggregator"))

    audited = run(auditor, "audit", f"node/{receipt['node']}/receipts")
    assert "receipt audit clean" in audited and "1 receipts; signer " + receipt["node"] in audited
