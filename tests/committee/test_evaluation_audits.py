"""committee.evaluation_audits (docs/committee.md "Audits of evaluations"): the sample of an
evaluation's generations; hostile evaluations named by CID, with a stand-in check; and on a
real Anvil an evaluation published through a registered node (the tiny random model signing
every generation under the deployment's domain, the bundles and receipt table on the content
store, the entry anchored on an evaluation log), followed by a verifier: honest receipts pass
the full check, the one the node signed for fabricated tokens becomes a committee challenge
against it, and a bundle the evaluator edited is reported, not challenged. `gym verify
evaluation` passes the forged evaluation unless it re-runs that generation: the audit is what
catches it."""

from __future__ import annotations

import asyncio
import hashlib
import json
from types import SimpleNamespace

import pytest
from eth_account import Account
from eth_utils import keccak
from node_helpers import MODEL_NAME, NODE_KEY
from test_receipt_attacks import fabricated
from test_sync import TEXTS, experience

from committee import keyfile
from committee.audits import (
    ERROR,
    FAILED,
    INVALID_BUNDLE,
    PENDING,
    UNAUDITABLE,
    VERIFIED,
    AuditCursor,
)
from committee.challenges import open_committee_challenge
from committee.client import ChallengeState, VerifierCommittee
from committee.evaluation_audits import (
    NOT_ON_ENDPOINT,
    UNVERIFIED,
    EvaluationAuditor,
    evaluation_seed,
    named_seed,
    sample_size,
    sampled_generations,
)
from committee.judge import REQUIRED_CHECKS
from committee.service import verifier_ops
from contracts import load_artifact
from contracts.devnet_accounts import devnet_account_key
from devnet.deploy import Deployment
from devnet.runtime import ledger_runtime
from devnet.settings import GymSettings
from inference_node.challenges import challenged_receipt
from inference_node.engine import SamplingParams
from inference_node.errors import ReceiptError
from inference_node.evaluation_check import EvaluationRefused, request_seed, verify_evaluation
from inference_node.injection import LibraryInjector
from inference_node.library import EMPTY_LIBRARY, LibrarySnapshot
from inference_node.normalized_request import from_client_request, request_key
from inference_node.receipts import (
    ReceiptDomain,
    ReceiptSigner,
    build_receipt,
    bundle_json,
    library_ref,
    model_digest,
    parse_receipt,
    sign_receipt,
)
from inference_node.registry import NodeRegistry
from inference_node.verify import ReceiptCheck
from ledger import rfc9162
from ledger.blockstore import LocalBlockStore
from ledger.canonical_json import canonical_bytes
from ledger.chain import LogKind
from ledger.entries import EvaluationEntry, decode_entry, encode_entry, entry_cid
from ledger.evaluations import ReceiptTable, encode_receipt_table, seed_figures
from trainer.evaluation_publish import append_and_anchor
from trainer.verifiers import exact_match

OBJECTIVE = "Answer with one word."
PROBLEMS = [{"problem": "the farmer buys twelve apple", "answer": "apple"},
            {"problem": "count the banana and check each step", "answer": "banana"},
            {"problem": "seven river and three mountain", "answer": "river"}]
ARMS = ("baseline", "library")  # the receipt table's order: the entry's arms, sorted


# --------------------------------------------------------------------------- the sample


def test_the_sample_is_the_lowest_draws_at_least_one_and_at_most_the_cap():
    assert [sample_size(n, 500, 32) for n in (0, 1, 6, 20, 21, 640, 200_000)] == [
        0, 1, 1, 1, 2, 32, 32]
    assert sample_size(6, 10_000, 32) == 6 and sample_size(6, 5_000, 32) == 3
    assert sample_size(100, 0, 32) == 0
    with pytest.raises(ValueError):
        sample_size(10, 10_001, 32)
    seed = keccak(b"checkpoint")
    draws = sorted(range(50), key=lambda g: int.from_bytes(
        keccak(seed + g.to_bytes(32, "big")), "big"))
    assert sampled_generations(seed, 50, 1_000, 32) == sorted(draws[:5])
    assert sampled_generations(seed, 50, 10_000, 4) == sorted(draws[:4])
    assert sampled_generations(seed, 50, 1_000, 32) != sampled_generations(
        keccak(b"another"), 50, 1_000, 32)
    assert evaluation_seed(seed, 7) == keccak(seed + (7).to_bytes(32, "big"))
    assert named_seed(seed, "bafy") != named_seed(seed, "bafz")


