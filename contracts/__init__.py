"""Solidity contracts of Gym Ledger and the Python loader for their Foundry build output.

The Foundry project lives beside this file (``foundry.toml``, ``src/``, ``test/``). Its
compiler is solc-js from npm behind ``bin/solc-js`` and its binaries come from the npm
packages pinned in the repository's ``package.json``, so everything builds offline.

>>> from contracts import load_artifact
>>> ledger = load_artifact("ExperienceLedger")    # abi and bytecode, ready for web3
>>> [item["name"] for item in ledger.abi if item.get("name") == "anchor"]
['anchor']

``load_artifact`` refuses a build that is missing or older than its sources and says which
command to run (``make contracts``).
"""

from contracts.artifacts import (
    BUILD_COMMAND,
    ArtifactError,
    BuildMissingError,
    BuildStaleError,
    ContractArtifact,
    load_artifact,
)
from contracts.errors import ContractsError
from contracts.toolchain import FOUNDRY_DIR, ToolchainError, build_contracts, foundry_binary

__all__ = [
    "BUILD_COMMAND",
    "FOUNDRY_DIR",
    "ArtifactError",
    "BuildMissingError",
    "BuildStaleError",
    "ContractArtifact",
    "ContractsError",
    "ToolchainError",
    "build_contracts",
    "foundry_binary",
    "load_artifact",
]
