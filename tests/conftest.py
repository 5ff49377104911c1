"""Shared fixtures: an isolated devnet environment and a runner for the real `gym` command."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from devnet.settings import ANVIL_DEV_KEYS

# `gym_helpers`, shared by the test folders. Its own folder: tests/ itself holds ledger/,
# governance/, ... (no __init__.py), which would shadow the real packages as namespace packages.
sys.path.insert(0, str(Path(__file__).parent / "support"))
GYM = Path(sys.executable).parent / "gym"


@dataclass
class GymRun:
    returncode: int
    stdout: str
    stderr: str


@dataclass
class GymEnv:
    """Environment for one test: its own data dir and deployment file, Anvil on a free port."""

    data_dir: Path
    deployment_file: Path
    env: dict[str, str]

    def run(self, *args: str, extra_env: dict[str, str] | None = None, timeout: float = 120) -> GymRun:
        env = {**self.env, **(extra_env or {})}
        proc = subprocess.run([str(GYM), *args], env=env, capture_output=True, text=True, check=False,
                              timeout=timeout)
        return GymRun(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def gym_env(tmp_path: Path):
    data_dir = tmp_path / "data"
    deployment_file = tmp_path / "deployment.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYM_")}
    env.update(GYM_DATA_DIR=str(data_dir), GYM_DEPLOYMENT_FILE=str(deployment_file),
               GYM_ANVIL_PORT="0", COLUMNS="200", NO_COLOR="1")
    gym = GymEnv(data_dir, deployment_file, env)
    yield gym
    gym.run("devnet", "down")  # never leave an Anvil behind


def _postgres_bin() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return found[-1].parent if found else None


@pytest.fixture(scope="session")
def postgres_url(tmp_path_factory):
    """A throwaway PostgreSQL cluster on a free loopback port, stopped after the session.

    The server refuses to run as root, so as root it runs as the `postgres` system user.
    Missing PostgreSQL fails the test in CI (setup installs it) and skips it elsewhere.
    """
    import shutil
    import socket

    bindir = _postgres_bin()
    if bindir is None:
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL is not installed: run `make setup` (apt-get install postgresql)")
        pytest.skip("PostgreSQL is not installed (make setup installs it)")
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
    options = f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off"
    subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-w",
                    "-l", str(base / "log"), "start"], check=True, capture_output=True)
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate",
                        "stop"], capture_output=True, check=False)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request, tmp_path):
    """One fresh, empty database per test, on every backend: a test using it runs twice."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ledger.sqlite'}"
        return
    import sqlalchemy

    server = request.getfixturevalue("postgres_url")
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = sqlalchemy.create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sqlalchemy.text(f"CREATE DATABASE {name}"))
    yield server.rsplit("/", 1)[0] + "/" + name
    with admin.connect() as conn:
        conn.execute(sqlalchemy.text(f"DROP DATABASE {name} WITH (FORCE)"))
    admin.dispose()



# --- ledger: a deployed devnet and ExperienceLedger clients (tests/ledger) ------------------

# Anvil's default accounts 0 and 1: public knowledge, worthless outside a devnet.
ANVIL_KEYS = ANVIL_DEV_KEYS[:2]  # public devnet keys: account 0 owns, account 1 owns nothing


@dataclass
class LedgerDevnet:
    """A devnet brought up by the real `gym devnet up` in an isolated ``gym_env``."""

    gym: GymEnv
    rpc_url: str
    address: str  # ExperienceLedger
    deployment_block: int
    owner_key = ANVIL_KEYS[0]  # deploys, and owns the logs it creates
    other_key = ANVIL_KEYS[1]  # owns nothing

    def contract(self, key: str | None = ANVIL_KEYS[0]):
        from web3 import Web3

        from contracts import load_artifact
        from ledger.chain import LedgerContract

        w3 = Web3(Web3.HTTPProvider(self.rpc_url))
        return LedgerContract(w3, self.address, load_artifact("ExperienceLedger").abi, key)


@pytest.fixture
def ledger_devnet(gym_env):
    import json

    result = gym_env.run("devnet", "up")
    assert result.returncode == 0, result.stderr
    manifest = json.loads(gym_env.deployment_file.read_text())
    yield LedgerDevnet(gym_env, manifest["rpc_url"],
                       manifest["contracts"]["ExperienceLedger"]["address"],
                       manifest["deployment_block"])


# --- parallel runs (pytest -n 2, `make test`) -----------------------------------------------

# Files that start vLLM engines run on one worker, one after another: two engines at once would
# fight over the 2 cores the CI machine has (and each keeps a KV cache in memory).
SERIAL_GROUPS = {
    "vllm": ("inference_node/test_vllm_engine.py", "inference_node/test_vllm_structured_outputs.py",
             "inference_node/test_engine_select.py", "inference_node/test_adapters.py"),
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist's `--dist loadgroup`, every test file is one group (so a module's
    fixtures are built once, on one worker), and the files of a `SERIAL_GROUPS` entry share one."""
    tests_root = Path(__file__).parent
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        relative = Path(item.fspath).relative_to(tests_root).as_posix()
        group = next((name for name, files in SERIAL_GROUPS.items() if relative in files), relative)
        item.add_marker(pytest.mark.xdist_group(group))