# --------------------------------------------------------------------------- stand-ins


def unbound_bundle(i: int, domain: ReceiptDomain) -> dict:
    """A v1 receipt signed by NODE_KEY with the request and response its digests sign (as
    test_audits': what the stand-in check then says decides)."""
    request = {"messages": [{"role": "user", "content": f"question {i}"}], "max_tokens": 4}
    unsigned = build_receipt(
        node=Account.from_key(NODE_KEY).address, model_digest="sha256:" + "ab" * 32,
        library=library_ref("", 0, ""), experience_ids=[], request_json=request,
        text=f"answer {i}", completion_token_ids=[i, i + 1], prompt_tokens=3, temperature=0.0,
        top_p=1.0, max_tokens=4, seed=i, activation_commitment="toploc1:1:32:AA==",
        at=1_700_000_000)
    return bundle_json(sign_receipt(unsigned, NODE_KEY, domain), domain, route="chat",
                       request=request, text=f"answer {i}", completion_token_ids=[i, i + 1])


def receipt_cid_of(bundle: dict) -> str:
    return entry_cid(encode_entry(parse_receipt(bundle["receipt"])))


class Check:
    """Every required check passes, except for the receipts in ``failing`` (CID -> reason)."""

    def __init__(self, failing: dict[str, str] | None = None):
        self.failing, self.seen = failing or {}, []

    def __call__(self, bundle: dict) -> list[ReceiptCheck]:
        cid = receipt_cid_of(bundle)
        self.seen.append(cid)
        if cid in self.failing:
            raise ReceiptError(self.failing[cid], "the verifier's prefill disagrees")
        return [ReceiptCheck(name, True, "ok") for name in REQUIRED_CHECKS]


def evaluation_entry(*, table: str | None, node: str, dataset: str, subject: dict,
                     figures: dict | None = None, problems: int = 3,
                     model_digest: str = "sha256:" + "ab" * 32) -> EvaluationEntry:
    """2 arms x 1 seed x ``problems`` x k=1; ``figures``: arm -> (Mean@1, Pass@1)."""
    figures = figures or {arm: (0.0, 0.0) for arm in ARMS}
    return EvaluationEntry(
        type="evaluation", v=1, subject=subject, baseline="baseline",
        task={"dataset": dataset, "problems": problems, "verifier": "exact",
              "prompt_digest": "sha256:" + hashlib.sha256(OBJECTIVE.encode()).hexdigest()},
        model_digest=model_digest,
        sampling={"k": 1, "seeds": [0], "temperature": 1.0, "top_p": 1.0, "max_tokens": 6},
        arms={arm: {"per_seed": [{"seed": 0, "mean_at_k": figures[arm][0],
                                  "pass_at_k": figures[arm][1]}]} for arm in ARMS},
        receipts="none" if table is None else {"node": node.lower(), "table": table})


def store_evaluation(content, bundles: list, **kwargs) -> str:
    """The bundles (dicts, or raw bytes, or a CID never stored) on ``content``, their table
    and the entry: the entry's CID."""
    cids = []
    for bundle in bundles:
        if isinstance(bundle, str):
            cids.append(bundle)
        else:
            data = bundle if isinstance(bundle, bytes) else canonical_bytes(bundle)
            cids.append(content.add_file(data, pin=True))
    half = len(cids) // 2
    table = content.add_file(encode_receipt_table(ReceiptTable(
        {"baseline": cids[:half], "library": cids[half:]})), pin=True)
    return content.add_file(encode_entry(evaluation_entry(table=table, **kwargs)), pin=True)


