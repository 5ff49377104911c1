"""Bundle retention: a signing node keeps each receipt's bundle and serves it at
`GET /v1/receipts/{cid}`; the fetched bundle verifies in full with the model (activations,
termination, sampling) and carries the receipt log's inclusion proof; expired bundles and those
dropped for the byte bound answer 404, as does a node that keeps none."""

from __future__ import annotations

import httpx
import pytest
from node_helpers import DOMAIN, MODEL_NAME, NODE_KEY, SNAPSHOT, make_engine, run_server
from test_receipts import REQUEST, offline_verify

from inference_node.bundle_store import BundleStore, parse_duration
from inference_node.errors import NodeError
from inference_node.library import StaticLibrarySource
from inference_node.receipt_log import ReceiptLog
from inference_node.receipts import ReceiptSigner, model_digest
from inference_node.verify import verify_receipt_bundle
from ledger.blockstore import LocalBlockStore
from ledger.logstore import LogStore


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    return make_engine(tiny_model_dir)


def node_with(engine, tiny_model_dir, bundles, receipt_log=None, source=None, access=None):
    signer = ReceiptSigner(NODE_KEY, DOMAIN, engine.model, model_digest(tiny_model_dir))
    return run_server(engine, source or StaticLibrarySource(SNAPSHOT), receipts=signer,
                      receipt_log=receipt_log, bundles=bundles, bundle_access=access)


def ask(node, request=REQUEST, route="chat/completions") -> dict:
    reply = httpx.post(f"{node.base_url}/{route}", json=request, timeout=60)
    assert reply.status_code == 200, reply.text
    return reply.json()


def fetch(node, answer: dict | str, token: str | None = None) -> httpx.Response:
    """GET the bundle of ``answer``'s receipt with its bundle_token (or of a CID, ``token``)."""
    if isinstance(answer, dict):
        evidence = answer["receipt_evidence"]
        answer, token = evidence["receipt_cid"], evidence.get("bundle_token")
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    return httpx.get(f"{node.base_url}/receipts/{answer}", headers=headers, timeout=60)


def test_parse_duration():
    assert parse_duration("3600") == 3600 and parse_duration("90m") == 5400
    assert parse_duration("12h") == 43200 and parse_duration("7d") == 7 * 86400
    assert parse_duration("0") == 0
    for bad in ("", "7 weeks", "-1", "1e9", "d"):
        with pytest.raises(NodeError):
            parse_duration(bad)


def test_fetched_bundle_verifies_in_full_with_its_inclusion_proof(engine, tiny_model_dir,
                                                                   tmp_path):
    bundles = BundleStore(tmp_path / "bundles.sqlite", retention_s=3600)
    receipt_log = ReceiptLog(LogStore(f"sqlite:///{tmp_path / 'ledger.sqlite'}"),
                             LocalBlockStore(tmp_path / "ipfs"), None, "node/receipts",
                             linger_s=0.01)
    completion = {"model": MODEL_NAME, "prompt": "seven apple and three banana is",
                  "max_tokens": 5, "temperature": 0.8, "echo": True}
    with node_with(engine, tiny_model_dir, bundles, receipt_log) as node:
        chat, text = ask(node), ask(node, completion, "completions")
        fetched = [fetch(node, body) for body in (chat, text)]
    for body, reply in zip((chat, text), fetched, strict=True):
        assert reply.status_code == 200, reply.text
        bundle = reply.json()
        assert bundle["receipt"] == body["receipt"]
        assert bundle["inclusion"]["entry_cid"] == body["receipt_evidence"]["receipt_cid"]
        inclusion = [c for c in verify_receipt_bundle(bundle) if c.name == "inclusion"]
        assert inclusion[0].passed, inclusion  # (anchoring needs a chain: test_registry's)
        checks = offline_verify({**bundle, "inclusion": None}, tiny_model_dir,
                                model_dir=tiny_model_dir)
        passed = {c.name for c in checks if c.passed}
        assert {"signature", "request/response", "activations", "termination",
                "sampling"} <= passed, checks
    assert bundles.stats()["bundles"] == 2


