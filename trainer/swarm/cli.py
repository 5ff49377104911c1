"""``gym swarm``: look at a volunteer run from outside (docs/swarm.md).

    gym swarm peers RUN --initial-peers MADDR

Importing this module imports neither torch nor hivemind; the command loads hivemind when it
runs.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from ledger.tables import CliConsole, print_table

app = typer.Typer(help="Volunteer training runs (gym train --swarm RUN): list their peers.",
                  no_args_is_help=True)
console = CliConsole()


@app.command("peers")
def peers(
    run: Annotated[str, typer.Argument(metavar="RUN", help="The run's name (--swarm RUN).")],
    initial_peers: Annotated[list[str], typer.Option(
        metavar="MADDR", envvar="GYM_SWARM_PEERS",
        help="A peer of the run (the `swarm peer:` line it printed); repeatable.")],
) -> None:
    """List the peers of a run as the swarm's DHT holds them: each peer's address, the
    collaborative step and samples of its latest contribution record, its samples per second,
    how long ago it republished, and whether it is training, done or silent (no record for
    15 s: stopped or unreachable). Joins as a client: trains nothing, serves nothing."""
    from trainer.swarm.peer import swarm_peers

    rows = swarm_peers(run, initial_peers)
    if not rows:
        console.print(f"run {run}: no peer found through {', '.join(initial_peers)}",
                      highlight=False)
        return
    table = Table(title=f"swarm {run}: {len(rows)} peers")
    for name in ("peer", "address", "step", "samples", "samples/s", "seen", "state"):
        table.add_column(name, justify="right" if name in ("step", "samples", "samples/s",
                                                         "seen") else "left")
    for row in rows:
        rate = row["samples_per_s"]
        table.add_row(row["peer_id"], row["address"], f"{row['step']}/{row['max_steps']}",
                      str(row["samples"]), "-" if rate is None else f"{rate:.1f}",
                      f"{row['seen_s_ago']:.0f} s ago", row["state"])
    print_table(table, console)
