"""Issue 44: every party on its own host, running the commands of docs/across-machines.md as
written ("One host per party, step by step").

Each party gets a Linux network namespace on a bridge (tests/support/netns.py): its own IP, its
own loopback, so nothing reaches another party through 127.0.0.1; the researcher's PostgreSQL
runs on a host of its own. The doc's blocks run in order on the host their first line names
(``# on NAME``, ``# on every other host``, ``, keeps running`` for a server), each in bash with
the host's own data directory and deployment file, exports kept per host. The test then asserts
what another party would see: no manifest, registry entry or printed line names 0.0.0.0 or
127.0.0.1, and every step worked from its own host. It needs root (CI runs as root) and skips
with one line elsewhere. The step times go to tests/.artifacts/across_hosts_times.txt.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "across-machines.md"
SECTION = "## One host per party, step by step"
HOSTS = ("chain", "db", "researcher", "holder", "verifier", "aggregator", "node", "client",
         "auditor")
UNREACHABLE_ADDRESSES = ("0.0.0.0", "127.0.0.1", "localhost")

pytestmark = [pytest.mark.anvil, pytest.mark.slow, pytest.mark.postgres]


@dataclass
class Step:
    line: int  # the doc's line of the opening fence
    host: str  # a host name, or "every other host"
    background: bool
    code: str


def doc_steps(text: str) -> list[Step]:
    """The ```sh blocks of the step-by-step section, in order."""
    body = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    first = text.index(SECTION)
    offset = text[:first].count("\n") + 1
    steps = []
    for match in re.finditer(r"^```sh\n(.*?)^```", body, re.MULTILINE | re.DOTALL):
        code = match.group(1)
        header = code.splitlines()[0]
        found = re.fullmatch(r"# on (every other host|[a-z]+)(, keeps running)?", header)
        assert found, f"docs/across-machines.md: a block opens with {header!r}, not '# on HOST'"
        steps.append(Step(offset + body[:match.start()].count("\n"), found.group(1),
                          bool(found.group(2)), code))
    return steps


def test_the_doc_names_a_host_for_every_step():
    steps = doc_steps(DOC.read_text())
    assert {s.host for s in steps} - {"every other host"} <= set(HOSTS)
    assert [s.host for s in steps[:2]] == ["chain", "every other host"]
    assert all(re.search(r"--port \d+", s.code) for s in steps if s.background)


def _view(where: Path) -> Path:
    """A host's working directory: links to the checkout's entries (its `.venv/bin/gym`,
    `devnet/samples`), so the files a step writes (answer.json, bundle.json) stay on that host."""
    where.mkdir(parents=True)
    for entry in ROOT.iterdir():
        if entry.name not in (".git", "runs") and not entry.name.startswith(".pytest"):
            (where / entry.name).symlink_to(entry)
    return where


class Party:
    """One host of the network: its working directory, environment and exported state."""

    def __init__(self, host, home: Path, env: dict[str, str]):
        self.host, self.home = host, home
        self.cwd = _view(home / "cwd")
        self.state = home / "exports.sh"
        self.env = {**env, "GYM_DATA_DIR": str(home / "data"),
                    "GYM_DEPLOYMENT_FILE": str(home / "deployment.json"),
                    "HOME": str(home)}
        self.output: list[str] = []

    def script(self, code: str) -> list[str]:
        keep = shlex.quote(str(self.state))
        return ["bash", "-c", (f"set -Eeuo pipefail\n[ -f {keep} ] && source {keep}\n{code}\n"
                               f"export -p > {keep}\n")]

    def run(self, step: Step, timeout: float = 600) -> str:
        done = self.host.run(self.script(step.code), env=self.env, cwd=self.cwd, check=False,
                             timeout=timeout)
        said = done.stdout + done.stderr
        self.output.append(said)
        assert done.returncode == 0, (f"docs/across-machines.md:{step.line} on {self.host.name} "
                                      f"exited {done.returncode}:\n{said[-4000:]}")
        return said


def test_every_party_on_its_own_host_runs_the_documented_commands(tiny_model_dir, tmp_path):
    from netns import Network, can_make_namespaces

    reason = can_make_namespaces()
    if reason is not None:
        pytest.skip(f"network namespaces unavailable: {reason}")
    steps = doc_steps(DOC.read_text())
    base = {k: v for k, v in os.environ.items() if not k.startswith("GYM_")}
    base.update(OMP_NUM_THREADS="1", NO_COLOR="1", COLUMNS="200", MODEL=str(tiny_model_dir),
                PYTHONDONTWRITEBYTECODE="1")
    times: list[tuple[str, float]] = []
    servers: list[tuple[Party, subprocess.Popen, Path]] = []

    with Network() as net:
        hosts = {name: net.add_host(name) for name in HOSTS}
        started = time.monotonic()
        database = hosts["db"].start_postgres()
        times.append(("PostgreSQL on db", time.monotonic() - started))
        addresses = {"CHAIN": hosts["chain"].ip, "NODE": hosts["node"].ip,
                     "AGGREGATOR": hosts["aggregator"].ip, "HOLDER": hosts["holder"].ip,
                     "DB": database.split("@", 1)[1].split("/", 1)[0]}
        parties = {name: Party(host, tmp_path / name, {**base, **addresses})
                   for name, host in hosts.items() if name != "db"}

        def serve(party: Party, step: Step) -> None:
            log = party.home / "server.log"
            handle = open(log, "wb")  # noqa: SIM115 - the server writes it while it runs
            proc = party.host.popen(party.script(step.code), env=party.env, cwd=party.cwd,
                                    stdout=handle, stderr=subprocess.STDOUT)
            servers.append((party, proc, log))
            port = int(re.search(r"--port (\d+)", step.code).group(1))
            deadline = time.monotonic() + 600
            while not party.host.can_connect(party.host.ip, port):
                assert proc.poll() is None, (f"docs/across-machines.md:{step.line}: the server "
                                             f"exited:\n{log.read_text()[-4000:]}")
                assert time.monotonic() < deadline, f"{step.line}: port {port} never answered"
                time.sleep(0.5)

        try:
            for step in steps:
                started = time.monotonic()
                if step.host == "every other host":
                    others = [p for name, p in parties.items() if name != "chain"]
                    with ThreadPoolExecutor(len(others)) as pool:
                        list(pool.map(lambda p, s=step: p.run(s), others))
                elif step.background:
                    serve(parties[step.host], step)
                else:
                    said = parties[step.host].run(step)
                    if step.host == "chain":
                        cid = re.search(r"manifest published: (\S+)", said).group(1)
                        for party in parties.values():
                            party.env["CID"] = cid
                times.append((f"{step.host} (doc line {step.line})", time.monotonic() - started))

            # what voters on other hosts see: the dashboard answers under the holder's address
            client = parties["client"]
            page = client.host.run(["curl", "-sf", "-o", "/dev/null", "-w", "%{http_code}",
                                    f"http://{hosts['holder'].ip}:8600/"], env=client.env)
            assert page.stdout == "200"
            forged = client.host.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                                      "-H", "Host: 0.0.0.0:8600",
                                      f"http://{hosts['holder'].ip}:8600/"], env=client.env)
            assert forged.stdout == "400"  # another Host is still refused (DNS rebinding)
            registered = parties["auditor"].host.run(
                [".venv/bin/gym", "node", "list", "--json"], env=parties["auditor"].env,
                cwd=parties["auditor"].cwd).stdout
        finally:
            for party, proc, log in servers:
                proc.terminate()
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                party.output.append(log.read_text(errors="replace"))

    report = "\n".join(f"{seconds:7.1f} s  {what}" for what, seconds in times)
    artifacts = ROOT / "tests" / ".artifacts"
    artifacts.mkdir(exist_ok=True)
    (artifacts / "across_hosts_times.txt").write_text(report + "\n")
    print(report)

    chain_ip = hosts["chain"].ip
    for name, party in parties.items():
        manifest = json.loads((party.home / "deployment.json").read_text())
        assert manifest["rpc_url"] == f"http://{chain_ip}:8545", (name, manifest["rpc_url"])
        assert manifest["content_api"] == f"http://{chain_ip}:5001", (name, manifest)
    (node,) = json.loads(registered)["nodes"]
    assert node["endpoint"] == f"http://{hosts['node'].ip}:8000/v1"
    for name, party in parties.items():
        printed = "\n".join(party.output)
        for address in UNREACHABLE_ADDRESSES:
            lines = [line for line in printed.splitlines() if address in line]
            assert not lines, f"{name} printed {address}: {lines[:3]}"
    settled = "\n".join(parties["verifier"].output)
    assert "verdict delivered" in settled, settled[-3000:]
    audited = "\n".join(parties["auditor"].output)
    assert "audit clean: 1 checkpoints, 5 entries replayed" in audited
    assert "receipt audit clean" in audited and "1 receipts checked in full" in audited