def test_expired_dropped_and_unknown_bundles_are_404(engine, tiny_model_dir, tmp_path):
    clock = Clock()
    bundles = BundleStore(tmp_path / "bundles.sqlite", retention_s=60, clock=clock)
    with node_with(engine, tiny_model_dir, bundles) as node:
        answer = ask(node)
        first = answer["receipt_evidence"]["receipt_cid"]
        assert fetch(node, answer).status_code == 200
        clock.now += 61
        expired = fetch(node, answer)
        assert expired.status_code == 404
        error = expired.json()["error"]
        assert error["code"] == "receipt_not_found" and "no longer retained" in error["message"]
        hostile = "bafy" + "x" * 500

        assert fetch(node, hostile).status_code == 401  # no credential: refused unread
        assert fetch(node, hostile, answer["receipt_evidence"]["bundle_token"]).status_code == 403
        second = ask(node, {**REQUEST, "seed": 3})["receipt_evidence"]["receipt_cid"]
    assert bundles.stats()["bundles"] == 1  # the put purged the expired one
    assert bundles.get(second) is not None and bundles.get(first) is None


def test_the_byte_bound_drops_the_oldest_first(engine, tiny_model_dir, tmp_path):
    probe = BundleStore(tmp_path / "probe.sqlite", retention_s=60)
    with node_with(engine, tiny_model_dir, probe) as node:
        ask(node)
    one = probe.stats()["bytes"]
    bundles = BundleStore(tmp_path / "bundles.sqlite", retention_s=3600,
                          max_bytes=int(one * 2.5))
    clock = Clock()
    bundles.clock = clock
    with node_with(engine, tiny_model_dir, bundles) as node:
        answers = []
        for seed in range(4):
            answers.append(ask(node, {**REQUEST, "seed": seed}))
            clock.now += 1
        status = [fetch(node, answer).status_code for answer in answers]
        cids = [answer["receipt_evidence"]["receipt_cid"] for answer in answers]
    assert status == [404, 404, 200, 200]
    assert bundles.stats()["bytes"] <= one * 2.5
    # reopened, the store knows its total and keeps the bound
    again = BundleStore(tmp_path / "bundles.sqlite", retention_s=3600, max_bytes=int(one * 1.5),
                        clock=clock)
    assert [again.get(cid) is not None for cid in cids] == [False, False, False, True]


def test_a_node_that_keeps_no_bundles_says_so(signing_node):
    body = ask(signing_node)
    reply = fetch(signing_node, body)
    assert reply.status_code == 404
    assert "keeps no receipt bundles" in reply.json()["error"]["message"]


def test_serve_refuses_a_bad_retention(tiny_model_dir, tmp_path):
    import gym_forkserver
    from node_helpers import GYM, node_env

    result = gym_forkserver.run(GYM, ["node", "serve", "--model", str(tiny_model_dir),
                                      "--bundle-retention", "2 weeks"], node_env(tmp_path))
    assert result.returncode == 2 and "not a duration" in result.stderr, result.stderr


@pytest.mark.parametrize("retention", [0, 60])
def test_start_node_opens_the_store_beside_the_content_store(tiny_model_dir, tmp_path,
                                                             retention):
    from inference_node.launch import NodeLaunch, start_node
    from ledger.runtime import LedgerRuntime

    rt = LedgerRuntime(database_url=f"sqlite:///{tmp_path / 'gym.db'}",
                       content_dir=tmp_path / "data" / "ipfs")
    launch = NodeLaunch(model=tiny_model_dir, device="cpu", engine="transformers",
                        key=NODE_KEY, offline=True, bundle_retention_s=retention)
    with start_node(launch, rt) as node:
        assert node.app.state.serving.bundles is node.bundles
        if retention:
            assert node.bundles.retention_s == 60
            assert node.bundles.path.parent == tmp_path / "data" / "receipt-bundles"
        else:
            assert node.bundles is None


