"""One reward epoch on the devnet, end to end through the real `gym rewards` command: two
registered nodes answer with a library curated by the DAO from three authors' logs (one node
signs 1,000 receipts to itself naming one experience), a swarm run's contributions are
published and the run curated, three verifiers settle a challenge and audit the nodes'
receipts at random, publishing their reports (one forged, and the reports that called
verified a receipt the committee then proved bad); then each verifier computes
the epoch's table itself, the same bytes; one aggregate attests its root; every account
claims its line to the wei after the appeal window; OpenZeppelin's merkle-tree (npm) recomputes
the root from the published table alone; a forged table is never signed."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from committee_world import BLS, CHALLENGER_KEY, SIGNER_KEY, VERIFIER_KEYS, register_verifiers
from eth_account import Account
from eth_utils import keccak, to_checksum_address
from gym_helpers import send
from web3 import Web3

from committee import g1_to_json
from committee.audit_reports import AuditPublisher
from committee.audits import AUDIT_DELAY_BLOCKS, NOT_RETAINED, VERIFIED, Auditor, AuditPass
from committee.judge import REQUIRED_CHECKS
from committee.rewards.distributor import EpochStatus, RewardDistributor
from committee.rewards.table import decode_table, encode_table, pool_budgets
from contracts import load_artifact
from contracts.devnet_accounts import ANVIL_DEV_KEYS, devnet_account_key
from contracts.gym_token import GYM
from devnet.deploy import Deployment
from governance.client import GovernanceClient
from governance.devnet_curation import curate_on_devnet
from inference_node.bundle_sources import NotRetainedError
from inference_node.receipt_log import ReceiptLog
from inference_node.receipts import (
    ReceiptDomain,
    build_receipt,
    bundle_json,
    library_ref,
    receipt_hash,
    sign_receipt,
)
from inference_node.registry import NodeRegistry
from inference_node.verify import ReceiptCheck
from ledger.blockstore import LocalBlockStore
from ledger.chain import LedgerContract
from ledger.contributions import sign_contribution_data
from ledger.entries import ContributionEntry, RunEntry, encode_entry, entry_cid
from ledger.errors import ContentStoreUnreachableError
from ledger.logstore import LogStore
from ledger.publish import append_entries, ensure_chain_log, publish

pytestmark = [pytest.mark.anvil, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
OPERATOR_A = ANVIL_DEV_KEYS[4]  # node A's operator (its signer: SIGNER_KEY), 300 GYM staked


def fresh(name: str, w3: Web3, token, gym_from: str | None = None, amount: int = 0) -> str:
    """A key of its own for ``name``, with ether (and ``amount`` GYM from ``gym_from``)."""
    key = "0x" + keccak(f"rewards test {name}".encode()).hex()
    w3.provider.make_request("anvil_setBalance", [Account.from_key(key).address, hex(10**20)])
    if amount:
        send(w3, token.functions.transfer(Account.from_key(key).address, amount), gym_from)
    return key


def experience(author: int) -> bytes:
    return json.dumps({"type": "experience", "v": 1, "op": "add", "domain": "math",
                       "text": f"Author {author}: check the units before the last step.",
                       "provenance": {"method": "tfgrpo", "base_model": "SmolLM2-135M-Instruct",
                                      "step": author}}).encode()


def canonical(data: bytes) -> bytes:
    from ledger.publish import entry_from_json

    return entry_from_json(json.loads(data))


class _Down:
    """A content endpoint that cannot be reached."""

    def __init__(self, content) -> None:
        self.content = content

    def add_file(self, *_args, **_kwargs):
        raise ContentStoreUnreachableError("the content endpoint is down")

    def __getattr__(self, name):
        return getattr(self.content, name)


class _Round:
    def __init__(self, epoch: int, samples: int) -> None:
        self.epoch, self.samples = epoch, samples


def contribution(run_cid: str, key: str, samples: int) -> bytes:
    """A contribution entry signed by ``key``'s account, credited ``samples``."""
    fields = {"run": "arith", "config_digest": "sha256:" + "ab" * 32, "peer_id": f"Qm{samples}",
              "contributor": Account.from_key(key).address.lower(), "samples": samples,
              "steps": samples // 2, "epoch": 2, "rounds": [_Round(2, samples)]}
    view = type("Record", (), fields)
    signature = sign_contribution_data(view, key)
    return encode_entry(ContributionEntry(
        **{**fields, "rounds": [{"epoch": 2, "samples": samples}]}, signature=signature,
        run_cid=run_cid, credited_samples=samples, credited_rounds=1, share=0.5))


def test_an_epoch_is_computed_by_each_verifier_attested_once_and_claimed_to_the_wei(
        ledger_devnet, tmp_path):
    gym = ledger_devnet.gym
    deployment = Deployment.load(gym.deployment_file)
    world = register_verifiers(deployment)  # verifiers in slots 0-2 (BLS), challenger funded
    w3, token = world.w3, world.token
    abi = load_artifact("ExperienceLedger").abi
    ledger_address = deployment.contracts["ExperienceLedger"].address
    store = LogStore(f"sqlite:///{tmp_path / 'parties.sqlite'}")
    content = LocalBlockStore(gym.data_dir / "ipfs")  # what the `gym` commands read here
    distributor = RewardDistributor(w3, deployment.contracts["RewardDistributor"].address)
    first, last = distributor.epoch_bounds(0)
    assert first <= w3.eth.block_number < last  # everything below happens in epoch 0

    def ledger_of(key: str) -> LedgerContract:
        return LedgerContract(w3, ledger_address, abi, key)

    def published(key: str, name: str, entries: list[bytes]) -> int:
        store.create_log(name)
        contract = ledger_of(key)
        log_id = ensure_chain_log(store, contract, name)
        append_entries(store, content, name, entries)
        publish(store, content, contract, name)
        return log_id

    # three authors, an experience each, curated by the DAO
    authors = [fresh(f"author {i}", w3, token) for i in range(3)]
    adds = [canonical(experience(i)) for i in range(3)]
    experiences = [entry_cid(data) for data in adds]
    client = GovernanceClient(
        w3, deployment.contracts["GymGovernor"].address, load_artifact("GymGovernor").abi,
        token.address, load_artifact("GymToken").abi, ledger_of(ANVIL_DEV_KEYS[0]),
        deployment.contracts["TimelockController"].address,
        load_artifact("TimelockController").abi, curated_log_id=deployment.curated_log_id,
        private_key=ANVIL_DEV_KEYS[0], from_block=deployment.deployment_block)
    params = deployment.governance
    for i, key in enumerate(authors):
        published(key, f"author-{i}", [adds[i]])
        done = curate_on_devnet(client, store, content, f"author-{i}", [0], f"author {i}",
                                voting_period=params.voting_period,
                                timelock_delay=params.timelock_min_delay)
        assert done.executed

    # a swarm run of two contributors, published by its publisher and curated
    publisher = fresh("run publisher", w3, token)
    contributors = [fresh(f"contributor {i}", w3, token) for i in range(2)]
    run = encode_entry(RunEntry(config={"steps": 4}, code_version="test", packages={},
                                hardware={"swarm": {"run": "arith"}}, dataset_digests=[],
                                metrics={}))
    run_cid = entry_cid(run)
    published(publisher, "arith-run", [run, contribution(run_cid, contributors[0], 30),
                                       contribution(run_cid, contributors[1], 10)])
    assert curate_on_devnet(client, store, content, "arith-run", [0], "the arith run",
                            voting_period=params.voting_period,
                            timelock_delay=params.timelock_min_delay).executed

    # two nodes: A (300 GYM) and B (100 GYM), each with its receipt log
    registry = w3.eth.contract(address=deployment.contracts["NodeRegistry"].address,
                               abi=load_artifact("NodeRegistry").abi)
    operator_b = fresh("operator B", w3, token, ANVIL_DEV_KEYS[1], 200 * GYM)
    signer_b = fresh("signer B", w3, token)
    domain = ReceiptDomain(w3.eth.chain_id, ledger_address)
    library = library_ref(str(deployment.curated_log_id), 4, "")
    logs = {}
    for name, operator, signer, stake in (("A", OPERATOR_A, SIGNER_KEY, 300 * GYM),
                                          ("B", operator_b, signer_b, 100 * GYM)):
        receipts = ReceiptLog(store, content, ledger_of(operator), f"node-{name}-receipts",
                              linger_s=0.05)
        log_id = ensure_chain_log(store, ledger_of(operator), f"node-{name}-receipts")
        send(w3, token.functions.approve(registry.address, stake), operator)
        send(w3, registry.functions.register(Account.from_key(signer).address, keccak(b"model"),
                                             "http://127.0.0.1:9", stake, log_id), operator)
        logs[name] = (receipts, signer)

    bundles: dict[str, dict] = {}  # what node A keeps for the auditors (B keeps nothing)
    signed: dict[tuple[str, int], object] = {}

    def answer(node: str, i: int, names: list[str]) -> None:
        receipts, signer = logs[node]
        request = {"messages": [{"role": "user", "content": f"q{node}{i}"}]}
        unsigned = build_receipt(
            node=Account.from_key(signer).address, model_digest="sha256:" + "ab" * 32,
            library=library, experience_ids=names, request_json=request,
            text=f"a{i}", completion_token_ids=[1, 2], prompt_tokens=3, temperature=0.0,
            top_p=1.0, max_tokens=4, seed=i, activation_commitment="toploc1:1:32:AA==",
            at=1_700_000_000)
        receipt = signed[(node, i)] = sign_receipt(unsigned, signer, domain)
        receipts.submit(receipt)
        if node == "A":
            bundles[entry_cid(encode_entry(receipt))] = bundle_json(
                receipt, domain, route="chat", request=request, text=f"a{i}",
                completion_token_ids=[1, 2])

    for i in range(30):  # node A: 30 answers with experiences 0 and 1, 10 with experience 2
        answer("A", i, experiences[:2])
    for i in range(30, 39):
        answer("A", i, [experiences[2]])
    uncurated = entry_cid(canonical(experience(99)))  # never curated: counts for nobody
    for i in range(1000):  # node B signs 1,000 receipts to itself naming experience 2
        answer("B", i, [experiences[2], uncurated] if i % 2 else [experiences[2]])
    for receipts, _ in logs.values():
        receipts.anchor()
    answer("A", 39, [experiences[2]])  # a checkpoint of its own: the receipt proven bad below
    logs["A"][0].anchor()
    bad_leaf = 39

    # the verifiers audit the anchored receipts at random and publish a report per checkpoint:
    # verifier 0 at 100 %, verifier 1 at 5 %; node A serves every bundle, B none (not retained)
    w3.provider.make_request("anvil_mine", [hex(AUDIT_DELAY_BLOCKS)])
    start = deployment.deployment_block
    nodes = NodeRegistry(w3, registry.address, from_block=start)

    def fetch(_endpoint: str, cid: str) -> dict:
        if cid not in bundles:
            raise NotRetainedError(f"{cid} is not kept")
        return bundles[cid]

    def passes(_bundle: dict) -> list[ReceiptCheck]:  # the receipts' own checks (no model here)
        return [ReceiptCheck(name, True, "ok") for name in REQUIRED_CHECKS]

    audits = {}
    for i, rate in ((0, 10_000), (1, 500)):
        auditor = Auditor(ledger_of(VERIFIER_KEYS[i]), nodes, content, from_block=start,
                          check=passes, open_challenge=lambda *_: pytest.fail("no challenge"),
                          fetch=fetch, rate_bps=rate)
        audits[i] = auditor.run_once()
        sampled = sum(1 for c in audits[i].checkpoints if c.sampled)
        kept = tmp_path / f"audit-reports-{i}.json"
        if i == 1:  # verifier 1's endpoint is down: its reports wait on disk, then it restarts
            with pytest.raises(ContentStoreUnreachableError):
                AuditPublisher(store, _Down(content), ledger_of(VERIFIER_KEYS[i]), rate,
                               kept).publish(audits[i])
            assert len(json.loads(kept.read_text())["reports"]) == sampled
            audits_after_restart = AuditPass([], [])  # the cursor had moved on: nothing new
            published = AuditPublisher(store, content, ledger_of(VERIFIER_KEYS[i]), rate,
                                       kept).publish(audits_after_restart)
        else:
            published = AuditPublisher(store, content, ledger_of(VERIFIER_KEYS[i]), rate,
                                       kept).publish(audits[i])
        assert len(published) == sampled and not kept.exists()
    assert {f.outcome for f in audits[0].findings} == {VERIFIED, NOT_RETAINED}
    assert AuditPublisher(store, content, ledger_of(VERIFIER_KEYS[0]), 10_000).publish(
        audits[0])  # published twice: the second report of a checkpoint counts for nothing
    # a restart with nothing new to report: all anchored already, nothing to do, no error
    assert AuditPublisher(store, content, ledger_of(VERIFIER_KEYS[0]), 10_000).publish(
        AuditPass([], [])) == []
    forged = audits[0].checkpoints[0]  # verifier 2 reports a sample the seed did not draw
    AuditPublisher(store, content, ledger_of(VERIFIER_KEYS[2]), 10_000).publish(AuditPass(
        audits[0].findings, [replace(forged, sampled=forged.sampled[:1])]))

    # the committee settles a challenge against node A and it is finalized in the epoch
    from committee_world import CommitteeWorld

    cw = CommitteeWorld(w3, deployment, token, Account.from_key(OPERATOR_A).address,
                        deployment.contracts["VerifierCommittee"].address)
    challenge_id, digest = cw.open(1, receipt_hash(
        signed[("A", 39)].model_copy(update={"signature": None}), domain))
    cw.settle(challenge_id, digest, signers=(0, 1, 2))
    client.advance_time(params.committee_appeal_window + 1)
    cw.client(CHALLENGER_KEY).finalize(challenge_id)

    # the epoch ends
    head = w3.eth.block_number
    assert head <= last
    w3.provider.make_request("anvil_mine", [hex(last - head + 1)])

    # each verifier computes the table itself and signs it
    signed, tables = [], set()
    for i, key in enumerate(VERIFIER_KEYS):
        bls = tmp_path / f"bls-{i}.json"
        bls.write_text(json.dumps({"type": "gym-bls-key", "v": 1, "sk": f"0x{BLS[i].value:064x}",
                                   "pk1": g1_to_json(BLS[i].pk1())}))
        out = tmp_path / f"signed-{i}.json"
        done = gym.run("rewards", "sign", "0", "--bls-key", str(bls), "--out", str(out),
                       extra_env={"GYM_VERIFIER_KEY": key}, timeout=300)
        assert done.returncode == 0, done.stderr
        signed.append(out)
        tables.add((gym.data_dir / "rewards" / "epoch-0.json").read_bytes())
    assert len(tables) == 1  # the same bytes, three times
    data = tables.pop()
    table = decode_table(data)
    cid = json.loads(signed[0].read_text())["table_cid"]

    # the rules, on what the chain and the content endpoint hold
    budgets = pool_budgets(*distributor.budget_of(0))
    a, b = (to_checksum_address(Account.from_key(k).address) for k in (OPERATOR_A, operator_b))
    author = [to_checksum_address(Account.from_key(k).address) for k in authors]
    data_lines = table.sources["data"]
    # the stakes at the epoch's end: A was slashed for the upheld challenge
    stake_a, stake_b = (registry.functions.nodeOf(x).call(block_identifier=last)[4]
                        for x in (a, b))
    assert stake_a < 300 * GYM and stake_b == 100 * GYM
    slice_b = budgets["data"] * stake_b // (stake_a + stake_b)
    from_b = [line for line in data_lines if line["node"] == b]
    assert sum(line["amount"] for line in from_b) <= slice_b  # 1,000 receipts: B's slice
    assert [(line["account"], line["uses"]) for line in from_b] == [(author[2], 1000)]
    uses_a = {line["account"]: line["uses"] for line in data_lines if line["node"] == a}
    assert uses_a == {author[0]: 30, author[1]: 30, author[2]: 9}  # the bad receipt: nobody's
    for i in (0, 1):  # A's uses are paid as if B had signed nothing
        assert table.accounts[author[i]]["data"] == \
            budgets["data"] * stake_a * 30 // ((stake_a + stake_b) * 69)
    contributed = [to_checksum_address(Account.from_key(k).address) for k in contributors]
    assert table.accounts[contributed[0]]["compute"] == budgets["compute"] * 30 // 40
    verifiers = [to_checksum_address(Account.from_key(k).address) for k in VERIFIER_KEYS]
    # verification: a point per settlement signature, and per report that checked something,
    # but for a report that called the receipt proven bad verified (verifier 0's, whose check
    # passes everything, and verifier 1's if its sample drew that leaf)
    reports = [sum(1 for c in audits[i].checkpoints if c.sampled) for i in (0, 1)]
    lazy = [sum(1 for c in audits[i].checkpoints if c.operator == a and bad_leaf in c.sampled)
            for i in (0, 1)]
    assert lazy[0] == 1
    counted = [reports[i] - lazy[i] for i in (0, 1)]
    point = budgets["verification"] // (3 + sum(counted))
    assert {v: table.accounts[v]["verification"] for v in verifiers} == {
        verifiers[0]: point * (1 + counted[0]), verifiers[1]: point * (1 + counted[1]),
        verifiers[2]: point}  # verifier 2's forged report counted nothing
    # availability: A's audited checkpoints passed (the one of the bad receipt went unaudited:
    # its only reports were lazy); every audit of B found it kept nothing
    assert table.accounts[a]["availability"] == budgets["availability"]
    assert "availability" not in table.accounts.get(b, {})
    assert sum(1 for c in audits[0].checkpoints if c.operator == a) == 2
    assert [(line["checkpoints"], line["passed"]) for line in table.sources["availability"]] \
        == [(1, 1)]
    assert table.total() <= distributor.budget_of(0)[0]

    # a forged table (one amount moved) is never signed by an honest verifier
    doc = json.loads(data)
    doc["sources"]["compute"][0]["amount"] = str(int(doc["sources"]["compute"][0]["amount"]) - 5)
    doc["sources"]["compute"][1]["amount"] = str(int(doc["sources"]["compute"][1]["amount"]) + 5)
    forged_cid = content.add_file(json.dumps(doc).encode(), pin=True)
    refused = gym.run("rewards", "sign", "0", "--expect", forged_cid, "--bls-key",
                      str(tmp_path / "bls-0.json"), extra_env={"GYM_VERIFIER_KEY": VERIFIER_KEYS[0]})
    assert refused.returncode == 1 and "not signed" in refused.stderr, refused.stderr

    # a verifier's service whose endpoint lacked one of A's receipts when it first computed the
    # epoch signs another root; computed again after RECOMPUTE_S, it signs the epoch's and
    # sends it at once (not only when the process restarts)
    from committee.client import VerifierCommittee
    from committee.rewards.facts import Sources
    from committee.rewards.pool import RECOMPUTE_S, RESEND_S, RootSigner

    partial = tmp_path / "partial-ipfs"
    shutil.copytree(gym.data_dir / "ipfs", partial)
    missing = partial / "blocks" / store.leaf("node-A-receipts", 0).cid
    aside = missing.read_bytes()
    missing.unlink()
    now, sent = [0.0], []
    service = RootSigner(
        Sources(ledger=ledger_of(OPERATOR_A), content=LocalBlockStore(partial),
                registry=NodeRegistry(w3, registry.address, from_block=start),
                committee=VerifierCommittee(w3, cw.address, from_block=start),
                curated_log_id=deployment.curated_log_id, from_block=start),
        distributor, VerifierCommittee(w3, cw.address, from_block=start), BLS[0], verifiers[0],
        sent.append, report=lambda _: None, clock=lambda: now[0])
    service.tick()
    assert len(sent) == 1 and sent[0].claim.root != table.root  # 29 of A's answers counted
    missing.write_bytes(aside)  # the endpoint has it now
    now[0] = RESEND_S / 2
    service.tick()
    assert len(sent) == 1  # nothing new yet
    now[0] = RECOMPUTE_S + 1
    service.tick()
    assert len(sent) == 2 and (sent[1].claim.root, sent[1].claim.table_cid) == (table.root, cid)

    # one aggregate attests the root
    attested = gym.run("rewards", "attest", "0", *map(str, signed), "--account", "0")
    assert attested.returncode == 0, attested.stderr
    root = distributor.epoch_root(0)
    assert (root.status, root.root, root.total, root.table_cid) == (
        EpochStatus.ATTESTED, table.root, table.total(), cid)

    status = gym.run("rewards", "status", "--json")
    assert status.returncode == 0, status.stderr
    epoch0 = json.loads(status.stdout)[0]
    assert (epoch0["status"], epoch0["root"], epoch0["table_cid"]) == (
        "attested", "0x" + table.root.hex(), cid)
    shown = gym.run("rewards", "show", "0")  # the table, as people read it
    assert shown.returncode == 0 and "0x" + table.root.hex() in shown.stdout, shown.stderr
    assert all(account in shown.stdout for account in table.accounts)
    computed = gym.run("rewards", "compute", "0", "--json")  # anyone, any time after: the same
    assert json.loads(computed.stdout)["table_cid"] == cid, computed.stderr

    # OpenZeppelin's merkle-tree, from the published table alone, gives the attested root
    node = shutil.which("node")
    assert node is not None
    recomputed = subprocess.run([node, str(REPO / "scripts" / "reward-root.mjs")],
                                input=content.cat(cid), capture_output=True, timeout=60,
                                cwd=REPO, check=False)
    assert json.loads(recomputed.stdout)["root"] == "0x" + root.root.hex()

    # before the appeal window ends no claim is paid; then every account claims to the wei
    early = gym.run("rewards", "claim", "0", "--for", author[0], "--account", "0")
    assert early.returncode == 1 and "RewardsNotFinal" in early.stderr, early.stderr
    client.advance_time(distributor.value("appealWindow") + 1)
    treasury = deployment.contracts["TimelockController"].address
    before = {account: token.functions.balanceOf(account).call() for account in table.accounts}
    treasury_before = token.functions.balanceOf(treasury).call()
    shown = gym.run("rewards", "show", "0", author[2], "--json")
    assert shown.returncode == 0, shown.stderr
    assert int(json.loads(shown.stdout)["total"]) == table.total(author[2])
    for n, account in enumerate(table.accounts):
        if n < 2:  # through the command
            done = gym.run("rewards", "claim", "0", "--for", account, "--account", "0")
            assert done.returncode == 0, done.stderr
        else:
            proof = table.tree().proof(account)
            RewardDistributor(w3, distributor.address, ANVIL_DEV_KEYS[0]).claim(
                0, account, table.total(account), proof)
    for account in table.accounts:
        assert token.functions.balanceOf(account).call() - before[account] == \
            table.total(account)
    assert treasury_before - token.functions.balanceOf(treasury).call() == table.total()
    again = gym.run("rewards", "claim", "0", "--for", author[0], "--account", "0")
    assert again.returncode == 1 and "already claimed" in again.stderr
    assert encode_table(table) == data
    store.engine.dispose()


def test_the_verifiers_services_sign_ended_epochs_and_the_aggregator_attests_once(
        ledger_devnet, tmp_path):
    """What `gym verifier serve` and `gym verifier aggregate` run: each verifier's RootSigner
    computes the ended epoch's table and posts its signed root over HTTP; the aggregator's
    RootPool checks each post and attests once two thirds of the stake signed one root."""
    import threading

    import httpx
    from committee_world import CommitteeWorld

    from committee.aggregator import Aggregator, make_http_server
    from committee.client import VerifierCommittee
    from committee.rewards.facts import Sources
    from committee.rewards.pool import RootPool, RootSigner, post_root
    from committee.verdict_auth import HEADER, sign_post
    from inference_node.registry import NodeRegistry

    gym = ledger_devnet.gym
    deployment = Deployment.load(gym.deployment_file)
    world = register_verifiers(deployment)
    w3, token = world.w3, world.token
    start = deployment.deployment_block
    content = LocalBlockStore(tmp_path / "ipfs")
    ledger = LedgerContract(w3, deployment.contracts["ExperienceLedger"].address,
                            load_artifact("ExperienceLedger").abi, OPERATOR_A)
    log_id, _ = ledger.create_log("node receipts")
    registry = w3.eth.contract(address=deployment.contracts["NodeRegistry"].address,
                               abi=load_artifact("NodeRegistry").abi)
    send(w3, token.functions.approve(registry.address, 300 * GYM), OPERATOR_A)
    send(w3, registry.functions.register(Account.from_key(SIGNER_KEY).address, keccak(b"model"),
                                         "http://127.0.0.1:9", 300 * GYM, log_id), OPERATOR_A)
    cw = CommitteeWorld(w3, deployment, token, Account.from_key(OPERATOR_A).address,
                        deployment.contracts["VerifierCommittee"].address)
    challenge_id, digest = cw.open(1)
    cw.settle(challenge_id, digest, signers=(0, 2))  # slot 1 did not sign this one
    w3.provider.make_request("evm_increaseTime", [deployment.governance.committee_appeal_window
                                                  + 1])
    w3.provider.make_request("evm_mine", [])
    cw.client(CHALLENGER_KEY).finalize(challenge_id)

    address = deployment.contracts["RewardDistributor"].address
    reader = RewardDistributor(w3, address)
    committee = VerifierCommittee(w3, cw.address, devnet_account_key(9), from_block=start)
    distributor = RewardDistributor(w3, address, devnet_account_key(9))
    aggregator = Aggregator(committee, finalize=False, report=lambda _: None,
                            roots=RootPool(distributor, committee, report=lambda _: None))
    server = make_http_server(aggregator, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        signers = []
        for i, key in enumerate(VERIFIER_KEYS):
            sources = Sources(ledger=ledger, registry=NodeRegistry(w3, registry.address,
                                                                   from_block=start),
                              committee=VerifierCommittee(w3, cw.address, from_block=start),
                              content=content, curated_log_id=deployment.curated_log_id,
                              from_block=start)
            account = Account.from_key(key)
            signers.append(RootSigner(sources, reader, VerifierCommittee(
                w3, cw.address, from_block=start), BLS[i], account.address,
                post_root([url], account), report=lambda _: None))

        signers[0].tick()  # epoch 0 still runs: nothing to sign
        assert aggregator.roots.pending() == []
        _, last = reader.epoch_bounds(0)
        w3.provider.make_request("anvil_mine", [hex(last - w3.eth.block_number + 1)])

        signers[0].tick()  # one verifier's root: held, no quorum
        aggregator.tick()
        assert aggregator.roots.pending() == [0]
        assert reader.epoch_root(0).status == EpochStatus.NONE
        # a root posted by another account than its verifier is refused before any pairing
        held = signers[0]._signed[0]
        body = held.to_bytes()
        wrong = httpx.post(url + "/v1/roots", content=body, timeout=30, headers={
            HEADER: sign_post(Account.from_key(VERIFIER_KEYS[1]), body)})
        assert wrong.status_code == 401, wrong.text
        again = httpx.post(url + "/v1/roots", content=body, timeout=30, headers={
            HEADER: sign_post(Account.from_key(VERIFIER_KEYS[0]), body)})
        assert again.json()["status"] == "duplicate"

        signers[2].tick()  # two of three equal stakes: two thirds
        aggregator.tick()
        root = reader.epoch_root(0)
        assert root.status == EpochStatus.ATTESTED and root.root == held.claim.root
        assert aggregator.roots.pending() == []
        table = decode_table(content.cat(root.table_cid))
        verifiers = [to_checksum_address(Account.from_key(k).address) for k in VERIFIER_KEYS]
        # the settlement's signers; no anchored receipts: no availability, no data
        assert set(table.accounts) == {verifiers[0], verifiers[2]}
        late = httpx.post(url + "/v1/roots", content=body, timeout=30, headers={
            HEADER: sign_post(Account.from_key(VERIFIER_KEYS[0]), body)})
        assert late.status_code == 409 and "attested already" in late.text
        signers[1].tick()  # an attested epoch is not signed again
        assert 0 not in signers[1]._signed
    finally:
        server.shutdown()
