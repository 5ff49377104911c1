"""Hosts for tests that put each party on its own machine: Linux network namespaces on a bridge.

A ``Network`` makes a "switch" namespace holding a bridge, and each ``add_host`` makes one more
namespace with its own loopback and one veth into that bridge, addressed on a private /24. A
party in one host reaches another only by the other's IP: its 127.0.0.1 is its own. The root
namespace is never touched (no interface, route or address is added there), and the filesystem
is shared, so a host runs the venv's python and `gym` as they are; /etc/hosts is shared too,
so hosts are named by IP, never by an edited hosts file.

    with Network() as net:
        db, client = net.add_host("db"), net.add_host("client")
        url = db.start_postgres()          # postgresql+psycopg://gym@10.213.X.2:PORT/gym
        client.run([sys.executable, "-c", f"import sqlalchemy; sqlalchemy.create_engine({url!r})"
                    ".connect()"])

Names: every namespace is ``gymnet-<pid>.<start time>-<n>-<host>`` (the pid and start time of
the test process, n counting its networks), so xdist workers and concurrent runs never collide,
and a later run knows a leftover whose process has died: ``Network`` kills the processes in such
namespaces and deletes them before making its own. Interfaces live only inside these
namespaces, named ``gn<pid base 36>.<n>.*`` (at most 15 characters). The subnet is 10.213.X.0/24
with X picked per network and skipped where the root namespace has a route into it; the hosts
cannot see the root's routes, so a clash would be harmless, but distinct numbers keep logs clear.

Needs root and iproute2; ``can_make_namespaces`` says why not, for a one-line skip."""

from __future__ import annotations

import functools
import ipaddress
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Self

from postgres_cluster import postgres_bin, postgres_cluster

PREFIX = "gymnet-"
_NAME = re.compile(r"[a-z][a-z0-9-]{0,23}")
_networks = itertools.count(1)
# A namespace cannot reach a proxy on the host's address, and tests use none: proxy variables
# would only send the hosts' HTTP clients to an unreachable address.
_PROXY_VARIABLES = {"http_proxy", "https_proxy", "all_proxy", "no_proxy"}
# One TCP connection attempt per loop until a deadline, run inside a namespace.
_CONNECT = """\
import socket, sys, time
address, port, deadline = sys.argv[1], int(sys.argv[2]), time.monotonic() + float(sys.argv[3])
while True:
    try:
        socket.create_connection((address, port), timeout=1).close()
        sys.exit(0)
    except OSError:
        if time.monotonic() >= deadline:
            sys.exit(1)
        time.sleep(0.05)
"""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot, or None when it is gone: a pid with
    its start time names one process, where a pid alone may be reused."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(") ", 1)[1].split()[19]
    except (FileNotFoundError, IndexError):
        return None


def _owner() -> str:
    """``<pid>.<start time>`` of this process, the part of a namespace name that says whose."""
    return f"{os.getpid()}.{_start_time(os.getpid())}"