class Chain:
    """What the auditor reads of the chain for a named evaluation: the head and its hash."""

    def __init__(self, head: int):
        self.w3 = SimpleNamespace(eth=SimpleNamespace(block_number=head, get_block=self.block))

    @staticmethod
    def block(number: int) -> dict:
        return {"hash": keccak(b"block %d" % number)}


class Flaky:
    """A content store whose reads of ``down`` fail as an unreachable endpoint does."""

    def __init__(self, content, down: set[str]):
        self.content, self.down = content, down

    def cat(self, cid, **kwargs):
        if cid in self.down:
            raise ConnectionError("the content endpoint is down")
        return self.content.cat(cid, **kwargs)


def test_hostile_evaluations_named_by_cid_are_contained_and_each_audited_once(tmp_path):
    domain = ReceiptDomain(31337, "0x" + "12" * 20)
    store = LocalBlockStore(tmp_path / "content")
    node = Account.from_key(NODE_KEY).address
    unstored = entry_cid(b"never stored")
    common = {"node": node, "dataset": unstored,
              "subject": {"kind": "library", "log_id": 3, "size": 2, "root": "0x" + "cd" * 32,
                          "entries": [entry_cid(b"e0")]}}
    honest = [unbound_bundle(i, domain) for i in range(6)]
    forged = receipt_cid_of(honest[4])
    edited = json.loads(json.dumps(honest[5]))
    edited["response"]["text"] = "not what the node signed"
    mixed = store_evaluation(store, [*honest[:5], edited], **common)
    lost = store_evaluation(store, [unstored, b"{not json", *honest[:4]], **common)
    local = store.add_file(encode_entry(evaluation_entry(table=None, **common)), pin=True)
    no_table = store.add_file(encode_entry(evaluation_entry(table=unstored, **common)),
                              pin=True)
    short = store_evaluation(store, honest[:4], **common)  # 4 bundles, 6 generations
    experience = store.add_file(encode_entry(parse_receipt(honest[0]["receipt"])), pin=True)
    down = store_evaluation(store, [unbound_bundle(10 + i, domain) for i in range(6)], **common)
    check = Check({forged: "sampling"})
    opened: list[tuple[str, str]] = []

    def open_challenge(bundle: dict, reason: str) -> int:
        opened.append((receipt_cid_of(bundle), reason))
        return len(opened)

    content = Flaky(store, {down})
    auditor = EvaluationAuditor(Chain(40), content, from_block=0, check=check,
                                open_challenge=open_challenge, rate_bps=10_000,
                                named=[mixed, lost, local, no_table, short, experience, unstored,
                                       down])
    found = auditor.run_once().findings
    by_evaluation: dict[str, list] = {}
    for f in found:
        by_evaluation.setdefault(f.evaluation, []).append(f)
    assert [(f.outcome, f.reason, f.challenge_id) for f in by_evaluation[mixed]] == [
        (VERIFIED, "", None)] * 4 + [(FAILED, "sampling", 1), (INVALID_BUNDLE, "evidence", None)]
    label = "library, seed 0, problem 1, sample 0"
    assert by_evaluation[mixed][4].generation == label
    assert opened == [(forged, f"sampling (evaluation {mixed}, {label})")]
    assert "response" in by_evaluation[mixed][5].detail  # the edit is the evaluator's
    assert [f.outcome for f in by_evaluation[lost]][:2] == [NOT_ON_ENDPOINT, INVALID_BUNDLE]
    assert {f.outcome for f in by_evaluation[lost][2:]} == {VERIFIED}
    assert [(f.outcome, f.reason) for f in by_evaluation[local]] == [(UNVERIFIED,
                                                                      "unverified")]
    for cid, reason in ((no_table, "receipt_table"), (short, "receipt_table"),
                        (experience, "not_an_evaluation"), (unstored, "entry")):
        assert [(f.outcome, f.reason) for f in by_evaluation[cid]] == [(UNAUDITABLE, reason)]
    assert [f.outcome for f in by_evaluation[down]] == [ERROR]
    assert "the content endpoint is down" in by_evaluation[down][0].detail
    assert set(auditor.cursor.evaluations) == {mixed, lost, local, no_table, short, experience,
                                               unstored}
    assert set(auditor.cursor.evaluations.values()) == {40}
    # the sample was drawn with the head's hash
    assert sampled_generations(named_seed(Chain.block(40)["hash"], mixed), 6, 10_000, 32) == \
        list(range(6))

    content.down.clear()  # the endpoint is back: only what errored is audited again
    again = auditor.run_once().findings
    assert {f.evaluation for f in again} == {down} and {f.outcome for f in again} == {VERIFIED}
    assert auditor.run_once().findings == []
    assert len(opened) == 1
    cursor = AuditCursor.from_json(json.dumps(auditor.cursor.to_json()).encode())
    assert cursor == auditor.cursor and down in cursor.evaluations


