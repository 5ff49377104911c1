"""Shared fixtures: an isolated devnet environment and a runner for the real `gym` command."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from devnet.settings import ANVIL_DEV_KEYS

# Workers on a machine's cores (`make test`: three on two): each test process and every process it
# starts (gym node serve, gym demo, vLLM's engine) computes on one thread. With torch's default
# of a thread per core, two workers' models spin on both cores at once: a README block that
# takes minutes alone ran past its 15-minute limit beside a vLLM compile.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ.setdefault("OMP_NUM_THREADS", "1")

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
        import gym_forkserver  # a real `gym` process, forked with its libraries already imported

        env = {**self.env, **(extra_env or {})}
        done = gym_forkserver.run(GYM, list(args), env, timeout=timeout)
        return GymRun(done.returncode, done.stdout, done.stderr)


@pytest.fixture
def gym_env(tmp_path: Path):
    data_dir = tmp_path / "data"
    deployment_file = tmp_path / "deployment.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYM_")}
    env.update(GYM_DATA_DIR=str(data_dir), GYM_DEPLOYMENT_FILE=str(deployment_file),
               GYM_ANVIL_PORT="0", GYM_IPFS_PORT="0", COLUMNS="200", NO_COLOR="1")
    gym = GymEnv(data_dir, deployment_file, env)
    yield gym
    # Never leave an Anvil or a content service behind: what `gym devnet down` does, without
    # a process per test.
    from devnet.network import stop_local_processes

    stop_local_processes(data_dir)


@pytest.fixture(scope="session")
def postgres_url():
    """A throwaway PostgreSQL cluster (tests/support/postgres_cluster.py), stopped after the
    session. Missing PostgreSQL fails the test in CI (setup installs it) and skips it
    elsewhere."""
    from postgres_cluster import postgres_bin, postgres_cluster

    if postgres_bin() is None:
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL is not installed: run `make setup` (apt-get install postgresql)")
        pytest.skip("PostgreSQL is not installed (make setup installs it)")
    with postgres_cluster() as url:
        yield url


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
    """A deployed devnet, as ``gym_env`` sees it: its deployment file names the contracts and
    ``GYM_RPC_URL`` the chain, so every `gym` command the test runs talks to it."""

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


class SharedDevnet:
    """One Anvil per pytest worker with every contract deployed by the real `gym devnet up`,
    and a chain snapshot of that state (as Foundry's setUp and Hardhat's loadFixture share a
    deployment): ``checkout`` gives a test the deployed chain, ``restore`` reverts whatever the
    test did to it. A worker whose Anvil died, or whose revert failed, deploys afresh."""

    def __init__(self, base: Path):
        self.base = base
        self.data_dir = base / "data"
        self.deployment_file = base / "deployment.json"
        self.rpc_url: str | None = None
        self._snapshot: str | None = None

    def _rpc(self, method: str, params: list | None = None):
        import httpx

        reply = httpx.post(self.rpc_url, json={"jsonrpc": "2.0", "id": 1, "method": method,
                                               "params": params or []}, timeout=30).json()
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply["result"]

    def _deploy(self) -> None:
        import json

        from devnet.network import stop_local_processes

        stop_local_processes(self.data_dir)
        env = {k: v for k, v in os.environ.items() if not k.startswith("GYM_")}
        env.update(GYM_DATA_DIR=str(self.data_dir), GYM_DEPLOYMENT_FILE=str(self.deployment_file),
                   GYM_ANVIL_PORT="0", GYM_IPFS_PORT="0")
        up = subprocess.run([str(GYM), "devnet", "up", "--redeploy"], env=env,
                            capture_output=True, text=True, check=False, timeout=300)
        assert up.returncode == 0, up.stderr
        self.rpc_url = json.loads(self.deployment_file.read_text())["rpc_url"]
        self._snapshot = self._rpc("evm_snapshot")

    def ensure(self) -> None:
        """Deploy, unless the worker's devnet is up and at its snapshot."""
        if self._snapshot is None:
            self._deploy()

    def checkout(self, gym: GymEnv) -> LedgerDevnet:
        """The deployed chain for ``gym``'s test: its deployment file, and GYM_RPC_URL."""
        import json
        import shutil

        self.ensure()
        shutil.copyfile(self.deployment_file, gym.deployment_file)
        gym.env["GYM_RPC_URL"] = self.rpc_url
        manifest = json.loads(self.deployment_file.read_text())
        return LedgerDevnet(gym, self.rpc_url, manifest["contracts"]["ExperienceLedger"]["address"],
                            manifest["deployment_block"])

    def restore(self) -> None:
        """Revert the chain to the deployment (Anvil's snapshots are single use: take the next
        one right away); on any failure, the next checkout deploys a new devnet."""
        import httpx

        snapshot, self._snapshot = self._snapshot, None
        try:
            if self._rpc("evm_revert", [snapshot]) is True:
                self._snapshot = self._rpc("evm_snapshot")
        except (httpx.HTTPError, RuntimeError, ValueError):  # replaced at the next checkout
            self._snapshot = None

    def stop(self) -> None:
        from devnet.network import stop_local_processes

        stop_local_processes(self.data_dir)


@pytest.fixture(scope="session")
def shared_devnet(tmp_path_factory):
    devnet = SharedDevnet(tmp_path_factory.mktemp("shared-devnet"))
    yield devnet
    devnet.stop()


@pytest.fixture
def ledger_devnet(gym_env, shared_devnet):
    """A deployed devnet for one test: the worker's shared chain, reverted afterwards to the
    deployment, so each test starts from the same freshly deployed state (a test that restarts,
    resets or stops the chain takes ``own_ledger_devnet`` instead)."""
    yield shared_devnet.checkout(gym_env)
    shared_devnet.restore()


