"""What each `gym` command imports: help loads no chain or ML library, chain commands no ML
library (issue: "a CLI that starts fast").

Every check runs the real `gym` in a fresh interpreter with ``-X importtime``
(``PYTHONPROFILEIMPORTTIME=1``), which lists on stderr every module the process imported, and
fails naming the packages that should not be among them.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from gym_helpers import GYM

# web3 pulls in py_ecc and eth-account; the ML stack is torch and what sits on it.
CHAIN = ("web3", "eth_account", "eth_abi", "eth_utils", "py_ecc", "sqlalchemy", "alembic")
ML = ("torch", "transformers", "vllm", "trl", "peft", "accelerate", "datasets", "xgrammar",
      "toploc", "safetensors", "numpy", "hivemind")


def _modules(stderr: str) -> set[str]:
    """Modules named in ``-X importtime`` output."""
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            name = line.rsplit("|", 1)[1].strip()
            if name != "package":  # the header row
                names.add(name)
    return names


def _imported(stderr: str) -> set[str]:
    """Top-level packages named in ``-X importtime`` output."""
    return {name.split(".")[0] for name in _modules(stderr)}


def _run(env, *args: str, stdin: str | None = None) -> tuple[subprocess.CompletedProcess, set]:
    proc = subprocess.run([str(GYM), *args], env={**env, "PYTHONPROFILEIMPORTTIME": "1"},
                          capture_output=True, text=True, check=False, timeout=120, input=stdin)
    return proc, _imported(proc.stderr)


# eth-keyfile's BLS12-381 (about 0.9 s), deferred by ledger.deferred_keyfile
BLS12_381 = ("py_ecc.bls", "py_ecc.bls12_381", "py_ecc.optimized_bls12_381")


def test_the_measure_sees_imports(gym_env):
    # a guard against a parser that finds nothing: `gym --help` itself imports typer and ours
    proc, imported = _run(gym_env.env, "--help")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert {"typer", "devnet", "ledger"} <= imported


def test_every_help_imports_no_chain_or_ml_library(gym_env):
    """The whole command tree's --help, in one process: the root, every group and every
    command, each through click as `gym ... --help` runs it."""
    code = (
        "import json, sys, typer\n"
        "from typer.testing import CliRunner\n"
        "from devnet.cli import app\n"
        "def walk(command, path=()):\n"
        "    yield path\n"
        "    for name, sub in sorted(getattr(command, 'commands', {}).items()):\n"
        "        yield from walk(sub, (*path, name))\n"
        "paths = list(walk(typer.main.get_command(app)))\n"
        "runner = CliRunner()\n"
        "codes = {' '.join(p): runner.invoke(app, [*p, '--help']).exit_code for p in paths}\n"
        "print(json.dumps(codes))\n"
    )
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", code], env=gym_env.env,
                          capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    codes = json.loads(proc.stdout.splitlines()[-1])
    assert len(codes) > 60 and set(codes.values()) == {0}, codes  # every command's help ran
    assert sorted(_imported(proc.stderr) & {*CHAIN, *ML}) == []


@pytest.mark.parametrize("args", [("--help",), ("ledger", "--help"), ("gov", "list", "--help"),
                                  ("node", "serve", "--help"), ("--version",)],
                         ids=lambda args: " ".join(args))
def test_gym_help_alone_imports_no_chain_or_ml_library(gym_env, args):
    proc, imported = _run(gym_env.env, *args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(imported & {*CHAIN, *ML}) == []


def test_chain_and_content_commands_import_no_ml_library(gym_env, tmp_path):
    """Commands that only talk to the chain, the log index and the content store. No devnet
    runs: the chain ones fail with their one-line error, after importing what they use."""
    entry, proof = tmp_path / "entry.json", tmp_path / "proof.json"
    entry.write_text(json.dumps({"type": "experience", "v": 1, "text": "Check units first.",
                                 "domain": "math", "op": "add",
                                 "provenance": {"method": "manual", "base_model": "m", "step": 0}}))
    commands = [
        (("ledger", "create", "alice/math", "--offline"), 0),
        (("ledger", "append", "alice/math", str(entry)), 0),
        (("ledger", "list"), 0),
        (("ledger", "show", "alice/math"), 0),
        (("ledger", "proof", "alice/math", "0", "--json"), 0),
        (("verify", "proof", str(proof)), 0),
        (("verify", "entry", str(entry)), 0),
        (("ipfs", "add", str(entry)), 0),
        (("devnet", "status"), 1),
        (("gov", "list"), 1),
        (("ledger", "publish", "alice/math"), 1),
    ]
    for args, code in commands:
        proc, imported = _run(gym_env.env, *args)
        label = "gym " + " ".join(args)
        assert proc.returncode == code, f"{label}: {proc.stderr[-2000:]}"
        assert sorted(imported & set(ML)) == [], label
        assert sorted(_modules(proc.stderr) & set(BLS12_381)) == [], label
        if args[:2] == ("ledger", "proof"):
            proof.write_text(proc.stdout)
    # and the chain commands did load the chain stack: the check measures what ran
    assert {"web3", "sqlalchemy"} <= imported
