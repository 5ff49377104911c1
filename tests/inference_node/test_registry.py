"""NodeRegistry from the node's side, on a real devnet: `gym node serve --register` stakes and
registers before serving, `gym verify receipt` checks the signer's registration, `gym node list`
and `gym node challenge` work, and a receipt of an unregistered, re-registered-with-another-
model, slashed or deregistered node fails with its named reason."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import gym_forkserver
import httpx
import pytest
from node_helpers import MODEL_NAME, NODE_KEY, free_port, wait_for_health
from test_receipts import REQUEST, bundle_of
from web3 import Web3

from contracts.gym_token import GYM as TOKEN
from contracts.gym_token import parse_gym
from devnet.settings import ANVIL_DEV_KEYS
from inference_node.errors import ReceiptError
from inference_node.receipts import (
    ReceiptDomain,
    model_digest,
    parse_receipt,
    receipt_hash,
    sign_receipt,
)
from inference_node.registry import NodeRegistry, RegistryError
from inference_node.verify import verify_receipt_bundle
from ledger.blockstore import LocalBlockStore
from ledger.chain import ContractRevertError
from ledger.entries import encode_entry

pytestmark = pytest.mark.anvil
GYM = Path(sys.executable).parent / "gym"


@pytest.fixture
def deployed(ledger_devnet):
    manifest = json.loads(ledger_devnet.gym.deployment_file.read_text())
    contracts = {name: c["address"] for name, c in manifest["contracts"].items()}
    return ledger_devnet, contracts


def serve_registered(devnet, registry_address: str, model_dir: Path, *extra: str):
    port = free_port()
    env = {**devnet.gym.env, "GYM_NODE_KEY": NODE_KEY, "GYM_NODE_REGISTRY": registry_address,
           "OMP_NUM_THREADS": "1"}
    proc = gym_forkserver.popen(GYM, ["node", "serve", "--model", str(model_dir), "--device",
                                      "cpu", "--served-model-name", MODEL_NAME, "--port",
                                      str(port), "--key-env", "GYM_NODE_KEY",
                                      "--anchor-interval", "3600", "--register", *extra], env)
    return proc, port


def stop(proc) -> str:
    proc.send_signal(signal.SIGTERM)
    output = proc.communicate(timeout=120)[0].decode()
    assert proc.returncode == 0, output
    return output


def test_register_serve_verify_list_challenge(deployed, tiny_model_dir, other_model_dir,
                                              tmp_path):
    devnet, contracts = deployed
    gym = devnet.gym
    w3 = Web3(Web3.HTTPProvider(devnet.rpc_url))
    address = contracts["NodeRegistry"]
    registry = NodeRegistry(w3, address, from_block=devnet.deployment_block)
    extra_env = {"GYM_NODE_REGISTRY": address}

    proc, port = serve_registered(devnet, address, tiny_model_dir, "--stake", "150",
                                  "--endpoint", "https://node.example/v1")
    try:
        health = wait_for_health(proc, port, timeout_s=120)
        reply = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=REQUEST,
                           timeout=60)
        assert reply.status_code == 200, reply.text
        body = reply.json()
    finally:
        output = stop(proc)
    assert "registered operator" in output and NODE_KEY[2:] not in output
    signer = health["receipts"]["node"]
    operator = registry.operator_of_signer(signer)
    node = registry.node_of(operator)
    assert operator.lower() == signer  # one key: operator, signer and receipt-log owner
    assert node.model_digest == model_digest(tiny_model_dir) == body["receipt"]["model_digest"]
    assert (node.endpoint, node.stake, node.active) == ("https://node.example/v1",
                                                        150 * TOKEN, True)
    contract = devnet.contract()
    receipts_name = f"node/{signer}/receipts"
    receipt_log = next(e for e in contract.logs_created() if e.name == receipts_name)
    assert node.receipt_log_id == receipt_log.log_id
    assert contract.log_info(receipt_log.log_id).owner.lower() == signer
    assert contract.log_info(receipt_log.log_id).size == 1  # anchored on SIGTERM

    proof = gym.run("ledger", "proof", receipts_name, "0", "--json")
    assert proof.returncode == 0, proof.stderr
    bundle = {**bundle_of(body), "inclusion": json.loads(proof.stdout)}
    bundle_file = tmp_path / "bundle.json"
    bundle_file.write_text(json.dumps(bundle))
    verified = gym.run("verify", "receipt", str(bundle_file), "--model", str(tiny_model_dir),
                       extra_env=extra_env, timeout=300)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    rows = [[cell.strip() for cell in line.split("│")][1:3]
            for line in verified.stdout.splitlines()]
    for check in ("signature", "registration", "library", "inclusion", "anchoring",
                  "activations"):
        assert [check, "ok"] in rows, verified.stdout

    listed = gym.run("node", "list", extra_env=extra_env)
    assert listed.returncode == 0, listed.stderr
    assert operator in listed.stdout and "https://node.example/v1" in listed.stdout
    assert "150" in listed.stdout and "yes" in listed.stdout

    challenged = gym.run("node", "challenge", str(bundle_file), "--reason",
                         "the answer is wrong", extra_env=extra_env)
    assert challenged.returncode == 0, challenged.stderr
    challenge_id = int(challenged.stdout.split()[-1])
    record = registry.contract.functions.challengeOf(challenge_id).call()
    assert record[0] == operator and record[3] == 1  # Open
    assert bytes(record[4]) == receipt_hash(parse_receipt(body["receipt"]),
                                            ReceiptDomain.from_json(bundle["domain"]))
    opened = registry.contract.events.ChallengeOpened().get_logs(from_block=0)
    evidence = json.loads(LocalBlockStore(gym.data_dir / "ipfs").cat(
        opened[-1]["args"]["evidenceCid"]))
    assert evidence["reason"] == "the answer is wrong" and evidence["bundle"] == bundle

    # Serving again updates the record instead of registering twice.
    proc, port = serve_registered(devnet, address, tiny_model_dir, "--endpoint",
                                  "https://moved.example/v1", "--stake", "200")
    try:
        wait_for_health(proc, port, timeout_s=120)
    finally:
        output = stop(proc)
    assert "updated operator" in output
    node = registry.node_of(operator)
    assert (node.endpoint, node.stake) == ("https://moved.example/v1", 200 * TOKEN)

    kwargs = {"registry": registry, "domain": ReceiptDomain.from_json(bundle["domain"]),
              "contract": contract, "content": LocalBlockStore(gym.data_dir / "ipfs"),
              "from_block": devnet.deployment_block}

    def fails(bad_bundle, reason):
        with pytest.raises(ReceiptError) as failure:
            verify_receipt_bundle(bad_bundle, **kwargs)
        assert failure.value.reason == reason, failure.value

    assert any(c.name == "registration" and c.passed
               for c in verify_receipt_bundle(bundle, **kwargs))
    # A receipt signed by a key no node registered.
    stranger = ANVIL_DEV_KEYS[2]
    unsigned = parse_receipt(bundle["receipt"]).model_copy(update={
        "signature": None, "node": w3.eth.account.from_key(stranger).address.lower()})
    fails({**bundle, "inclusion": None, "receipt": json.loads(encode_entry(
        sign_receipt(unsigned, stranger, kwargs["domain"])))}, "not_registered")
    # An inclusion proof from another log than the node's registered receipt log.
    fails({**bundle, "inclusion": {**bundle["inclusion"], "log_id": 1}}, "receipt_log")
    # The node re-registered serving another model.
    owner = NodeRegistry(w3, address, NODE_KEY)
    owner.update(signer=signer, model_digest=model_digest(other_model_dir),
                 endpoint=node.endpoint)
    fails(bundle, "registered_model")
    owner.update(signer=signer, model_digest=node.model_digest, endpoint=node.endpoint)
    # Governance (the timelock, impersonated on Anvil) slashes it below the minimum stake.
    timelock = contracts["TimelockController"]
    w3.provider.make_request("anvil_impersonateAccount", [timelock])
    w3.provider.make_request("anvil_setBalance", [timelock, hex(10**18)])
    tx = registry.contract.functions.slash(operator, 150 * TOKEN, challenge_id,
                                           contracts["GymToken"]).transact({"from": timelock})
    assert w3.eth.wait_for_transaction_receipt(tx)["status"] == 1
    w3.provider.make_request("anvil_stopImpersonatingAccount", [timelock])  # not reverted
    assert not registry.is_active(operator)
    fails(bundle, "node_slashed")
    failed = gym.run("verify", "receipt", str(bundle_file), extra_env=extra_env)
    assert failed.returncode == 1 and "node_slashed" in failed.stdout + failed.stderr
    # Topped up, then deregistered (unbonding).
    owner.add_stake(parse_gym("100", "stake"))
    assert registry.is_active(operator)
    owner.deregister()
    fails(bundle, "node_deregistered")
    with pytest.raises(RegistryError, match="unbonding"):
        owner.ensure_registered(signer=signer, model_digest=node.model_digest,
                                endpoint=node.endpoint, stake=parse_gym("100", "stake"),
                                receipt_log_id=node.receipt_log_id)
    # The contract's custom errors come back named, with their values.
    newcomer = NodeRegistry(w3, address, ANVIL_DEV_KEYS[3])
    with pytest.raises(ContractRevertError) as refused:
        newcomer.register(signer=newcomer.account.address, model_digest=node.model_digest,
                          endpoint="https://x.example/v1", stake=1, receipt_log_id=1)
    assert refused.value.name == "NodeRegistryStakeBelowMinimum"
    assert refused.value.values == {"stake": 1, "minStake": 100 * TOKEN}

