"""`gym ipfs serve` stops reading for a client that left, and stops on SIGTERM within seconds,
whatever it is serving (issue "judges that cannot be stalled": reads bounded by work)."""

from __future__ import annotations

import os
import signal
import threading
import time

import httpx
import pytest
from hostile_dags import repeating_dag, zeros_file
from ipfs_node import Node

from ledger import LocalBlockStore

pytestmark = pytest.mark.filterwarnings("ignore:The 'strict' parameter:FutureWarning")


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


@pytest.fixture
def served(tmp_path):
    store = LocalBlockStore(tmp_path / "store")
    big, _ = zeros_file(store)
    hostile = repeating_dag(store)
    node = Node(tmp_path / "store")
    yield node, big, hostile
    node.stop()


def _cat_then_leave(url: str, cid: str, after_s: float) -> None:
    try:
        httpx.post(f"{url}/api/v0/cat", params={"arg": cid}, timeout=after_s)
    except httpx.TimeoutException:
        pass  # the client gives up and closes its connection


def test_a_cat_stops_reading_when_its_client_leaves(served):
    node, big, hostile = served
    # the repeating zero-size DAG: refused at once with Kubo's error body
    refused = httpx.post(f"{node.url}/api/v0/cat", params={"arg": hostile}, timeout=30)
    assert refused.status_code == 500 and "declares 0 bytes" in refused.json()["Message"]
    # a 7.9 GB file of zeros: the client leaves after one second; the server stops reading
    _cat_then_leave(node.url, big, 1.0)
    time.sleep(1.0)  # the disconnect is seen within DISCONNECT_POLL_S, the read ends a block on
    before = _cpu_seconds(node.proc.pid)
    time.sleep(2.0)
    assert _cpu_seconds(node.proc.pid) - before < 0.5  # idle: nothing reads for no one
    small = httpx.post(f"{node.url}/api/v0/version", timeout=10)
    assert small.status_code == 200


def test_sigterm_stops_the_server_while_it_reads(served):
    node, big, _ = served
    reader = threading.Thread(target=_cat_then_leave, args=(node.url, big, 60.0), daemon=True)
    reader.start()
    time.sleep(1.0)  # the cat is reading
    started = time.monotonic()
    node.proc.send_signal(signal.SIGTERM)
    node.proc.wait(30)
    assert time.monotonic() - started < 10  # the 3 s grace, then the read stops at a block