def test_the_work_of_a_pass_is_bounded(tmp_path):
    domain = ReceiptDomain(31337, "0x" + "12" * 20)
    store = LocalBlockStore(tmp_path / "content")
    common = {"node": Account.from_key(NODE_KEY).address, "dataset": entry_cid(b"d"),
              "subject": {"kind": "library", "log_id": 3, "size": 2, "root": "0x" + "cd" * 32,
                          "entries": [entry_cid(b"e0")]}}
    named = [store_evaluation(store, [unbound_bundle(10 * e + i, domain) for i in range(6)],
                              **common) for e in range(3)]
    check = Check()
    auditor = EvaluationAuditor(Chain(9), store, from_block=0, check=check,
                                open_challenge=print, rate_bps=5_000, max_per_evaluation=2,
                                max_checks=3, named=named)
    first = auditor.run_once().findings
    # 50 % of 6 is 3, capped at 2 an evaluation; no evaluation starts once 3 bundles were
    # checked (one started is finished: 4)
    assert [f.evaluation for f in first] == [named[0]] * 2 + [named[1]] * 2
    assert len(check.seen) == 4
    assert [f.evaluation for f in auditor.run_once().findings] == [named[2]] * 2
    with pytest.raises(ValueError):
        EvaluationAuditor(Chain(1), store, from_block=0, check=check, open_challenge=print,
                          named=["not a cid"])
    with pytest.raises(ValueError):
        EvaluationAuditor(Chain(1), store, from_block=0, check=check, open_challenge=print,
                          max_per_evaluation=0)


# --------------------------------------------------------------------------- on Anvil


def answer(engine, snapshot, body: dict):
    """What an honest node runs for chat request ``body`` with ``snapshot`` injected: the
    normalized request, the prompt's token ids and the generation."""
    normalized = from_client_request("chat", body, max_tokens=body["max_tokens"],
                                     seed=body["seed"])
    injected = LibraryInjector(engine.tokenizer).chat(normalized["messages"], snapshot)
    params = SamplingParams(max_tokens=normalized["max_tokens"], stop=(),
                            temperature=normalized["temperature"], top_p=normalized["top_p"],
                            seed=normalized["seed"], request_key=request_key(normalized))
    return normalized, list(injected.prompt.all_token_ids), asyncio.run(
        engine.generate(injected.prompt, params))


def signed_bundle(signer, snapshot, normalized: dict, prompt_ids: list[int], ids: list[int],
                  text: str, finish: str) -> dict:
    receipt = signer.issue(
        library=library_ref(snapshot.log_id, snapshot.size, snapshot.root),
        experience_ids=snapshot.experience_ids, request_json=normalized, prompt_ids=prompt_ids,
        text=text, completion_ids=ids, temperature=normalized["temperature"],
        top_p=normalized["top_p"], max_tokens=normalized["max_tokens"], seed=normalized["seed"],
        finish_reason=finish)
    return bundle_json(receipt, signer.domain, route="chat", request=normalized, text=text,
                       completion_token_ids=ids)


def fund(committee: VerifierCommittee, address: str, amount: int) -> None:
    committee.evm.send(committee.token().functions.transfer(address, amount),
                       Account.from_key(devnet_account_key(0)))


