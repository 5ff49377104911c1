"""`gym verify receipt` on an auditor's machine with an empty content store: the library check
says which check needed what, that it is not in the local store (its path) and that no IPFS
node was asked (GYM_IPFS_API). Real devnet, real log, real (empty) store."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from inference_node.errors import ReceiptError
from inference_node.verify import library_texts
from ledger.content import open_content_store

pytestmark = pytest.mark.anvil

SAMPLES = Path(__file__).resolve().parents[2] / "devnet" / "samples" / "experiences.jsonl"


def ok(result) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_library_check_with_an_empty_store_names_the_check_the_store_and_gym_ipfs_api(
        ledger_devnet, tmp_path):
    gym = ledger_devnet.gym
    ok(gym.run("ledger", "create", "alice/math"))
    ok(gym.run("ledger", "append", "alice/math", str(SAMPLES)))
    ok(gym.run("ledger", "publish", "alice/math"))
    shown = json.loads(ok(gym.run("ledger", "show", "alice/math", "--json")))
    log_id, root = shown["log_id"], shown["checkpoints"][0]["root"]
    # the receipt's library reference: what `_check_library` reads of a receipt
    receipt = SimpleNamespace(library=SimpleNamespace(log_id=log_id, size=5, root=root),
                              experience_ids=[])
    empty = tmp_path / "auditor" / "ipfs"
    with pytest.raises(ReceiptError) as failed:
        library_texts(receipt, ledger_devnet.contract(None), open_content_store(None, empty),
                      ledger_devnet.deployment_block)
    assert failed.value.reason == "experience_content"
    message = str(failed.value)
    assert message.startswith(f"experience_content: library check, replaying log {log_id} up "
                              "to size 5: fetching batch manifest bafkrei")
    assert "of checkpoint 5: block bafkrei" in message
    assert f"is not in the local content store ({empty})" in message
    assert "GYM_IPFS_API is unset" in message and "gym ipfs serve" in message

    # with the publisher's store the library replays: its active set is what the receipt
    # must name
    publisher_store = open_content_store(None, gym.data_dir / "ipfs")
    with pytest.raises(ReceiptError) as named:
        library_texts(receipt, ledger_devnet.contract(None), publisher_store,
                      ledger_devnet.deployment_block)
    assert named.value.reason == "library_state" and named.value.expected
    receipt.experience_ids = named.value.expected
    texts = library_texts(receipt, ledger_devnet.contract(None), publisher_store,
                          ledger_devnet.deployment_block)
    assert list(texts) == named.value.expected
