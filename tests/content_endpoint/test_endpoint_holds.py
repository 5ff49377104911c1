"""`gym ipfs serve` holds against a hostile client (issue 44, findings 7 and 8): every handler is
bounded by work and stops when its client leaves; uploads stream under hard caps; stalled
connections are cut. Each check is the finding rebuilt, and fails on the code before the fix."""

from __future__ import annotations

import io
import os
import random
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import ipfshttpclient
import pytest
from ipfs_node import Node

from ledger.multiformats import CID, RAW
from ledger.unixfs import PBLink, PBNode, encode_pbnode, file_cid

pytestmark = pytest.mark.filterwarnings("ignore:The 'strict' parameter:FutureWarning")
BOUNDARY = "gym-test-boundary"


def _status(pid: int, field: str) -> int:
    """A /proc/PID/status memory field (VmRSS, VmHWM) in bytes."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _multipart(pieces, name: str = "file"):
    """A one-part multipart/form-data body streamed from ``pieces``."""
    yield (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"; "
           f"filename=\"{name}\"\r\nContent-Type: application/octet-stream\r\n\r\n").encode()
    yield from pieces
    yield f"\r\n--{BOUNDARY}--\r\n".encode()


def _post(node: Node, command: str, body, timeout: float = 60, **params) -> httpx.Response:
    return httpx.post(f"{node.url}/api/v0/{command}", params=params, content=body,
                      headers={"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"},
                      timeout=timeout)


def repeating_link_dag(node: Node, fanout: int = 8000, levels: int = 3) -> str:
    """Issue 44's DAG: a raw leaf, then ``levels`` nodes each linking the one below ``fanout``
    times (1.1 MB in all), uploaded with four `block/put`s. Walked without a visited set it
    is ``fanout ** levels`` (5 * 10**11) visits."""
    child = _post(node, "block/put", _multipart([b"leaf"])).json()["Key"]
    for _ in range(levels):
        block = encode_pbnode(PBNode(links=(PBLink(CID.parse(child), "", 0),) * fanout))
        answer = _post(node, "block/put", _multipart([block]), **{"cid-codec": "dag-pb"})
        child = answer.json()["Key"]
    return child


@pytest.fixture
def node(tmp_path):
    server = Node(tmp_path / "store")
    yield server
    server.stop()


def _abandon(node: Node, command: str, after_s: float, **params) -> None:
    try:
        httpx.post(f"{node.url}/api/v0/{command}", params=params, timeout=after_s)
    except httpx.TimeoutException:
        pass  # the client gives up and closes its connection


def _version_within(node: Node, seconds: float) -> None:
    answer = httpx.post(f"{node.url}/api/v0/version", timeout=seconds)
    assert answer.status_code == 200


# --- finding 7: pin/ls of a pinned repeating-link DAG ---------------------------------------


def test_pin_ls_of_a_repeating_dag_answers_beside_45_abandoned_calls(node, tmp_path):
    root = repeating_link_dag(node)
    pinned = httpx.post(f"{node.url}/api/v0/pin/add", params={"arg": root}, timeout=30)
    assert pinned.json() == {"Pins": [root]}
    with ThreadPoolExecutor(45) as pool:
        list(pool.map(lambda _: _abandon(node, "pin/ls", 0.3), range(45)))
    _version_within(node, 5)
    listed = httpx.post(f"{node.url}/api/v0/pin/ls", timeout=10).json()["Keys"]
    assert len(listed) == 4 and listed[root] == {"Type": "recursive"}
    assert sorted(kind["Type"] for kind in listed.values()).count("indirect") == 3
    # nothing keeps working for the clients that left, and every party is still served
    time.sleep(1.0)
    before = _cpu_seconds(node.proc.pid)
    time.sleep(2.0)
    assert _cpu_seconds(node.proc.pid) - before < 0.5
    with ipfshttpclient.Client(addr=node.multiaddr, timeout=10) as client:
        cid = client.add(io.BytesIO(b"still served"), cid_version=1, raw_leaves=True,
                         pin=False)["Hash"]
        assert client.cat(cid) == b"still served"
        assert client.block.get(cid) == b"still served"
    # the pin survives a restart, and pin/ls still answers at once
    node.stop()
    again = Node(node.data_dir)
    try:
        listed = httpx.post(f"{again.url}/api/v0/pin/ls", timeout=10).json()["Keys"]
        assert listed[root] == {"Type": "recursive"} and len(listed) == 4
        started = time.monotonic()
        again.proc.send_signal(signal.SIGTERM)
        again.proc.wait(30)
        assert time.monotonic() - started < 10
    finally:
        again.stop()


@pytest.mark.parametrize("command, params", [
    ("cat", {}), ("get", {}), ("ls", {}), ("refs", {"recursive": "true", "unique": "true"}),
    ("files/stat", {"with-local": "true"}), ("dag/export", {}),
])
def test_every_read_of_the_repeating_dag_is_bounded(node, command, params):
    root = repeating_link_dag(node)
    arg = f"/ipfs/{root}" if command == "files/stat" else root
    answer = httpx.post(f"{node.url}/api/v0/{command}", params={"arg": arg, **params},
                        timeout=15)
    assert answer.status_code in (200, 500)  # an answer or a clean refusal, within seconds
    _version_within(node, 5)


def test_a_gateway_car_with_dups_stops_when_its_client_leaves(node):
    root = repeating_link_dag(node)
    url = f"{node.url}/ipfs/{root}?format=car&car-dups=y"
    with httpx.stream("GET", url, timeout=15) as answer:  # 5 * 10**11 blocks, if read
        assert answer.status_code == 200
        read = 0
        for piece in answer.iter_raw():
            read += len(piece)
            if read > 1 << 20:
                break
    time.sleep(1.0)
    before = _cpu_seconds(node.proc.pid)
    time.sleep(2.0)
    assert _cpu_seconds(node.proc.pid) - before < 0.5
    _version_within(node, 5)


# --- finding 8: uploads stream under hard caps ------------------------------------------------


UPLOAD_BYTES = 300 << 20  # enough to show the streaming; the 2 GiB run is the benchmark's
RSS_SLACK = 100 << 20


def _pieces(total: int):
    piece = random.Random(8).randbytes(1 << 20)
    for _ in range(total // len(piece)):
        yield piece


def test_a_big_block_put_is_cut_at_the_hard_cap_without_holding_it(node):
    idle = _status(node.proc.pid, "VmRSS")
    try:
        answer = _post(node, "block/put", _multipart(_pieces(UPLOAD_BYTES)),
                       **{"allow-big-block": "true"})
        assert answer.status_code == 413 and "max-block-bytes" in answer.json()["Message"]
    except httpx.TransportError:
        pass  # refused and closed while the client was still sending: also a cut
    assert _status(node.proc.pid, "VmHWM") - idle < RSS_SLACK
    _version_within(node, 5)
    # a block just under the cap is still accepted with allow-big-block, refused without
    block = bytes(4 << 20)
    assert _post(node, "block/put", _multipart([block]), **{"allow-big-block": "true"}
                 ).json()["Key"] == str(CID.for_block(RAW, block))
    assert "over 1MiB" in _post(node, "block/put", _multipart([block])).json()["Message"]


def test_add_hashes_and_writes_a_big_file_as_it_arrives(node):
    idle = _status(node.proc.pid, "VmRSS")
    answer = _post(node, "add", _multipart(_pieces(UPLOAD_BYTES)), timeout=120,
                   **{"cid-version": "1", "pin": "false"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["Hash"] == file_cid(_pieces(UPLOAD_BYTES))
    assert _status(node.proc.pid, "VmHWM") - idle < RSS_SLACK


def test_a_body_over_the_upload_cap_is_refused_before_it_is_read(tmp_path):
    node = Node(tmp_path / "store", "--max-upload-bytes", str(8 << 20))
    try:
        sock = _upload_head(node.port, 9 << 20)  # declared: refused before a byte is read
        assert _answer(sock).startswith(b"HTTP/1.1 413")
        try:  # sent without a length: refused once past the cap
            chunked = _post(node, "add", _multipart(_pieces(16 << 20)), timeout=30)
            assert chunked.status_code == 413 and "max-upload-bytes" in chunked.json()["Message"]
        except httpx.TransportError:
            pass  # closed while the client was still sending: also a refusal
        _version_within(node, 5)
    finally:
        node.stop()


def _upload_head(port: int, length: int) -> socket.socket:
    """A socket that has sent a block/put's headers and its part's headers, nothing more."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(b"POST /api/v0/block/put HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/"
                 b"form-data; boundary=" + BOUNDARY.encode() + b"\r\nContent-Length: "
                 + str(length).encode() + b"\r\n\r\n" + next(_multipart([])))
    return sock