def curated_library(rt) -> tuple[LibrarySnapshot, dict]:
    """A curated log of two experiences: the node's snapshot of it, and the evaluation's
    subject."""
    entries = [experience(text) for text in TEXTS]
    for data in entries:
        rt.content.add_file(data, pin=True)
    log_id, _ = rt.contract.create_log("gym/evaluated-library", LogKind.CURATED)
    leaves = [rfc9162.leaf_hash(e) for e in entries]
    rt.contract.append_leaves(log_id, leaves, [entry_cid(e) for e in entries])
    root = "0x" + rfc9162.root(leaves).hex()
    ids = [entry_cid(e) for e in entries]
    return (LibrarySnapshot("v", hex(log_id), 2, root, tuple(zip(ids, TEXTS, strict=True))),
            {"kind": "library", "log_id": log_id, "size": 2, "root": root, "entries": ids})


def registered_signer(ledger_devnet, registry: NodeRegistry, committee: VerifierCommittee,
                      engine, model_dir, domain: ReceiptDomain) -> ReceiptSigner:
    """NODE_KEY's account registered in the NodeRegistry for the tiny model, staking the
    minimum, with its own receipt log; its receipt signer under the deployment's domain."""
    operator = Account.from_key(NODE_KEY).address
    fund(committee, operator, registry.min_stake())
    receipt_log, _ = ledger_devnet.contract(NODE_KEY).create_log("node/receipts")
    digest = model_digest(model_dir)
    registry.register(signer=operator, model_digest=digest, endpoint="http://127.0.0.1:9",
                      stake=registry.min_stake(), receipt_log_id=receipt_log)
    return ReceiptSigner(NODE_KEY, domain, engine.model, digest)


def generate_evaluation(engine, signer: ReceiptSigner, snapshot: LibrarySnapshot
                        ) -> tuple[list[dict], dict]:
    """Every generation as `gym eval` asks it (baseline with no library, then the library
    arm; one seed, k = 1), signed: the honest bundles, and the bundle the node signed for
    the library arm's problem 1 with tokens it never generated."""
    honest, forged = [], None
    for arm, library in zip(ARMS, (EMPTY_LIBRARY, snapshot), strict=True):
        for problem, row in enumerate(PROBLEMS):
            body = {"model": MODEL_NAME, "max_tokens": 6, "temperature": 1.0, "top_p": 1.0,
                    "seed": request_seed(0, problem, 0),
                    "messages": [{"role": "system", "content": OBJECTIVE},
                                 {"role": "user", "content": row["problem"]}]}
            normalized, prompt_ids, out = answer(engine, library, body)
            honest.append(signed_bundle(signer, library, normalized, prompt_ids, out.token_ids,
                                        out.text, out.finish_reason))
            if (arm, problem) == ("library", 1):
                ids, text = fabricated(engine.tokenizer, len(out.token_ids))
                forged = signed_bundle(signer, library, normalized, prompt_ids, ids, text,
                                       "length")
    return honest, forged


def figures(bundles: list[dict]) -> dict:
    """Each arm's (Mean@1, Pass@1), scored from the bundles' answers as `gym eval` does."""
    rewards = [[exact_match({**row, "response": b["response"]["text"].strip()})["reward"]]
               for b, row in zip(bundles, PROBLEMS * 2, strict=True)]
    return {"baseline": seed_figures(rewards[:3], 1), "library": seed_figures(rewards[3:], 1)}


