"""Receipts are durable before their answers leave: a real signing `gym node serve` killed with
SIGKILL right after answering, then restarted on the same data directory, has every receipt its
clients hold in its receipt log, each with an inclusion proof. And the write-ahead file itself:
a torn last line is dropped, records already appended are not appended twice."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from node_helpers import (
    MODEL_NAME,
    free_port,
    node_env,
    node_process,
    signing_node_command,
    stop_node,
    wait_for_health,
)
from test_receipt_log import receipts

from inference_node.errors import NodeError
from inference_node.receipt_log import ReceiptLog
from inference_node.receipt_wal import ReceiptWAL
from inference_node.receipts import parse_receipt
from ledger.blockstore import LocalBlockStore
from ledger.entries import encode_entry, entry_cid
from ledger.logstore import LogStore
from ledger.proofs import verify_proof_document

CLIENTS = 8


async def ask_all(url: str) -> list:
    """CLIENTS answers at once, half of them streamed; the receipts the clients hold."""

    async def one(client: httpx.AsyncClient, i: int):
        body = {"model": MODEL_NAME, "max_tokens": 6, "temperature": 0,
                "messages": [{"role": "user", "content": f"count {i} apple"}]}
        if i % 2:
            lines = []
            async with client.stream("POST", "/chat/completions",
                                     json={**body, "stream": True}) as reply:
                assert reply.status_code == 200
                lines = [line async for line in reply.aiter_lines()
                         if line.startswith("data: {")]
            receipt = json.loads(lines[-1].removeprefix("data: "))["receipt"]
        else:
            reply = await client.post("/chat/completions", json=body)
            assert reply.status_code == 200, reply.text
            receipt = reply.json()["receipt"]
        return parse_receipt(receipt)

    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        return await asyncio.gather(*(one(client, i) for i in range(CLIENTS)))


def test_receipts_survive_kill_9_right_after_the_answers(tiny_model_dir, tmp_path):
    port = free_port()
    root = f"http://127.0.0.1:{port}"
    env = node_env(tmp_path / "data")
    command = signing_node_command(tiny_model_dir, port)
    with node_process(command, env) as proc:
        wait_for_health(proc, port, timeout_s=90)
        answered = asyncio.run(ask_all(f"{root}/v1"))
        proc.kill()  # SIGKILL: no shutdown, no flush; the appender lingers 1 s
        proc.wait()
    held = [entry_cid(encode_entry(receipt)) for receipt in answered]
    assert len(set(held)) == CLIENTS

    with node_process(command, env) as proc:
        wait_for_health(proc, port, timeout_s=90)
        proofs = [httpx.get(f"{root}/v1/receipts/{cid}/proof") for cid in held]
        output = stop_node(proc)
    assert [p.status_code for p in proofs] == [200] * CLIENTS, output
    for cid, proof in zip(held, proofs, strict=True):
        assert verify_proof_document(proof.json()).entry_cid == cid
    store = LogStore(f"sqlite:///{tmp_path / 'data' / 'ledger.sqlite'}")
    cids = [leaf.cid for leaf in store.leaves(f"node/{answered[0].node}/receipts")]
    assert sorted(cids) == sorted(held)  # each once


def test_write_ahead_file_recovery(tmp_path):
    """A log that appended the first two of five written-ahead receipts: recovery appends the
    other three, once; a torn last line (its writer never returned) is dropped."""
    store = LogStore(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    content = LocalBlockStore(tmp_path / "ipfs")
    batch = [encode_entry(r) for r in receipts(6)]
    wal = ReceiptWAL(tmp_path / "wal" / "receipts.wal")
    for data in batch[:5]:
        wal.write(data)
    with open(wal.path, "ab") as torn:
        torn.write(batch[5][:40])
    wal.close()
    first = ReceiptLog(store, content, None, "node/receipts")
    first.submit_encoded(entry_cid(batch[0]), batch[0])
    first.submit_encoded(entry_cid(batch[1]), batch[1])
    assert first.flush_appends(30)

    log = ReceiptLog(store, content, None, "node/receipts", wal_path=wal.path)
    assert log.recovered == 3
    assert [leaf.cid for leaf in store.leaves("node/receipts")] == [entry_cid(d)
                                                                   for d in batch[:5]]
    assert wal.path.read_bytes() == b""
    log.wal.close()  # as a node's exit does
    again = ReceiptLog(store, content, None, "node/receipts", wal_path=wal.path)
    assert again.recovered == 0 and store.get_log("node/receipts").size == 5

    cid = entry_cid(batch[5])
    again.submit_encoded(cid, batch[5])
    assert wal.path.read_bytes() in (batch[5] + b"\n", b"")  # on disk until appended
    assert again.flush_appends(30)
    assert [leaf.cid for leaf in store.leaves("node/receipts")][-1] == cid
    assert wal.path.read_bytes() == b""  # emptied once the queue is
    with pytest.raises(NodeError, match="in use by another running node"):
        ReceiptWAL(wal.path)  # `again` still holds it