def _answer(sock: socket.socket, seconds: float = 10) -> bytes:
    """Everything the server sends until it closes the connection."""
    sock.settimeout(seconds)
    answer = b""
    try:
        while piece := sock.recv(65536):
            answer += piece
    finally:
        sock.close()
    return answer


def _stalled_upload(port: int) -> socket.socket:
    sock = _upload_head(port, 1 << 30)
    sock.sendall(b"some bytes, then nothing")
    return sock


def _stalled_headers(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(b"POST /api/v0/version HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    return sock


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        while sock.recv(65536):
            pass  # an error answer, then the end
        return True
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True
    finally:
        sock.close()


def test_stalled_uploads_and_headers_are_cut_and_their_descriptors_freed(tmp_path):
    node = Node(tmp_path / "store", "--stall-timeout", "2")
    try:
        baseline = _open_fds(node.proc.pid)
        socks = [_stalled_upload(node.port) for _ in range(40)]
        socks += [_stalled_headers(node.port) for _ in range(20)]
        time.sleep(0.5)
        assert _open_fds(node.proc.pid) >= baseline + 50  # they are held for now
        _version_within(node, 5)
        closed = [None] * len(socks)

        def wait(index: int) -> None:
            closed[index] = _closed_within(socks[index], 15)

        threads = [threading.Thread(target=wait, args=(i,)) for i in range(len(socks))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert all(closed)
        deadline = time.monotonic() + 5
        while _open_fds(node.proc.pid) > baseline + 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _open_fds(node.proc.pid) <= baseline + 2
        _version_within(node, 5)
    finally:
        node.stop()


def test_a_stalled_upload_gets_a_kubo_error_naming_the_stall(tmp_path):
    node = Node(tmp_path / "store", "--stall-timeout", "1")
    try:
        answer = _answer(_stalled_upload(node.port))
        assert answer.startswith(b"HTTP/1.1 408") and b"upload stalled" in answer
    finally:
        node.stop()



def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _one_answer(sock: socket.socket) -> bytes:
    """One HTTP answer with a Content-Length read off ``sock``, which must stay open."""
    answer = b""
    while b"\r\n\r\n" not in answer or len(answer) < _answer_end(answer):
        piece = sock.recv(65536)
        assert piece, f"the server closed the connection; it had sent {answer!r}"
        answer += piece
    return answer


def _answer_end(answer: bytes) -> int:
    head, _, _ = answer.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    return len(head) + 4 + length


def test_an_upload_whose_end_arrives_after_its_close_delimiter_keeps_the_connection(node):
    """A CI run's `gym ledger append` was reset on its second `add`: ipfshttpclient sends a
    chunked body, the server answered as soon as it read the close delimiter and, the body's
    end not yet read, closed the connection the client then reused. The rest of the body (an
    epilogue, RFC 2046, and the chunked end) is read before the answer, so the connection
    stays open for the next request."""
    sock = socket.create_connection(("127.0.0.1", node.port))
    sock.settimeout(10)
    head = (b"POST /api/v0/add?cid-version=1&raw-leaves=true HTTP/1.1\r\nHost: x\r\n"
            b"Transfer-Encoding: chunked\r\nContent-Type: multipart/form-data; boundary="
            + BOUNDARY.encode() + b"\r\n\r\n")
    *parts, last = _multipart([b"first file"])
    sock.sendall(head + b"".join(_chunk(part) for part in parts)
                 + _chunk(last[:-2]))  # the close delimiter, its CRLF still to come
    time.sleep(0.5)
    sock.sendall(_chunk(b"\r\nan epilogue is ignored") + b"0\r\n\r\n")
    first = _one_answer(sock)
    sock.sendall(b"POST /api/v0/version HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
    second = _one_answer(sock)
    sock.close()
    assert second.startswith(b"HTTP/1.1 200") and b'"Version"' in second
    assert first.startswith(b"HTTP/1.1 200") and file_cid(b"first file").encode() in first
