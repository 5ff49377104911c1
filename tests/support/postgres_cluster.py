"""A throwaway PostgreSQL cluster on a free loopback port (Debian's `postgresql` package, which
`make setup` installs), for the tests' ``postgres_url`` fixture and the benchmarks: initdb in
a temporary directory, start, yield the SQLAlchemy URL, stop and remove. tests/support/netns.py
starts one inside a network namespace, listening on that host's address."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path


def postgres_bin() -> Path | None:
    """Where initdb and pg_ctl are (the newest installed version), or None."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return found[-1].parent if found else None


@contextmanager
def postgres_cluster(listen: str = "127.0.0.1", trust_network: str | None = None,
                     launcher: Sequence[str] = ()) -> Iterator[str]:
    """``postgresql+psycopg://postgres@LISTEN:PORT/postgres`` of a new cluster (fsync off:
    a test database). The server refuses to run as root, so as root it runs as the
    `postgres` system user. ``FileNotFoundError`` when PostgreSQL is not installed.

    ``listen``: the one address the server binds. ``trust_network``: a CIDR whose TCP clients
    connect without a password (initdb trusts only loopback). ``launcher``: a command prefix for
    starting the server, e.g. ``ip netns exec NAME`` (stopping signals the pid, from anywhere).
    The port is picked free on the caller's loopback: in a fresh namespace every port is free."""
    bindir = postgres_bin()
    if bindir is None:
        raise FileNotFoundError("PostgreSQL is not installed (make setup installs it)")
    base = Path(tempfile.mkdtemp(prefix="gym-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(base, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    data = base / "data"
    subprocess.run([*as_user, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U",
                    "postgres", "--no-sync"], check=True, capture_output=True)
    if trust_network is not None:
        with open(data / "pg_hba.conf", "a") as hba:
            hba.write(f"host all all {trust_network} trust\n")
    options = f"-p {port} -k {base} -c listen_addresses={listen} -c fsync=off"
    subprocess.run([*launcher, *as_user, str(bindir / "pg_ctl"), "-D", str(data), "-o", options,
                    "-w", "-l", str(base / "log"), "start"], check=True, capture_output=True)
    try:
        yield f"postgresql+psycopg://postgres@{listen}:{port}/postgres"
    finally:
        subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate",
                        "stop"], capture_output=True, check=False)
        shutil.rmtree(base, ignore_errors=True)