@pytest.fixture
def own_ledger_devnet(gym_env):
    """A devnet of the test's own, brought up by `gym devnet up` in its data dir (stopped by
    ``gym_env``): for a test that stops, restarts or resets the chain."""
    import json

    result = gym_env.run("devnet", "up")
    assert result.returncode == 0, result.stderr
    manifest = json.loads(gym_env.deployment_file.read_text())
    return LedgerDevnet(gym_env, manifest["rpc_url"],
                        manifest["contracts"]["ExperienceLedger"]["address"],
                        manifest["deployment_block"])


# --- where the time goes: GYM_TEST_COSTS=1 (tests/support/test_costs.py) --------------------

_COSTS: list[dict] = []


def pytest_configure(config):
    is_controller = not hasattr(config, "workerinput") and config.getoption("numprocesses", None)
    if os.environ.get("GYM_TEST_COSTS") and not is_controller:  # the workers run the tests
        import test_costs

        test_costs.install()


def pytest_sessionfinish(session):
    if os.environ.get("GYM_TEST_COSTS"):
        import test_costs

        if hasattr(session.config, "workeroutput"):  # an xdist worker: to the controller
            session.config.workeroutput["gym_costs"] = test_costs.dumps()
        else:
            _COSTS.append(test_costs.snapshot())


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    import json

    if "gym_costs" in getattr(node, "workeroutput", {}):
        _COSTS.append(json.loads(node.workeroutput["gym_costs"]))


def pytest_terminal_summary(terminalreporter):
    if _COSTS:
        import test_costs

        terminalreporter.section("where the time went (GYM_TEST_COSTS)")
        for line in test_costs.report(_COSTS):
            terminalreporter.write_line(line)


# --- parallel runs (pytest -n 3, `make test`) -----------------------------------------------

# Files that start vLLM engines run on one worker, one after another: two engines at once would
# fight over the 2 cores the CI machine has (and each keeps a KV cache in memory).
SERIAL_GROUPS = {
    "vllm": ("inference_node/test_vllm_engine.py", "inference_node/test_vllm_structured_outputs.py",
             "inference_node/test_engine_select.py", "inference_node/test_adapters.py"),
}
# The longest groups, longest first, as measured (`pytest --durations=0` on the 2-core
# machine): dealt out before the rest, each followed by short ones, so that neither worker is
# left with a long test at the end while the other idles. Order only: a missing or renamed
# file just runs in collection order.
LONGEST_GROUPS = (
    "test_readme_roles.py", "devnet/test_demo.py", "trainer/test_swarm.py", "vllm",
    "trainer/test_swarm_hostile.py", "trainer/test_tfgrpo_trainer.py",
    "inference_node/test_engine_select.py", "inference_node/test_across_hosts.py",
    "trainer/test_swarm_work.py",
    "trainer/test_swarm_modes.py", "ledger/test_ledger_cli.py",
    "devnet/test_devnet.py", "governance/test_cli.py", "ledger/test_auditor_cli.py",
    "governance/test_committee_proposals.py", "ledger/test_append_library.py",
    "ledger/test_publish_chain_state.py", "governance/test_params_and_slash.py",
    "committee/test_client.py", "inference_node/test_hostile_requests.py",
    "ledger/test_verify_proof_entry.py", "inference_node/test_sync.py", "committee/test_bls.py",
    "committee/test_e2e.py", "ledger/test_chain_publish_audit.py",
)


def group_of(nodeid: str) -> str:
    """The group of a test: its file (relative to tests/), or the `SERIAL_GROUPS` name."""
    relative = nodeid.split("::", 1)[0].removeprefix("tests/")
    return next((name for name, files in SERIAL_GROUPS.items() if relative in files), relative)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadgroup`, grouped by `group_of`: every test file is one work unit (so a
    module's fixtures are built once, on one worker), the files of a `SERIAL_GROUPS` entry
    share one, `LONGEST_GROUPS` go first, and a worker takes its next unit only when its last
    test is running.

    pytest-xdist's own loadgroup reads `xdist_group` marks by renaming items, which pytest 9.2
    no longer honours (tests of one file then spread over both workers): the grouping lives
    here instead, from the node ids alone.
    """
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

        def _reschedule(self, node) -> None:
            # A worker runs a test only once it knows the next one (pytest's `nextitem`), so
            # the next unit is sent while the last test of the current one is pending.
            if node.shutting_down:
                return
            if not self.workqueue:
                node.shutdown()
                return
            if self._pending_of(self.assigned_work[node]) <= 1:
                self._assign_work_unit(node)

    config.option.loadscopereorder = False
    return GroupScheduling(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """The longest groups first, each of the first two followed by the next short ones in
    collection order: L1, L2, s1, s2, L3, s3, L4, s4, ... (a worker's next unit is queued
    behind its current one, so it should be a short one)."""
    rank = {name: i for i, name in enumerate(LONGEST_GROUPS)}
    groups: dict[str, list] = {}
    for item in items:
        groups.setdefault(group_of(item.nodeid), []).append(item)
    longest = sorted((g for g in groups if g in rank), key=rank.__getitem__)
    short = [g for g in groups if g not in rank]
    order = longest[:2] + short[:2]
    for index, name in enumerate(longest[2:], start=2):
        order += [name] + short[index:index + 1]
    order += short[len(longest):] if len(longest) > 2 else short[2:]
    items[:] = [item for name in order for item in groups[name]]