def _base36(number: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    text = ""
    while True:
        number, digit = divmod(number, 36)
        text = digits[digit] + text
        if number == 0:
            return text


@functools.cache
def can_make_namespaces() -> str | None:
    """Why this machine cannot run the hosts (for a skip line), or None when it can: root, the
    `ip` command, and a namespace holding a veth pair and a bridge, made and deleted."""
    if os.geteuid() != 0:
        return "needs root"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    probe = f"{PREFIX}{_owner()}-probe"
    try:
        _ip("netns", "add", probe)
        _ip("-n", probe, "link", "add", "probe0", "type", "veth", "peer", "name", "probe1")
        _ip("-n", probe, "link", "add", "probe2", "type", "bridge")
    except subprocess.CalledProcessError as error:
        message = (error.stderr.strip() or "no message").splitlines()[0]
        return f"`{' '.join(error.cmd)}` failed: {message}"
    finally:
        _ip("netns", "del", probe, check=False)
    return None


def harness_namespaces() -> list[str]:
    """Every namespace on this machine named by this harness, whoever made it."""
    listed = _ip("netns", "list").stdout.split("\n")
    return [line.split()[0] for line in listed if line.startswith(PREFIX)]


def _kill_namespace(name: str) -> None:
    """SIGKILL every process in the namespace, then delete it (which deletes its veth ends)."""
    for pid in _ip("netns", "pids", name, check=False).stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    _ip("netns", "del", name, check=False)


def remove_stale_namespaces() -> list[str]:
    """Kill the processes in, and delete, this harness's namespaces whose test process has died
    (a run killed before its teardown); return their names."""
    stale = []
    for name in harness_namespaces():
        owner = name[len(PREFIX):].split("-", 1)[0]
        pid, _, started = owner.partition(".")
        if pid.isdigit() and _start_time(int(pid)) != started:
            _kill_namespace(name)
            stale.append(name)
    return stale


def _root_routes() -> list[ipaddress.IPv4Network]:
    """The destinations of the root namespace's IPv4 routes (main table), less the default."""
    routes = []
    for line in _ip("-4", "-o", "route").stdout.splitlines():
        words = line.split()
        if words[0] in ("unreachable", "blackhole", "prohibit", "throw"):
            words = words[1:]
        if words and words[0] != "default":
            routes.append(ipaddress.IPv4Network(words[0], strict=False))
    return routes


def _pick_subnet(seed: int) -> ipaddress.IPv4Network:
    taken = _root_routes()
    for step in range(254):
        candidate = ipaddress.IPv4Network(f"10.213.{(seed + step) % 254 + 1}.0/24")
        if not any(candidate.overlaps(route) for route in taken):
            return candidate
    raise RuntimeError("every 10.213.X.0/24 overlaps a route of this machine")


def _namespace_env(env: Mapping[str, str] | None) -> dict[str, str]:
    source = os.environ if env is None else env
    return {k: v for k, v in source.items() if k.lower() not in _PROXY_VARIABLES}


class Host:
    """One party's machine: a namespace with loopback up and ``ip`` on the network's subnet."""

    def __init__(self, network: Network, name: str, namespace: str, ip: str):
        self.network = network
        self.name = name
        self.namespace = namespace
        self.ip = ip

    def __repr__(self) -> str:
        return f"Host({self.name!r}, {self.ip})"

    @property
    def exec_prefix(self) -> list[str]:
        """The command prefix that runs a program in this host: ``ip netns exec NAMESPACE``."""
        return ["ip", "netns", "exec", self.namespace]

    def run(self, cmd: Sequence[str], *, env: Mapping[str, str] | None = None,
            timeout: float = 60, check: bool = True, cwd: str | Path | None = None,
            ) -> subprocess.CompletedProcess[str]:
        """Run ``cmd`` in this host to completion, output captured as text (a failure's
        ``CalledProcessError`` carries its stderr as a note). ``env`` replaces the environment
        (default: this process's), less proxy variables."""
        done = subprocess.run([*self.exec_prefix, *cmd], env=_namespace_env(env), cwd=cwd,
                              timeout=timeout, capture_output=True, text=True, check=False)
        if check and done.returncode != 0:
            error = subprocess.CalledProcessError(done.returncode, done.args, done.stdout,
                                                  done.stderr)
            error.add_note(f"in {self.name} ({self.ip}); stderr:\n{done.stderr[-4000:]}")
            raise error
        return done

    def popen(self, cmd: Sequence[str], *, env: Mapping[str, str] | None = None,
              **popen_kwargs) -> subprocess.Popen:
        """Start ``cmd`` in this host in the background, in its own process group, which the
        network kills (the whole group) at teardown. Output goes where ``popen_kwargs`` say
        (by default, this process's stdout and stderr)."""
        proc = subprocess.Popen([*self.exec_prefix, *cmd], env=_namespace_env(env),
                                start_new_session=True, **popen_kwargs)
        self.network.processes.append(proc)
        return proc

    def can_connect(self, address: str, port: int, timeout: float = 1.0) -> bool:
        """Whether a TCP connection from this host to ``address:port`` succeeds within
        ``timeout`` seconds (retrying while refused)."""
        done = self.run([sys.executable, "-c", _CONNECT, address, str(port), str(timeout)],
                        timeout=timeout + 10, check=False)
        return done.returncode == 0

    def wait_port(self, port: int, timeout: float = 10.0, *, from_host: Host | None = None,
                  address: str | None = None) -> None:
        """Wait until ``port`` on this host answers TCP from ``from_host`` (default: this host),
        at ``address`` (default: this host's IP). ``TimeoutError`` when it does not in time."""
        client = from_host or self
        address = address or self.ip
        if not client.can_connect(address, port, timeout):
            raise TimeoutError(f"{address}:{port} ({self.name}) did not answer {client.name} "
                               f"within {timeout} s")

    def start_postgres(self) -> str:
        """Start a throwaway PostgreSQL cluster in this host (tests/support/postgres_cluster.py),
        listening on this host's IP only and trusting the network's subnet, with a `gym` role
        owning a `gym` database; stopped at the network's teardown. Returns
        ``postgresql+psycopg://gym@IP:PORT/gym``."""
        admin_url = self.network.cleanup.enter_context(postgres_cluster(
            listen=self.ip, trust_network=str(self.network.subnet), launcher=self.exec_prefix))
        port = admin_url.rsplit(":", 1)[1].split("/")[0]
        self.run([str(postgres_bin() / "psql"), "-h", self.ip, "-p", port, "-U", "postgres",
                  "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-c", "CREATE ROLE gym LOGIN",
                  "-c", "CREATE DATABASE gym OWNER gym"])
        return f"postgresql+psycopg://gym@{self.ip}:{port}/gym"


class Network:
    """A bridge in its own namespace and the hosts plugged into it; a context manager whose exit
    stops what its hosts started (PostgreSQL, then every process group from ``popen``, then
    whatever else is left in the namespaces) and deletes every namespace it made."""

    def __init__(self) -> None:
        self.number = next(_networks)
        # Namespaces: whose (pid and start time) and which network; see the module docstring.
        self.tag = f"{PREFIX}{_owner()}-{self.number}"
        # Interface names, ≤ 15 characters: "gn" + pid in base 36 (≤ 5) + "." + network number.
        self.interface_tag = f"gn{_base36(os.getpid())}.{_base36(self.number)}"
        self.subnet: ipaddress.IPv4Network | None = None
        self.hosts: dict[str, Host] = {}
        self.namespaces: list[str] = []
        self.processes: list[subprocess.Popen] = []
        self.cleanup = ExitStack()  # what hosts started that is stopped before the kill
        self.switch = f"{self.tag}-switch"
        self.bridge = f"{self.interface_tag}.br"

    def __enter__(self) -> Self:
        remove_stale_namespaces()
        self.subnet = _pick_subnet(os.getpid() * 7 + self.number)
        try:
            self._add_namespace(self.switch)
            _ip("-n", self.switch, "link", "add", self.bridge, "type", "bridge")
            _ip("-n", self.switch, "link", "set", self.bridge, "up")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _add_namespace(self, name: str) -> None:
        _ip("netns", "add", name)
        self.namespaces.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def add_host(self, name: str) -> Host:
        """A new host named ``name`` (lowercase letters, digits, dashes) at the next address."""
        if self.subnet is None:
            raise RuntimeError("add hosts inside `with Network() as net:`")
        if not _NAME.fullmatch(name) or name == "switch" or name in self.hosts:
            raise ValueError(f"host name {name!r}: new, [a-z][a-z0-9-]*, at most 24 characters")
        index = len(self.hosts)
        ip = str(self.subnet[index + 2])  # .1 is left to no one: no host plays the gateway
        namespace = f"{self.tag}-{name}"
        port = f"{self.interface_tag}.{_base36(index)}"
        self._add_namespace(namespace)
        # Both veth ends are made inside namespaces: none ever exists in the root namespace.
        _ip("-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", "eth0",
            "netns", namespace)
        _ip("-n", self.switch, "link", "set", port, "master", self.bridge, "up")
        _ip("-n", namespace, "addr", "add", f"{ip}/{self.subnet.prefixlen}", "dev", "eth0")
        _ip("-n", namespace, "link", "set", "eth0", "up")
        host = Host(self, name, namespace, ip)
        self.hosts[name] = host
        return host

    def close(self) -> None:
        """Stop everything and delete the namespaces; safe to call twice."""
        try:
            self.cleanup.close()
        finally:
            self._kill_processes()
            for namespace in reversed(self.namespaces):
                _kill_namespace(namespace)
            self.namespaces.clear()

    def _kill_processes(self, grace: float = 3.0) -> None:
        """SIGTERM each started process group, SIGKILL the groups still there after ``grace``
        seconds, and reap the leaders."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for proc in self.processes:
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and any(_group_alive(p.pid) for p in self.processes):
                time.sleep(0.05)
                for proc in self.processes:
                    proc.poll()
        for proc in self.processes:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self.processes.clear()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
