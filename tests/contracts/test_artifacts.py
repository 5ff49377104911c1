"""Loading ABI and bytecode from forge's build output, and the errors when it is unusable."""

from __future__ import annotations

import json
import shutil

import pytest

from contracts import (
    BuildMissingError,
    BuildStaleError,
    ToolchainError,
    foundry_binary,
    load_artifact,
)
from contracts.artifacts import OUT_DIR, ArtifactError


def test_loads_the_built_ledger():
    artifact = load_artifact("ExperienceLedger")
    assert artifact.source == "src/ExperienceLedger.sol"
    assert artifact.bytecode.startswith("0x60") and len(artifact.bytecode) > 100
    names = {item.get("name") for item in artifact.abi}
    assert {"createLog", "anchor", "verifyInclusion"} <= names


def test_missing_build_names_the_command(tmp_path):
    with pytest.raises(BuildMissingError, match=r"no build output for contract ExperienceLedger .*make contracts"):
        load_artifact("ExperienceLedger", out_dir=tmp_path)
    with pytest.raises(FileNotFoundError):  # the builtin it refines
        load_artifact("NoSuchContract")


def _copy_artifact(tmp_path, mutate):
    src = next(OUT_DIR.glob("ExperienceLedger.sol/ExperienceLedger.json"))
    dest = tmp_path / "ExperienceLedger.sol"
    dest.mkdir()
    data = json.loads(src.read_text())
    mutate(data)
    (dest / "ExperienceLedger.json").write_text(json.dumps(data))


def test_build_older_than_its_source_is_refused(tmp_path):
    def change_source_hash(data):
        data["metadata"]["sources"]["src/ExperienceLedger.sol"]["keccak256"] = "0x" + "00" * 32

    _copy_artifact(tmp_path, change_source_hash)
    with pytest.raises(BuildStaleError, match=r"older than its source src/ExperienceLedger.sol: run `make contracts`"):
        load_artifact("ExperienceLedger", out_dir=tmp_path)
    assert load_artifact("ExperienceLedger", out_dir=tmp_path, check_fresh=False).name == "ExperienceLedger"


def test_build_from_a_deleted_source_is_refused(tmp_path):
    def add_vanished_source(data):
        data["metadata"]["sources"]["src/Vanished.sol"] = {"keccak256": "0x" + "00" * 32}

    _copy_artifact(tmp_path, add_vanished_source)
    with pytest.raises(BuildStaleError, match="src/Vanished.sol, which no longer exists"):
        load_artifact("ExperienceLedger", out_dir=tmp_path)


def test_unreadable_artifact(tmp_path):
    (tmp_path / "X.sol").mkdir()
    (tmp_path / "X.sol" / "X.json").write_text("{truncated")
    with pytest.raises(ArtifactError, match="unreadable build output"):
        load_artifact("X", out_dir=tmp_path)


def test_foundry_binaries_come_from_npm():
    for name in ("anvil", "forge", "cast"):
        assert foundry_binary(name).parts[-4:-2] == ("@foundry-rs", f"{name}-linux-amd64")


def test_missing_binary_names_the_setup_command(monkeypatch, tmp_path):
    monkeypatch.setattr("contracts.toolchain.NPM_BIN_DIR", tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolchainError, match="run `make setup`"):
        foundry_binary("anvil")


def test_gym_reports_a_missing_build_without_traceback(gym_env, tmp_path):
    """The CLI path: a stale/missing build is one line and exit code 1. (On a copy of the
    build, named by GYM_CONTRACTS_OUT: tests on the other worker read the real one.)"""
    out = tmp_path / "out"
    shutil.copytree(OUT_DIR, out)
    shutil.rmtree(out / "ExperienceLedger.sol")
    result = gym_env.run("devnet", "up", extra_env={"GYM_CONTRACTS_OUT": str(out)})
    assert result.returncode == 1
    assert result.stderr.strip().startswith("error: no build output for contract ExperienceLedger")
    assert "make contracts" in result.stderr and "Traceback" not in result.stderr