def test_a_bundle_is_served_to_its_client_and_to_registered_verifiers_only(engine,
                                                                            tiny_model_dir,
                                                                            tmp_path):
    """The Purpose's third party reading every bundle of a node by its public receipt CIDs:
    refused. The client's token (from its answer: body and header) reads its own bundle and
    no other; a registered verifier's signed read is served, an unregistered key's is not, nor
    a stale signature; the token survives a restart of the node (its read key is on disk)."""
    from eth_account import Account

    from inference_node.bundle_access import (
        BundleAccess,
        bundle_token,
        load_read_key,
        verifier_headers,
    )

    verifier, outsider = Account.from_key("0x" + "71" * 32), Account.from_key("0x" + "5a" * 32)
    key_file = tmp_path / "bundles.read-key"
    access = BundleAccess(load_read_key(key_file), is_verifier=lambda a: a == verifier.address)
    bundles = BundleStore(tmp_path / "bundles.sqlite", retention_s=3600)
    with node_with(engine, tiny_model_dir, bundles, access=access) as node:
        reply = httpx.post(f"{node.base_url}/chat/completions", json=REQUEST, timeout=60)
        mine = reply.json()
        cid, token = mine["receipt_evidence"]["receipt_cid"], mine["receipt_evidence"]["bundle_token"]
        assert reply.headers["x-gym-bundle-token"] == token
        other = ask(node, {**REQUEST, "seed": 11})
        url = f"{node.base_url}/receipts/{cid}"
        anonymous = httpx.get(url, timeout=60)
        assert anonymous.status_code == 401
        assert anonymous.json()["error"]["code"] == "unauthorized"
        assert fetch(node, mine).status_code == 200
        assert fetch(node, other["receipt_evidence"]["receipt_cid"], token).status_code == 403
        assert httpx.get(url, headers=verifier_headers(verifier, cid), timeout=60).status_code == 200
        assert httpx.get(url, headers=verifier_headers(outsider, cid), timeout=60).status_code == 403
        stale = verifier_headers(verifier, cid, now=1_000_000_000)
        assert httpx.get(url, headers=stale, timeout=60).status_code == 401
        # a signature for another receipt does not read this one
        other_cid = other["receipt_evidence"]["receipt_cid"]
        assert httpx.get(url, headers=verifier_headers(verifier, other_cid),
                         timeout=60).status_code == 403
    # the key is on disk (0600): the same token after a restart
    assert key_file.stat().st_mode & 0o777 == 0o600
    assert bundle_token(load_read_key(key_file), cid) == token


def test_registration_lookups_are_capped_and_a_known_verifier_still_reads(tmp_path):
    """A signature by a fresh random key costs its maker nothing and the node two chain reads:
    at most MAX_LOOKUPS run at once, the next stranger is answered 429 at once, and a verifier
    whose registration is cached is not held up by them."""
    import threading

    from eth_account import Account

    from inference_node.bundle_access import (
        MAX_LOOKUPS,
        AccessError,
        BundleAccess,
        load_read_key,
        verifier_headers,
    )

    verifier = Account.from_key("0x" + "71" * 32)
    release, entered = threading.Event(), threading.Semaphore(0)

    def is_verifier(address: str) -> bool:  # the chain read, held until released
        if address != verifier.address:
            entered.release()
            release.wait(30)
        return address == verifier.address

    access = BundleAccess(load_read_key(tmp_path / "read-key"), is_verifier=is_verifier)
    cid = "bafkreiexample"
    assert access.check(cid, verifier_headers(verifier, cid)) == "verifier"  # now cached
    strangers = [Account.from_key("0x" + f"{i + 1:02x}" * 32) for i in range(MAX_LOOKUPS + 1)]
    answers: list = []

    def read(account) -> None:
        try:
            answers.append(access.check(cid, verifier_headers(account, cid)))
        except AccessError as exc:
            answers.append(exc.status)

    threads = [threading.Thread(target=read, args=(a,)) for a in strangers[:MAX_LOOKUPS]]
    for thread in threads:
        thread.start()
    for _ in range(MAX_LOOKUPS):
        assert entered.acquire(timeout=10)
    with pytest.raises(AccessError) as busy:
        access.check(cid, verifier_headers(strangers[-1], cid))
    assert busy.value.status == 429
    assert access.check(cid, verifier_headers(verifier, cid)) == "verifier"
    release.set()
    for thread in threads:
        thread.join()
    assert answers == [403] * MAX_LOOKUPS
