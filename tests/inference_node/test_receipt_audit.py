"""`gym audit` on a receipt log: every receipt's signature under the deployment's domain and one
signer, each failure named with its receipt; `--sample N` checks N random receipts' bundles
from the node in full, a bundle past the node's retention reported as not retained. The
functions directly, then the real command on a devnet with a registered node."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from node_helpers import MODEL_NAME, NODE_KEY, make_engine, run_server, wait_for_health

from devnet.settings import ANVIL_DEV_KEYS
from inference_node.bundle_sources import AccessRefusedError, NotRetainedError
from inference_node.errors import NodeError, ReceiptError
from inference_node.library import StaticLibrarySource
from inference_node.receipt_audit import (
    ReceiptCollector,
    check_signatures,
    choose_sample,
    verify_sample,
)
from inference_node.receipts import ReceiptDomain, build_receipt, library_ref, sign_receipt
from ledger.entries import encode_entry, entry_cid

DOMAIN = ReceiptDomain(31337, "0x" + "12" * 20)  # a deployment's
OTHER_KEY = ANVIL_DEV_KEYS[0]


def signed(i: int, key: str = NODE_KEY, domain: ReceiptDomain = DOMAIN):
    from eth_account import Account

    unsigned = build_receipt(
        node=Account.from_key(key).address, model_digest="sha256:" + "ab" * 32,
        library=library_ref("", 0, ""), experience_ids=[], request_json={"i": i},
        text=f"answer {i}", completion_token_ids=[i], prompt_tokens=3, temperature=0.0,
        top_p=1.0, max_tokens=4, seed=i, activation_commitment="toploc1:1:32:AA==",
        at=1_700_000_000)
    return sign_receipt(unsigned, key, domain)


def collected(receipts) -> ReceiptCollector:
    collector = ReceiptCollector()
    for leaf, receipt in enumerate(receipts):
        data = encode_entry(receipt)
        collector(leaf, entry_cid(data), data)
    return collector


def test_every_bad_signature_is_named_with_its_receipt():
    edited = signed(2).model_copy(update={"time": 1_800_000_000})  # the signature no longer fits
    receipts = [signed(0), signed(1), edited, signed(3, OTHER_KEY), signed(4),
                signed(5, domain=ReceiptDomain())]  # an unbound receipt in a deployment's log
    collector = collected(receipts)
    report = check_signatures(collector, DOMAIN)
    assert report.receipts == 6 and report.signer == receipts[0].node
    assert [(f.leaf, f.reason) for f in report.failures] == [
        (2, "wrong_signer"), (3, "wrong_signer"), (5, "wrong_signer")]
    assert report.failures[1].cid == entry_cid(encode_entry(receipts[3]))
    assert "signed by" in report.failures[1].detail and not report.ok
    assert check_signatures(collected(receipts[:2] + receipts[4:5]), DOMAIN).ok
    # under another deployment's domain none of them recovers to its node
    assert len(check_signatures(collector, ReceiptDomain()).failures) == 5


def test_sample_is_reproducible_and_each_outcome_named():
    collector = collected([signed(i) for i in range(20)])
    chosen = choose_sample(collector.receipts, 5, seed=7)
    assert chosen == choose_sample(collector.receipts, 5, seed=7)
    assert chosen != choose_sample(collector.receipts, 5, seed=8)
    assert [r.leaf for r in chosen] == sorted(r.leaf for r in chosen)
    assert len(choose_sample(collector.receipts, 50, seed=1)) == 20
    with pytest.raises(NodeError):
        choose_sample(collector.receipts, 0, seed=1)

    gone, forged, down, refused = (r.cid for r in chosen[:4])

    def fetch(cid):
        if cid == gone:
            raise NotRetainedError("the node does not retain it")
        if cid == down:
            raise NodeError("connection refused")
        if cid == refused:  # the node is up and answered 403: not "unreachable"
            raise AccessRefusedError("http://node/v1/receipts/x answered 403: forbidden")
        return {"cid": cid}

    def check(bundle):
        if bundle["cid"] == forged:
            raise ReceiptError("activation_mismatch", "exponents differ")

    report = check_signatures(collector, DOMAIN)
    verify_sample(report, chosen, fetch, check)
    outcomes = {s.cid: (s.outcome, s.reason) for s in report.sampled}
    assert outcomes[gone] == ("not retained", "not_retained")
    assert outcomes[forged] == ("failed", "activation_mismatch")
    assert outcomes[down] == ("unreachable", "unreachable")
    assert outcomes[refused] == ("refused", "refused")
    assert [o for o, _ in outcomes.values()].count("verified") == 1
    assert not report.ok
    report.sampled = [s for s in report.sampled if s.cid in (gone, chosen[4].cid)]
    assert report.ok  # not retained is no failure


def test_a_node_that_refuses_is_up_not_unreachable():
    """Issue 44, finding 4: a node answering 403 was reported "unreachable"."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from inference_node.bundle_sources import fetch_bundle

    class Refuses(BaseHTTPRequestHandler):
        def do_GET(self):
            body = b'{"error": {"message": "not a registered verifier"}}'
            self.send_response(403)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Refuses)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        with pytest.raises(AccessRefusedError, match="answered 403: not a registered verifier"):
            fetch_bundle(url, "bafkreigh2akiscaildcqabsyg3dfr6chu3fgpregiymsck7e7aqa4s52zy")
    finally:
        server.shutdown()