@pytest.fixture
def published(ledger_devnet, node, tiny_model_dir):
    """Two evaluations through a registered node, anchored on the log ``alice/evals``: the
    first with the receipt the node signed for tokens it never generated (the library arm's
    problem 1), the second with that generation's honest answer edited by the evaluator after
    the node signed it. The evaluation CIDs and what the tests read the chain with."""
    gym = ledger_devnet.gym
    rt = ledger_runtime(GymSettings(data_dir=gym.data_dir, deployment_file=gym.deployment_file))
    deployment = Deployment.load(gym.deployment_file)
    w3, content, start = rt.contract.w3, rt.content, deployment.deployment_block
    registry_address = deployment.contracts["NodeRegistry"].address
    committee_address = deployment.contracts["VerifierCommittee"].address
    funder = VerifierCommittee(w3, committee_address, from_block=start)
    domain = ReceiptDomain(w3.eth.chain_id, rt.contract.address.lower())
    snapshot, subject = curated_library(rt)
    signer = registered_signer(ledger_devnet, NodeRegistry(w3, registry_address, NODE_KEY),
                               funder, node[0], tiny_model_dir, domain)
    honest, forged = generate_evaluation(node[0], signer, snapshot)
    edited = json.loads(json.dumps(honest[4]))
    edited["response"]["text"] = "apple apple"
    common = {"node": signer.address, "dataset": content.add_file(
        "".join(json.dumps(r) + "\n" for r in PROBLEMS).encode(), pin=True),
        "subject": subject, "model_digest": signer.model_digest}
    cids = []
    for bundles in ([*honest[:4], forged, honest[5]], [*honest[:4], edited, honest[5]]):
        cids.append(store_evaluation(content, bundles, figures=figures(bundles), **common))
        append_and_anchor(rt, "alice/evals", decode_entry(content.cat(cids[-1])))
    yield SimpleNamespace(
        rt=rt, w3=w3, content=content, start=start, domain=domain, forged=forged,
        forged_cid=cids[0], edited_cid=cids[1], registry_address=registry_address,
        committee_address=committee_address, funder=funder,
        reader=NodeRegistry(w3, registry_address, from_block=start),
        evaluation_log=rt.store.get_log("alice/evals").chain_log_id)
    rt.store.engine.dispose()


LABEL = "library, seed 0, problem 1, sample 0"  # the generation forged, then edited


@pytest.mark.anvil
def test_an_evaluation_through_a_registered_node_is_audited_and_its_forged_receipt_challenged(
        published, verifier, tiny_model_dir, ledger_devnet):
    p = published
    committee = VerifierCommittee(p.w3, p.committee_address, devnet_account_key(5),
                                  from_block=p.start)  # the verifier
    fund(p.funder, committee.account.address, 10 * committee.challenge_bond())

    def open_challenge(bundle: dict, reason: str) -> int:  # as `gym verifier serve` opens one
        return open_committee_challenge(challenged_receipt(bundle), f"random audit: {reason}",
                                        committee=committee, registry=p.reader,
                                        content=p.content, domain=p.domain).id

    auditor = EvaluationAuditor(
        p.rt.contract, p.content, from_block=p.start, logs=[p.evaluation_log],
        judge_evidence=verifier_ops(lambda: p.rt, str(tiny_model_dir),
                                    p.registry_address)["audit"],
        open_challenge=open_challenge, rate_bps=10_000)
    first = auditor.run_once()  # the last checkpoint's seed block (two on) is not mined yet
    assert first.findings[-1].outcome == PENDING
    for _ in range(2):
        p.w3.provider.make_request("evm_mine", [])
    second = auditor.run_once()
    assert [c.sampled for c in first.checkpoints + second.checkpoints] == [(0,), (1,)]
    by = {(f.evaluation, f.generation): f for f in first.findings[:-1] + second.findings}
    assert len(by) == 12
    caught = by.pop((p.forged_cid, LABEL))
    assert (caught.outcome, caught.reason, caught.leaf) == (FAILED, "sampling", 0)
    challenge = committee.challenge(caught.challenge_id, with_evidence=True)
    assert challenge.status == ChallengeState.OPEN
    assert challenge.operator == Account.from_key(NODE_KEY).address  # the node is challenged
    evidence = json.loads(p.content.cat(challenge.evidence_cid))
    assert evidence["bundle"]["receipt"] == p.forged["receipt"]
    assert f"evaluation {p.forged_cid}, {LABEL}" in evidence["reason"]
    rejected = by.pop((p.edited_cid, LABEL))  # the evaluator's edit: nobody to slash
    assert (rejected.outcome, rejected.challenge_id) == (INVALID_BUNDLE, None)
    assert {f.outcome for f in by.values()} == {VERIFIED}, by
    assert committee.challenge_count() == 1
    assert auditor.run_once().findings == []  # each checkpoint audited once

    # What the evaluator loses: its evidence. Without a re-run `gym verify evaluation` passes
    # the forged receipt; re-running every generation names it; the edited one fails at once.
    check = {"content": p.content, "contract": p.rt.contract, "registry": p.reader,
             "domain": p.domain, "from_block": p.start}
    assert verify_evaluation(p.forged_cid, **check).generations == 6
    model, tokenizer = verifier
    with pytest.raises(EvaluationRefused) as rerun:
        verify_evaluation(p.forged_cid, **check, sample=6, model=model, tokenizer=tokenizer,
                          model_dir=tiny_model_dir)
    assert rerun.value.reason == "rerun" and "problem 1" in str(rerun.value)
    with pytest.raises(EvaluationRefused) as receipt:
        verify_evaluation(p.edited_cid, **check)
    assert receipt.value.reason == "receipt"
    # Once a judge upholds the challenge and slashes the node for that receipt (here the DAO's
    # timelock, one of the NodeRegistry's judges), the evaluation fails without any re-run.
    operator = Account.from_key(NODE_KEY).address
    fund(committee, operator, 1)  # the node stays active after a slash of 1 unit
    NodeRegistry(p.w3, p.reader.address, NODE_KEY).add_stake(1)
    registry_id = p.reader.challenges_against(operator)[0].challenge_id
    timelock = Deployment.load(ledger_devnet.gym.deployment_file).contracts[
        "TimelockController"].address
    p.w3.provider.make_request("anvil_impersonateAccount", [timelock])
    p.w3.provider.make_request("anvil_setBalance", [timelock, hex(10**18)])
    slash = p.w3.eth.contract(address=p.reader.address, abi=load_artifact("NodeRegistry").abi)
    p.w3.eth.wait_for_transaction_receipt(slash.functions.slash(
        operator, 1, registry_id, Account.from_key(devnet_account_key(5)).address).transact(
        {"from": timelock}))
    with pytest.raises(EvaluationRefused) as slashed:
        verify_evaluation(p.forged_cid, **check)
    assert slashed.value.reason == "slashed" and f"challenge {registry_id}" in str(slashed.value)


