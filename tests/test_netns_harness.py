"""The network-namespace harness (tests/support/netns.py): hosts reach each other by IP and only
by IP, PostgreSQL in one host serves another, and nothing outlives a network, even one whose
test process was killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import netns
import pytest
from netns import Network, can_make_namespaces, harness_namespaces
from processes import alive

SUPPORT = Path(__file__).parent / "support"
PORT = 8000  # every namespace is fresh: no port in it is taken


@pytest.fixture
def namespaces():
    reason = can_make_namespaces()
    if reason is not None:
        pytest.skip(f"network namespaces unavailable: {reason}")


@pytest.fixture
def network(namespaces):
    with Network() as net:
        yield net


def root_links() -> list[str]:
    listed = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True)
    return [line.split(": ")[1].split("@")[0] for line in listed.stdout.splitlines()]


def namespace_pids(namespace: str, count: int) -> list[int]:
    """The pids in the namespace, once there are ``count`` of them: a process started with
    `ip netns exec` enters its namespace a moment after it starts."""
    deadline = time.monotonic() + 10
    while True:
        listed = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True,
                                text=True, check=False)
        pids = [int(pid) for pid in listed.stdout.split()]
        if len(pids) >= count or time.monotonic() > deadline:
            return pids
        time.sleep(0.02)


def wait_gone(pids: list[int]) -> list[int]:
    """The pids still alive after up to 5 s (SIGKILL lands a moment after it is sent)."""
    deadline = time.monotonic() + 5
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    return [pid for pid in pids if alive(pid)]


def test_hosts_reach_each_other_by_ip(network):
    server, client = network.add_host("server"), network.add_host("client")
    assert server.ip != client.ip and {server.ip, client.ip} < set(map(str, network.subnet))
    server.popen([sys.executable, "-m", "http.server", "--bind", server.ip, str(PORT)],
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server.wait_port(PORT, from_host=client)
    fetch = f"import urllib.request as r; print(r.urlopen('http://{server.ip}:{PORT}/').status)"
    assert client.run([sys.executable, "-c", fetch]).stdout.strip() == "200"


def test_loopback_stays_inside_its_host(network):
    a, b = network.add_host("a"), network.add_host("b")
    a.popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(PORT)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    a.wait_port(PORT, address="127.0.0.1")  # it serves a's own loopback
    assert not b.can_connect(a.ip, PORT, timeout=0.3)
    assert not b.can_connect("127.0.0.1", PORT, timeout=0.3)
    assert not a.can_connect(a.ip, PORT, timeout=0.3)  # bound to loopback: not on a's IP either


@pytest.mark.postgres
@pytest.mark.slow
def test_postgres_in_one_host_serves_another(network):
    from postgres_cluster import postgres_bin

    if postgres_bin() is None:
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL is not installed: run `make setup`")
        pytest.skip("PostgreSQL is not installed (make setup installs it)")
    db, client = network.add_host("db"), network.add_host("client")
    url = db.start_postgres()
    assert url.startswith(f"postgresql+psycopg://gym@{db.ip}:")
    query = textwrap.dedent(f"""
        import sqlalchemy
        engine = sqlalchemy.create_engine({url!r})
        with engine.begin() as conn:
            conn.execute(sqlalchemy.text("CREATE TABLE t (x int)"))  # gym owns its database
            print(conn.execute(sqlalchemy.text(
                "SELECT current_user, host(inet_server_addr()), host(inet_client_addr())")).one())
    """)
    done = client.run([sys.executable, "-c", query], timeout=60)
    assert done.stdout.strip() == str(("gym", db.ip, client.ip))
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    assert not db.can_connect("127.0.0.1", port, timeout=0.3)  # it listens on db's IP only


def test_teardown_leaves_no_namespace_interface_or_process(namespaces):
    links_before = set(root_links())
    with Network() as net:
        hosts = [net.add_host("a"), net.add_host("b")]
        for host in hosts:
            host.popen(["sleep", "600"])
        # One that leaves its process group and session: found by its namespace instead.
        hosts[0].popen(["setsid", "-f", "sleep", "600"]).wait(timeout=10)
        pids = namespace_pids(hosts[0].namespace, 2) + namespace_pids(hosts[1].namespace, 1)
        assert len(pids) == 3
        assert not any(link.startswith(net.interface_tag) for link in root_links())
        assert sum(name.startswith(net.tag) for name in harness_namespaces()) == 3
    assert not [name for name in harness_namespaces() if name.startswith(net.tag)]
    assert not [link for link in set(root_links()) - links_before
                if link.startswith(net.interface_tag)]
    assert not wait_gone(pids)


def test_namespaces_of_a_killed_run_are_removed_at_the_next_start(network, monkeypatch):
    # A test process that makes a network, starts a process in it, and is killed. Its own
    # prefix keeps the other workers' networks, which also remove stale namespaces on entry,
    # from cleaning up before this test looks.
    prefix = "gymnetkilled-"
    killed_run = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(SUPPORT)!r})
        import netns
        netns.PREFIX = {prefix!r}
        net = netns.Network().__enter__()
        host = net.add_host("orphan")
        host.popen(["sleep", "600"])
        print(host.namespace, flush=True)
        time.sleep(600)
    """)
    run = subprocess.Popen([sys.executable, "-c", killed_run], stdout=subprocess.PIPE, text=True)
    try:
        namespace = run.stdout.readline().strip()
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait()
    monkeypatch.setattr(netns, "PREFIX", prefix)
    assert namespace.startswith(prefix) and namespace in netns.harness_namespaces()
    orphans = namespace_pids(namespace, 1)
    assert orphans  # the sleep outlived its test process
    removed = netns.remove_stale_namespaces()  # what the next Network does on entry
    assert namespace in removed and namespace.replace("-orphan", "-switch") in removed
    assert not netns.harness_namespaces()
    assert not wait_gone(orphans)
    monkeypatch.undo()
    assert network.namespaces[0] in netns.harness_namespaces()  # a live run's are left alone
    assert not [name for name in netns.remove_stale_namespaces() if network.tag in name]