@pytest.mark.anvil
def test_gym_audit_of_a_registered_nodes_receipt_log(ledger_devnet, tiny_model_dir):
    from committee_world import VERIFIER_KEYS, register_verifiers
    from test_registry import serve_registered, stop

    from devnet.deploy import Deployment
    from ledger.chain import LogKind

    gym = ledger_devnet.gym
    manifest = json.loads(gym.deployment_file.read_text())
    registry = manifest["contracts"]["NodeRegistry"]["address"]
    extra_env = {"GYM_NODE_REGISTRY": registry}
    contract = ledger_devnet.contract()
    # registered with its default endpoint http://127.0.0.1:PORT/v1, where audit finds it
    proc, port = serve_registered(ledger_devnet, registry, tiny_model_dir, "--anchor-interval",
                                  "1")
    try:
        wait_for_health(proc, port, timeout_s=120)
        for seed in range(3):
            reply = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=60, json={
                "model": MODEL_NAME, "max_tokens": 5, "seed": seed, "temperature": 0.9,
                "messages": [{"role": "user", "content": "the farmer buys twelve apple"}]})
            assert reply.status_code == 200, reply.text
        signer = reply.json()["receipt"]["node"]
        name = f"node/{signer}/receipts"
        log_id = next(e.log_id for e in contract.logs_created() if e.name == name)
        deadline = time.monotonic() + 60
        while contract.log_info(log_id).size < 3:
            assert time.monotonic() < deadline, "the receipts were not anchored"
            time.sleep(0.5)
        assert contract.log_info(log_id).kind == LogKind.PUBLISHER

        # the node serves its users' bundles to registered verifiers only: an auditor without
        # a verifier's key is refused each sampled bundle (and told why) ...
        anonymous = gym.run("audit", name, "--sample", "1", "--seed", "1",
                            extra_env=extra_env, timeout=300)
        assert anonymous.returncode == 1 and "answered 401" in anonymous.stdout, \
            anonymous.stdout + anonymous.stderr
        # ... one reading as a registered verifier checks them in full
        register_verifiers(Deployment.load(gym.deployment_file))
        extra_env["GYM_AUDIT_KEY"] = VERIFIER_KEYS[0]
        audited = gym.run("audit", name, "--model", str(tiny_model_dir), "--sample", "2",
                          "--seed", "1", "--key-env", "GYM_AUDIT_KEY", extra_env=extra_env,
                          timeout=300)
        assert audited.returncode == 0, audited.stdout + audited.stderr
        assert "audit clean" in audited.stdout and "receipt audit clean" in audited.stdout
        assert "3 receipts; signer " + signer + " (the log's owner)" in audited.stdout
        assert audited.stdout.count("verified") == 2, audited.stdout
        # on the devnet, --account N picks the same verifier by its Anvil account (7)
        by_account = gym.run("audit", name, "--model", str(tiny_model_dir), "--sample", "1",
                             "--seed", "1", "--account", "7", extra_env=extra_env, timeout=300)
        assert by_account.returncode == 0, by_account.stdout + by_account.stderr
        assert by_account.stdout.count("verified") == 1, by_account.stdout

        # A node that keeps no bundles: reported as not retained, not as a forgery.
        with run_server(make_engine(tiny_model_dir), StaticLibrarySource()) as bare:
            gone = gym.run("audit", "--log-id", str(log_id), "--sample", "3", "--node",
                           bare.base_url, extra_env=extra_env, timeout=300)
        assert gone.returncode == 0, gone.stdout + gone.stderr
        assert gone.stdout.count("not retained") >= 3 and "FAIL" not in gone.stdout
    finally:
        stop(proc)