@pytest.mark.anvil
def test_gym_verifier_serve_audits_the_evaluations_it_is_told_to(published, ledger_devnet,
                                                                  tiny_model_dir, tmp_path):
    p = published
    member = VerifierCommittee(p.w3, p.committee_address, devnet_account_key(6),
                               from_block=p.start)
    fund(p.funder, member.account.address, member.min_stake() + 10 * member.challenge_bond())
    key_file = tmp_path / "verifier" / "bls-key.json"
    member.register(keyfile.load_or_create(key_file)[0], member.min_stake())
    for _ in range(2):
        p.w3.provider.make_request("evm_mine", [])
    served = ledger_devnet.gym.run(
        "verifier", "serve", "--once", "--account", "6", "--bls-key", str(key_file),
        "--model", str(tiny_model_dir), "--aggregator", "http://127.0.0.1:9",
        "--audit-rate", "10000", "--audit-evaluation-log", "alice/evals",
        "--audit-evaluation", p.edited_cid, timeout=240)
    assert served.returncode == 0, served.stderr
    out = " ".join(served.stderr.split())
    assert f"evaluation audit of evaluation {p.forged_cid} ({LABEL}): failed sampling" in out
    assert "-> challenge 1" in out, out
    assert f"evaluation audit of evaluation {p.edited_cid} ({LABEL}): invalid bundle" in out
    assert "evaluation audit: 15 sampled receipts verified" in out  # 5 + 5 on the log, 5 named
    challenge = member.challenge(1)
    assert (challenge.status, challenge.challenger) == (ChallengeState.OPEN,
                                                        member.account.address)
    cursor = AuditCursor.from_json(
        (key_file.parent / f"audit-evaluations-{member.address.lower()}.json").read_bytes())
    assert cursor.logs[p.evaluation_log].size == 2 and p.edited_cid in cursor.evaluations
