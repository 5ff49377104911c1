"""``gym swarm``: look at a volunteer run from outside (docs/swarm.md).

    gym swarm peers RUN --initial-peers MADDR [--watch SECONDS]

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
    watch: Annotated[float | None, typer.Option(
        metavar="SECONDS", min=0.5, max=3600,
        help="Refresh every SECONDS until every peer is done or silent (or Ctrl-C): a live "
             "table on a terminal, a new table at each change otherwise.")] = None,
) -> None:
    """List the peers of a run as the swarm's DHT holds them: each peer's address, the
    collaborative step and samples of its latest contribution record, its samples per second,
    how long ago it republished, how many of the run's peers banned it (signed evidence of a
    poisoned or equivocated update: docs/swarm.md "Hostile peers"; its records are refused),
    and whether it is training, done or silent (no record for 15 s: stopped or unreachable).
    Joins as a client: trains nothing, serves nothing."""
    import time

    from trainer.swarm.peer import SwarmWatcher

    with SwarmWatcher(run, initial_peers) as watcher:
        time.sleep(2.0)  # let the routing table fill before the first lookup
        rows = watcher.rows()
        if watch is None:
            if not rows:
                console.print(f"run {run}: no peer found through {', '.join(initial_peers)}",
                              highlight=False)
                return
            print_table(peers_table(run, rows), console)
            return
        try:
            _watch(watcher, run, rows, watch)
        except KeyboardInterrupt:
            pass


def _watch(watcher, run: str, rows: list[dict], every: float) -> None:
    """Redraw the table every ``every`` seconds until no peer is training (or, once some were
    seen, none is left in the DHT)."""
    import time

    from rich.live import Live

    seen = bool(rows)

    def finished(rows: list[dict]) -> bool:
        nonlocal seen
        seen = seen or bool(rows)
        return seen and all(r["state"] != "training" for r in rows)

    if console.is_terminal:
        with Live(peers_table(run, rows), console=console, auto_refresh=False) as live:
            while not finished(rows):
                time.sleep(every)
                rows = watcher.rows()
                live.update(peers_table(run, rows), refresh=True)
        return
    shown = None
    while True:
        now = [{k: v for k, v in r.items() if k != "seen_s_ago"} for r in rows]
        if now != shown:  # in a log, a table only when a peer moved
            shown = now
            print_table(peers_table(run, rows), console)
        if finished(rows):
            return
        time.sleep(every)
        rows = watcher.rows()


def peers_table(run: str, rows: list[dict]) -> Table:
    table = Table(title=f"swarm {run}: {len(rows)} peers")
    for name in ("peer", "address", "step", "samples", "samples/s", "seen", "banned by",
                 "state"):
        table.add_column(name, justify="right" if name in ("step", "samples", "samples/s",
                                                         "seen") else "left")
    for row in rows:
        rate = row["samples_per_s"]
        banned = row.get("banned_by", 0)
        table.add_row(row["peer_id"], row["address"], f"{row['step']}/{row['max_steps']}",
                      str(row["samples"]), "-" if rate is None else f"{rate:.1f}",
                      f"{row['seen_s_ago']:.0f} s ago",
                      f"{banned} peer{'s' if banned != 1 else ''}" if banned else "-",
                      row["state"])
    return table
