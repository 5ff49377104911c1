"""``gym contracts``: build the Solidity contracts and show what the build holds."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from contracts.artifacts import OUT_DIR, load_artifact
from contracts.toolchain import FOUNDRY_DIR, build_contracts

app = typer.Typer(help="Build and inspect the Solidity contracts (Foundry, offline).",
                  no_args_is_help=True)
console = Console()


@app.command()
def build() -> None:
    """Compile the contracts with forge (incremental; solc-js, no network)."""
    with console.status("forge build"):
        build_contracts()
    console.print(f"built contracts in {FOUNDRY_DIR / 'out'}")


@app.command("list")
def list_contracts() -> None:
    """List the compiled contracts with their source and runtime code size."""
    table = Table("contract", "source", "runtime bytes")
    for path in sorted(OUT_DIR.glob("*.sol/*.json")):
        if not (FOUNDRY_DIR / "src" / path.parent.name).exists():
            continue  # tests and libraries from node_modules
        artifact = load_artifact(path.stem)
        table.add_row(artifact.name, artifact.source, str(len(artifact.deployed_bytecode) // 2 - 1))
    console.print(table)
