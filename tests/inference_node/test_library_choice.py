"""A request names its library (``X-Gym-Library``: 'none' or a published log), verified from
chain + content store, and its receipt binds it (inference_node/library_choice.py): what lets
`gym eval --base-url` run every arm of an evaluation on one signing node. Against a real Anvil
(`gym devnet up`) and the tiny random model."""

from __future__ import annotations

import httpx
import pytest
from node_helpers import make_engine, run_server
from test_receipts import NODE_KEY, REQUEST, bundle_of
from test_sync import TEXTS, chain, published_log  # noqa: F401  (chain: a fixture)

from inference_node.library import StaticLibrarySource
from inference_node.library_choice import LibraryChoiceError, LibraryChoices, parse_choice
from inference_node.receipts import ReceiptDomain, ReceiptSigner, model_digest, parse_receipt
from inference_node.verify import verify_receipt_bundle
from ledger.multiformats import CID


@pytest.mark.parametrize(("value", "expected"), [
    (None, None), ("", None), ("default", None), (" None ", "none"), ("7", 7), ("12", 12)])
def test_parse_choice(value, expected):
    assert parse_choice(value) == expected


@pytest.mark.parametrize("value", ["0", "-1", "seven", "1e3", "٣", "9" * 19, "7;drop"])
def test_parse_choice_refuses_anything_else(value):
    with pytest.raises(LibraryChoiceError) as refused:
        parse_choice(value)
    assert (refused.value.status, refused.value.code) == (400, "invalid_value")


def test_without_a_chain_only_the_own_library_and_none():
    choices = LibraryChoices(StaticLibrarySource())
    assert choices.snapshot("none").experiences == ()
    with pytest.raises(LibraryChoiceError) as refused:
        choices.snapshot("3")
    assert refused.value.code == "library_unavailable" and "no chain" in str(refused.value)


@pytest.mark.anvil
def test_requests_choose_none_or_a_published_log_and_receipts_bind_it(chain, tiny_model_dir):  # noqa: F811
    devnet, _store, content, contract = chain
    log_id, cids = published_log(chain)
    other_id, _ = published_log(chain, "bob/math", ["one more rule"])
    engine = make_engine(tiny_model_dir)
    domain = ReceiptDomain(contract.w3.eth.chain_id, contract.address.lower())
    signer = ReceiptSigner(NODE_KEY, domain, engine.model, model_digest(tiny_model_dir))
    choices = LibraryChoices(StaticLibrarySource(), contract, content,
                             from_block=devnet.deployment_block, max_logs=1)
    with run_server(engine, StaticLibrarySource(), receipts=signer,
                    library_choices=choices) as node:
        def ask(header: str | None) -> httpx.Response:
            headers = {} if header is None else {"X-Gym-Library": header}
            return httpx.post(f"{node.base_url}/chat/completions", json=REQUEST,
                              headers=headers, timeout=60)

        plain, chosen, other, again = ask("none"), ask(str(log_id)), ask(str(other_id)), \
            ask(str(log_id))  # max_logs=1: the first log was dropped and is verified again
        assert all(r.status_code == 200 for r in (plain, chosen, other, again))
        receipt = parse_receipt(chosen.json()["receipt"])
        assert (receipt.library.log_id, receipt.library.size) == (log_id, len(TEXTS))
        assert receipt.experience_ids == cids
        assert chosen.headers["x-gym-library-size"] == str(len(TEXTS))
        assert parse_receipt(plain.json()["receipt"]).library.log_id == 0
        assert parse_receipt(other.json()["receipt"]).library.log_id == other_id
        assert parse_receipt(again.json()["receipt"]).experience_ids == cids

        refusals = {header: ask(header) for header in ("bogus", "999", str(log_id + 100))}
        assert refusals["bogus"].status_code == 400
        for header in ("999", str(log_id + 100)):
            assert refusals[header].status_code == 404, refusals[header].text
            assert refusals[header].json()["error"]["code"] == "library_not_found"
            assert refusals[header].json()["error"]["param"] == "X-Gym-Library"

        # a log whose content was tampered with: nothing of it is served
        block = content._block_path(CID.parse(published_log(chain, "eve/math", ["x"])[1][0]))
        block.write_bytes(block.read_bytes().replace(b"x", b"y"))
        tampered = ask(str(log_id + 2))
        assert tampered.status_code == 409, tampered.text
        assert tampered.json()["error"]["code"] == "library_unverified"
        assert ask(None).status_code == 200  # the node serves on

    from transformers import AutoModelForCausalLM, AutoTokenizer

    checks = verify_receipt_bundle(
        bundle_of(chosen.json()), domain=domain, contract=contract, content=content,
        from_block=devnet.deployment_block,
        model=AutoModelForCausalLM.from_pretrained(tiny_model_dir),
        tokenizer=AutoTokenizer.from_pretrained(tiny_model_dir), model_dir=tiny_model_dir)
    assert {c.name for c in checks if c.passed} >= {"library", "activations", "sampling"}


@pytest.mark.anvil
def test_a_log_over_the_bound_is_refused_before_it_is_fetched(chain):  # noqa: F811
    devnet, _store, content, contract = chain
    log_id, _ = published_log(chain)
    choices = LibraryChoices(StaticLibrarySource(), contract, content,
                             from_block=devnet.deployment_block, max_leaves=1)
    with pytest.raises(LibraryChoiceError) as refused:
        choices.snapshot(str(log_id))
    assert refused.value.status == 413 and "2 leaves" in str(refused.value)
    off = LibraryChoices(StaticLibrarySource(), contract, content, enabled=False)
    with pytest.raises(LibraryChoiceError) as refused:
        off.snapshot(str(log_id))
    assert refused.value.code == "library_unavailable" and "--no-library-choice" in str(
        refused.value)
