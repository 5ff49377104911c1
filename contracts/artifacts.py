"""Load ABI and bytecode of a contract from forge's build output (``contracts/out``).

A build is *stale* when a source file it was compiled from has changed since: forge records
the keccak256 of every source in the artifact's metadata, and we compare it with the file on
disk. That is exact (no dependence on file times, which a fresh clone does not preserve) and
covers imported libraries too.

``GYM_CONTRACTS_OUT`` names another build output directory (read at each load): an
installation that keeps its build elsewhere, and tests that must not touch the shared one.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from contracts.errors import ContractsError
from contracts.toolchain import FOUNDRY_DIR, REPO_ROOT

BUILD_COMMAND = "make contracts"
OUT_DIR = FOUNDRY_DIR / "out"


class ArtifactError(ContractsError):
    """A contract's build output cannot be used."""


class BuildMissingError(ArtifactError, FileNotFoundError):
    """No build output for the contract."""


class BuildStaleError(ArtifactError):
    """The build output is older than the sources it was compiled from."""


@dataclass(frozen=True)
class ContractArtifact:
    """What web3 needs to deploy and call one contract."""

    name: str  # contract name, e.g. "ExperienceLedger"
    abi: list[dict] = field(repr=False)  # JSON ABI
    bytecode: str = field(repr=False)  # creation code, 0x-prefixed hex
    deployed_bytecode: str = field(repr=False)  # runtime code, 0x-prefixed hex
    source: str  # source path relative to contracts/, e.g. "src/ExperienceLedger.sol"
    # (start, length) of each immutable the constructor writes into the runtime code
    immutables: tuple[tuple[int, int], ...] = field(default=(), repr=False)

    def is_runtime_code(self, code: bytes) -> bool:
        """Whether ``code`` (``eth_getCode``) is this contract's runtime code, whatever values
        its constructor wrote into the immutables (their bytes are compared as zeros)."""
        expected = bytes.fromhex(self.deployed_bytecode[2:])
        if len(code) != len(expected):
            return False
        masked = bytearray(code)
        for start, length in self.immutables:
            masked[start:start + length] = bytes(length)
        return bytes(masked) == expected

    @property
    def runtime_code_hash(self) -> str:
        """keccak256 of the runtime code, as ``eth_getCode`` would return it (0x hex).

        Contracts with immutables differ on-chain from this hash; compare those by reading
        the deployed code instead.
        """
        from eth_utils import keccak  # eth_utils takes 0.2 s to import: only when needed

        return "0x" + keccak(hexstr=self.deployed_bytecode).hex()


def _resolve_source(path: str) -> Path:
    """Map a path from solc metadata to the file on disk (sources are relative to contracts/)."""
    for base in (FOUNDRY_DIR, REPO_ROOT):
        candidate = (base / path).resolve()
        if candidate.is_file():
            return candidate
    return FOUNDRY_DIR / path


def load_artifact(name: str, out_dir: Path | None = None, check_fresh: bool = True) -> ContractArtifact:
    """Load contract ``name`` from the forge build output.

    Raises ``BuildMissingError`` when there is no artifact and ``BuildStaleError`` when any
    source it was compiled from changed since; both name the command to run.
    """
    out_dir = out_dir or Path(os.environ.get("GYM_CONTRACTS_OUT") or OUT_DIR)
    matches = sorted(out_dir.glob(f"*.sol/{name}.json"))
    if not matches:
        raise BuildMissingError(
            f"no build output for contract {name} in {out_dir}: run `{BUILD_COMMAND}`"
        )
    if len(matches) > 1:
        raise ArtifactError(f"contract name {name} is ambiguous in {out_dir}: {matches}")
    path = matches[0]
    try:
        data = json.loads(path.read_text())
        bytecode = data["bytecode"]["object"]
        deployed = data["deployedBytecode"]["object"]
        immutables = tuple((int(ref["start"]), int(ref["length"])) for refs in data[
            "deployedBytecode"].get("immutableReferences", {}).values() for ref in refs)
        sources = data["metadata"]["sources"]
        target = next(iter(data["metadata"]["settings"]["compilationTarget"]))
    except (OSError, ValueError, KeyError, TypeError, StopIteration) as exc:
        raise ArtifactError(
            f"unreadable build output {path} ({exc}): run `{BUILD_COMMAND}`"
        ) from exc
    if check_fresh:
        from eth_utils import keccak

        for source, info in sources.items():
            on_disk = _resolve_source(source)
            if not on_disk.is_file():
                raise BuildStaleError(
                    f"{name} was built from {source}, which no longer exists: run `{BUILD_COMMAND}`"
                )
            if "0x" + keccak(on_disk.read_bytes()).hex() != info.get("keccak256"):
                raise BuildStaleError(
                    f"{name} is older than its source {source}: run `{BUILD_COMMAND}`"
                )
    return ContractArtifact(
        name=name,
        abi=data["abi"],
        bytecode=bytecode if bytecode.startswith("0x") else "0x" + bytecode,
        deployed_bytecode=deployed if deployed.startswith("0x") else "0x" + deployed,
        source=target,
        immutables=immutables,
    )
